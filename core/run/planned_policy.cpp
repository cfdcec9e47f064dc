#include "run/planned_policy.h"

namespace rematlab {

nlohmann::json to_json(const PlannedPolicy& planned) {
  nlohmann::json json = {{"requested", planned.requested},
                         {"budget_bytes", planned.budget_bytes},
                         {"chosen", planned.chosen},
                         {"predicted_peak_bytes", planned.predicted_peak_bytes},
                         {"predicted_step_ms", planned.predicted_step_ms},
                         {"smallest_feasible_bytes", planned.smallest_feasible_bytes},
                         {"profile_ms", planned.profile_ms},
                         {"profile_source", planned.profile_source}};
  if (!planned.predicted_stage_peak_bytes.empty()) {
    json["predicted_stage_peak_bytes"] = planned.predicted_stage_peak_bytes;
  }
  return json;
}

PlannedPolicy planned_policy_from_json(const nlohmann::json& json) {
  PlannedPolicy planned;
  if (!json.is_object()) return planned;
  planned.requested = json.value("requested", "");
  planned.budget_bytes = json.value("budget_bytes", int64_t{0});
  planned.chosen = json.value("chosen", "");
  planned.predicted_peak_bytes = json.value("predicted_peak_bytes", int64_t{0});
  planned.predicted_step_ms = json.value("predicted_step_ms", 0.0);
  planned.smallest_feasible_bytes = json.value("smallest_feasible_bytes", int64_t{0});
  planned.profile_ms = json.value("profile_ms", 0.0);
  planned.profile_source = json.value("profile_source", "");
  const auto stages = json.find("predicted_stage_peak_bytes");
  if (stages != json.end() && stages->is_array()) {
    for (const nlohmann::json& peak : *stages) {
      if (peak.is_number_integer())
        planned.predicted_stage_peak_bytes.push_back(peak.get<int64_t>());
    }
  }
  return planned;
}

}  // namespace rematlab
