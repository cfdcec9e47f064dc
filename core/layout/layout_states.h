// What one GPU holds of the model states under a layout: weights, gradients, the fp32 master
// copy and AdamW's moments, each divided by the ZeRO stage that shards it over the dp × cp ranks
// holding the same weights (Rajbhandari et al.), and what offloading moves to host memory.
#pragma once

#include <cstdint>
#include <vector>

#include "layout/layout.h"

namespace rematlab::layout {

// Whether the optimizer's states (and with them perhaps the weights) live in host memory.
inline bool states_offloaded(const Layout& layout) {
  return layout.offload == Offload::kOptimizer || layout.offload == Offload::kParameters;
}

// A GPU's parameters by the data ranks that hold the same ones, which ZeRO shards them over and
// their gradients are reduced over: the experts' under expert parallelism (dp·cp/ep ranks) apart
// from the rest's (dp·cp). Without expert ranks, one group.
struct StateGroup {
  int64_t ranks = 1;
  int64_t parameters = 0;
};
std::vector<StateGroup> state_groups(const Layout& layout, int64_t parameters,
                                     int64_t expert_parameters);

struct ModelStates {
  MemoryParts device;      // weights, gradients, master and optimizer set; the rest zero
  int64_t host_bytes = 0;  // offloaded
};

// `parameters`: the GPU's part of the model that trains (one tensor rank's of one pipeline
// stage). Gradients take 4 bytes when `fp32_gradients`, else the precision's. `frozen_bytes`: a
// fine-tuned model's frozen base as stored on that GPU (whole on every data rank: weights only).
// `expert_parameters`: of `parameters`, the experts' the GPU holds under expert parallelism; the
// same experts are on dp·cp/ep ranks only, so ZeRO shards their states over those.
ModelStates model_states(int64_t parameters, const Layout& layout, Precision precision,
                         bool fp32_gradients, int64_t frozen_bytes = 0,
                         int64_t expert_parameters = 0);

}  // namespace rematlab::layout
