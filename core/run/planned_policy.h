// What `--checkpoint plan:BUDGET` decided for a run (core/plan/plan_policy.h decides it): the
// budget asked for, the segment list chosen, what the planner predicted for it and where the
// chain's costs came from. It stays with the run, beside what the run then measured.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rematlab {

struct PlannedPolicy {
  std::string requested;  // "plan:200MiB"
  int64_t budget_bytes = 0;
  std::string chosen;                // the segment list (canonical); empty when no plan fits
  int64_t predicted_peak_bytes = 0;  // activations, above the model states (the fullest stage's)
  // A pipeline's: each stage's predicted peak, as predicted_peak_bytes (empty for one chain).
  std::vector<int64_t> predicted_stage_peak_bytes;
  double predicted_step_ms = 0.0;
  int64_t smallest_feasible_bytes = 0;  // when no plan fits: the least budget one would
  double profile_ms = 0.0;              // how long measuring the chain took (then or now)
  std::string profile_source;  // "measured for this run", or where the reused costs came from
};

nlohmann::json to_json(const PlannedPolicy& planned);
PlannedPolicy planned_policy_from_json(const nlohmann::json& json);  // tolerant of missing keys

}  // namespace rematlab
