#include "run/batch_probe.h"

#include <stdexcept>

#include "common/json_text.h"

namespace rematlab {

nlohmann::json to_json(const BatchProbe& probe) {
  return {{"batch", probe.batch},
          {"status", to_string(probe.status)},
          {"peak_bytes", probe.peak_bytes}};
}

BatchProbe batch_probe_from_json(const nlohmann::json& json) {
  // From another process: integers in range, or no probe (a float or 1e30 would convert silently).
  for (const char* key : {"batch", "peak_bytes"}) {
    if (!json.at(key).is_number_integer() || json.at(key).get<int64_t>() < 0) {
      throw std::invalid_argument(std::string("probe ") + key + " " + brief_json(json.at(key)) +
                                  " is not a count");
    }
  }
  BatchProbe probe;
  probe.batch = json.at("batch").get<int64_t>();
  const std::optional<RunStatus> status = parse_run_status(json.at("status").get<std::string>());
  if (!status) throw std::invalid_argument("unknown run status " + brief_json(json.at("status")));
  probe.status = *status;
  probe.peak_bytes = json.at("peak_bytes").get<int64_t>();
  if (json.contains("message")) probe.message = json.at("message").get<std::string>();
  return probe;
}

}  // namespace rematlab
