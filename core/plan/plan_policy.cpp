#include "plan/plan_policy.h"

#include <chrono>

#include "checkpoint/checkpoint_policy.h"
#include "plan/chain_profile.h"
#include "plan/profile_key.h"
#include "plan/segment_planner.h"

namespace rematlab::plan {

std::optional<PlannedPolicy> resolve_planned_policy(RunConfig& config,
                                                    const std::atomic<bool>* cancel) {
  const CheckpointPolicy policy = CheckpointPolicy::parse(config.checkpoint);
  if (!policy.is_plan()) return std::nullopt;
  PlannedPolicy planned;
  planned.requested = config.checkpoint;
  planned.budget_bytes = policy.plan_budget_bytes();
  ChainCosts costs;
  const std::shared_ptr<const KnownChainCosts>& known = config.known_chain_costs;
  if (known && known->key == profile_key(config, ProfileOptions{}.repeats)) {
    costs = known->costs;
    planned.profile_ms = known->profile_ms;
    planned.profile_source = known->source;
  } else {
    const auto start = std::chrono::steady_clock::now();
    ProfileOptions options;
    options.cancel = cancel;
    costs = profile_chain(config, options);
    planned.profile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    planned.profile_source = "measured for this run";
  }
  if (const auto chosen = plan_under_budget(costs, planned.budget_bytes)) {
    planned.chosen = chosen->plan.canonical();
    planned.predicted_peak_bytes = chosen->prediction.peak_bytes;
    planned.predicted_step_ms = chosen->prediction.step_ms;
    config.checkpoint = planned.chosen;
  } else {
    planned.smallest_feasible_bytes = smallest_feasible_budget(costs);
  }
  return planned;
}

}  // namespace rematlab::plan
