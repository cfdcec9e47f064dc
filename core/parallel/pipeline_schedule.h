// Pipeline parallelism's plan of work, apart from any tensor: the order in which a stage runs its
// micro-batches' forward and backward passes (which blocks it runs: checkpoint/stage_blocks.h).
#pragma once

#include <cstdint>
#include <vector>

#include "checkpoint/stage_blocks.h"

namespace rematlab::parallel {

struct PipelineAction {
  bool forward = true;
  int64_t micro_batch = 0;
};

// 1F1B: stage s of P first runs the forward passes of min(P − 1 − s, M) micro-batches, then
// alternates one forward and one backward until every forward ran, then the backwards left.
// Both kinds run in micro-batch order, so gradients accumulate in the order one process adds
// them. Needs M ≥ 1.
std::vector<PipelineAction> one_forward_one_backward(int64_t stage, int64_t stages,
                                                     int64_t micro_batches);

// The most micro-batches whose forward ran and whose backward did not, at once, on stage s
// under 1F1B: min(P − s, M). The first stage holds the most.
int64_t micro_batches_in_flight(int64_t stage, int64_t stages, int64_t micro_batches);

}  // namespace rematlab::parallel
