// `--checkpoint plan:BUDGET`: when a run starts, its chain is profiled on its own device and
// configuration, and the fastest segment list whose predicted activation peak fits BUDGET is
// what it trains with. What was planned stays with the run, beside what it then measured.
#pragma once

#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "train/run_config.h"

namespace rematlab::plan {

struct PlannedPolicy {
  std::string requested;  // "plan:200MiB"
  int64_t budget_bytes = 0;
  std::string chosen;                // the segment list (canonical); empty when no plan fits
  int64_t predicted_peak_bytes = 0;  // activations, above the model states
  double predicted_step_ms = 0.0;
  int64_t smallest_feasible_bytes = 0;  // when no plan fits: the least budget one would
  double profile_ms = 0.0;              // how long measuring the chain took (then or now)
  std::string profile_source;  // "measured for this run", or where the reused costs came from
};

// For a config whose checkpoint is plan:BUDGET: profiles it (or takes config.known_chain_costs
// when their key matches it), plans, and sets config.checkpoint to the chosen list (left as it
// is when none fits). Nothing for any other policy. Profiling is stopped by `cancel`
// (ProfileCancelled).
std::optional<PlannedPolicy> resolve_planned_policy(RunConfig& config,
                                                    const std::atomic<bool>* cancel = nullptr);

nlohmann::json to_json(const PlannedPolicy& planned);
PlannedPolicy planned_policy_from_json(const nlohmann::json& json);  // tolerant of missing keys

}  // namespace rematlab::plan
