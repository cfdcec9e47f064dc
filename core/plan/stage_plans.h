// plan:BUDGET over pipeline stages: each stage's blocks planned for the micro-batches it holds
// in flight. Stage s of P keeps what the forwards of up to min(P − s, M) micro-batches saved
// (more, in chunks, under the interleaved schedule) while one of them runs through its backward:
// the first stage must recompute more to fit the budget a later one fits without recomputing.
// The result is a stages: policy, one segment list per model chunk in chain order, each named
// from its own first sublayer (checkpoint_policy.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_policy.h"
#include "run/chain_costs.h"

namespace rematlab::plan {

struct PipelineShape {
  int64_t stages = 1;
  int64_t chunks = 1;  // model chunks a stage (virtual stages)
  int64_t micro_batches = 1;
  int64_t layers = 1;
  std::vector<int64_t> chunk_blocks;  // --pp-split, chain order; empty: stage_blocks.h's rule
  // The most of `weights` (one a chunk of `stage`) its schedule holds at once:
  // parallel::PipelineSchedule::most_held, given here because the schedule lives above this
  // module.
  std::function<int64_t(int64_t stage, const std::vector<int64_t>& weights)> most_held;
};

struct StagePlan {
  std::vector<CheckpointPlan> chunks;  // this stage's chunks, each over its own sublayers
  int64_t peak_bytes = 0;              // predicted, above the stage's model states
  double compute_ms = 0.0;  // its chunks' forwards, backwards and recomputation, over the step
};

struct PipelinePlan {
  std::string policy;  // stages:…/…, the chunks in chain order
  std::vector<StagePlan> stages;
  int64_t peak_bytes = 0;   // the fullest stage's
  double compute_ms = 0.0;  // the slowest stage's
};

// A stage's peak: the most of `held` (each of its chunks' bytes kept from a forward to its
// backward) its schedule keeps at once, and `rise` above that; or the largest int64 where that
// could overflow, which no budget fits. A stage holds at most min(V·M, (V + 2)·P) chunks'
// passes in flight (PipelineSchedule::most_in_flight), each at most all its chunks hold; a kept
// profile's chain holds at most 1 PiB, but P may be in the thousands.
int64_t stage_peak_bytes(const std::vector<int64_t>& held, int64_t rise, int64_t stage,
                         const PipelineShape& shape);

// `costs`: the whole chain's, as one process profiles it. Nothing when some stage fits no plan
// under `budget_bytes` (activations only, as plan:'s budget). Both searches throw
// ProfileCancelled once `cancel` is set (a Stop in the window while they weigh a large model).
std::optional<PipelinePlan> plan_stages_under_budget(const ChainCosts& costs,
                                                     const PipelineShape& shape,
                                                     int64_t budget_bytes,
                                                     const std::atomic<bool>* cancel = nullptr);

// A budget every stage fits a plan under, found by bisection to within one part in a thousand
// of where fitting stops (the sweep's grid moves with the budget, so fitting is not strictly
// monotonic: a little less may fit too).
int64_t smallest_stages_budget(const ChainCosts& costs, const PipelineShape& shape,
                               const std::atomic<bool>* cancel = nullptr);

}  // namespace rematlab::plan
