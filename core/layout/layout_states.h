// What one GPU holds of the model states under a layout: weights, gradients, the fp32 master
// copy and AdamW's moments, each divided by the ZeRO stage that shards it over the dp × cp ranks
// holding the same weights (Rajbhandari et al.), and what offloading moves to host memory.
#pragma once

#include <cstdint>

#include "layout/layout.h"

namespace rematlab::layout {

struct ModelStates {
  MemoryParts device;      // weights, gradients, master and optimizer set; the rest zero
  int64_t host_bytes = 0;  // offloaded
};

// `parameters`: the GPU's part of the model that trains (one tensor rank's of one pipeline
// stage). Gradients take 4 bytes when `fp32_gradients`, else the precision's. `frozen_bytes`: a
// fine-tuned model's frozen base as stored on that GPU (whole on every data rank: weights only).
ModelStates model_states(int64_t parameters, const Layout& layout, Precision precision,
                         bool fp32_gradients, int64_t frozen_bytes = 0);

}  // namespace rematlab::layout
