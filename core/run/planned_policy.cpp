#include "run/planned_policy.h"

#include <limits>

namespace rematlab {
namespace {

// The stages' predicted peaks, all or none: a list with one value made negative or no count
// reads as none rather than as the others' alone. (Its length is the run's stages; a record read
// without the run's config cannot check that, and what shows it pairs them by rank.)
std::vector<int64_t> stage_peaks(const nlohmann::json& planned) {
  const auto stages = planned.find("predicted_stage_peak_bytes");
  if (stages == planned.end() || !stages->is_array()) return {};
  std::vector<int64_t> peaks;
  for (const nlohmann::json& peak : *stages) {
    const bool counts = peak.is_number_unsigned()
                            ? peak.get<uint64_t>() <= std::numeric_limits<int64_t>::max()
                            : peak.is_number_integer() && peak.get<int64_t>() >= 0;
    if (!counts) return {};
    peaks.push_back(peak.get<int64_t>());
  }
  return peaks;
}

}  // namespace

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
  planned.predicted_stage_peak_bytes = stage_peaks(json);
  return planned;
}

}  // namespace rematlab
