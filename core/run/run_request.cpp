#include "run/run_request.h"

namespace rematlab {

nlohmann::json to_json(const RunRequest& request) {
  nlohmann::json json = nlohmann::json::object();
  if (request.max_batch) {
    json["max_batch"] = {{"budget_bytes", request.max_batch->budget_bytes},
                         {"limit", request.max_batch->limit},
                         {"probe_steps", request.max_batch->probe_steps}};
  }
  if (request.plan) json["plan"] = to_json(*request.plan);
  return json;
}

RunRequest run_request_from_json(const nlohmann::json& json) {
  RunRequest request;
  if (!json.is_object()) return request;
  if (json.contains("plan") && json["plan"].is_object()) {
    request.plan = planned_policy_from_json(json["plan"]);
  }
  if (!json.contains("max_batch") || !json["max_batch"].is_object()) return request;
  const nlohmann::json& search = json["max_batch"];
  MaxBatchSpec spec;
  auto read = [&](const char* key, int64_t& field) {
    if (search.contains(key) && search[key].is_number_integer()) field = search[key].get<int64_t>();
  };
  read("budget_bytes", spec.budget_bytes);
  read("limit", spec.limit);
  read("probe_steps", spec.probe_steps);
  request.max_batch = spec;
  return request;
}

}  // namespace rematlab
