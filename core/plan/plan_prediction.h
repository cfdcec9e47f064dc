// The peak activation memory and step time a segment plan will have, from the chain's costs,
// following how segment_checkpoint runs a plan: a kept stage holds what it keeps from its forward
// to its backward; a recomputed segment holds only its output until backward reaches it, then
// recomputes its stages with grad (the last one up to its tail: early stop) and runs their
// backward one by one.
#pragma once

#include <cstdint>

#include "checkpoint/checkpoint_policy.h"
#include "run/chain_costs.h"

namespace rematlab::plan {

struct PlanPrediction {
  int64_t peak_bytes = 0;  // above the model states
  double step_ms = 0.0;
  double recompute_ms = 0.0;  // of which recomputation
  // What a micro-batch holds from the end of its forward to its backward (the head's peak
  // aside): what a pipeline stage keeps of each micro-batch in flight.
  int64_t held_bytes = 0;
};

// What recomputing `stage` costs: its whole forward, or, as the last of its segment, its forward
// up to the tail (early stop: the segment's output is already held).
double recompute_ms(const StageCost& stage, bool last_of_segment);

// `plan` must cover the chain (segments over [0, stages)); attention-core recomputation is not
// a segment plan and is not predicted here.
PlanPrediction predict_plan(const ChainCosts& costs, const CheckpointPlan& plan);

}  // namespace rematlab::plan
