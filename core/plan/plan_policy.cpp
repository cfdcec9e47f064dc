#include "plan/plan_policy.h"

#include <chrono>

#include "checkpoint/checkpoint_policy.h"
#include "plan/chain_profile.h"
#include "plan/profile_key.h"
#include "plan/segment_planner.h"

namespace rematlab::plan {

namespace {

// The pipeline's step: the slowest stage's compute over the step's M micro-batches and the
// bubble, (P − 1)/V micro-batches more of it; the embedding's, head's and optimizer's time
// (fixed_ms) left out.
double pipeline_step_ms(const PipelinePlan& plan, const PipelineShape& shape) {
  const double bubble = static_cast<double>(shape.stages - 1) /
                        static_cast<double>(shape.chunks * shape.micro_batches);
  return plan.compute_ms * (1.0 + bubble);
}

void choose(const ChainCosts& costs, const PipelineShape* pipeline, const std::atomic<bool>* cancel,
            PlannedPolicy& planned) {
  if (pipeline) {
    if (const auto chosen =
            plan_stages_under_budget(costs, *pipeline, planned.budget_bytes, cancel)) {
      planned.chosen = chosen->policy;
      planned.predicted_peak_bytes = chosen->peak_bytes;
      planned.predicted_step_ms = pipeline_step_ms(*chosen, *pipeline);
      for (const StagePlan& stage : chosen->stages) {
        planned.predicted_stage_peak_bytes.push_back(stage.peak_bytes);
      }
    } else {
      planned.smallest_feasible_bytes = smallest_stages_budget(costs, *pipeline, cancel);
    }
    return;
  }
  if (const auto chosen = plan_under_budget(costs, planned.budget_bytes)) {
    planned.chosen = chosen->plan.canonical();
    planned.predicted_peak_bytes = chosen->prediction.peak_bytes;
    planned.predicted_step_ms = chosen->prediction.step_ms;
  } else {
    planned.smallest_feasible_bytes = smallest_feasible_budget(costs);
  }
}

}  // namespace

bool brings_chain_costs(const RunConfig& config) {
  const std::shared_ptr<const KnownChainCosts>& known = config.known_chain_costs;
  return known && known->key == profile_key(config, ProfileOptions{}.repeats) &&
         (!config.pp_split_balanced || known->costs.has_end_times());
}

KnownChainCosts chain_costs_for(const RunConfig& config, const std::atomic<bool>* cancel) {
  if (brings_chain_costs(config)) return *config.known_chain_costs;
  KnownChainCosts measured;
  ProfileOptions options;
  options.cancel = cancel;
  measured.key = profile_key(config, options.repeats);
  const auto start = std::chrono::steady_clock::now();
  measured.costs = profile_chain(config, options);
  measured.profile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  measured.source = "measured for this run";
  return measured;
}

std::optional<PlannedPolicy> resolve_planned_policy(RunConfig& config,
                                                    const std::atomic<bool>* cancel,
                                                    const PipelineShape* pipeline) {
  const CheckpointPolicy policy = CheckpointPolicy::parse(config.checkpoint);
  if (!policy.is_plan()) return std::nullopt;
  PlannedPolicy planned;
  planned.requested = config.checkpoint;
  planned.budget_bytes = policy.plan_budget_bytes();
  const KnownChainCosts chain = chain_costs_for(config, cancel);
  planned.profile_ms = chain.profile_ms;
  planned.profile_source = chain.source;
  choose(chain.costs, pipeline, cancel, planned);
  if (!planned.chosen.empty()) config.checkpoint = planned.chosen;
  return planned;
}

}  // namespace rematlab::plan
