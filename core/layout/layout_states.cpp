#include "layout/layout_states.h"

#include "estimate/model_state.h"

namespace rematlab::layout {

ModelStates model_states(int64_t parameters, const Layout& layout, Precision precision,
                         bool fp32_gradients, int64_t frozen_bytes) {
  const int64_t w = estimate::bytes_per_value(precision);
  const int64_t g = fp32_gradients ? 4 : w;
  const int64_t shard = layout.dp * layout.cp;  // ranks that hold the same weights
  auto sharded = [&](int64_t bytes, int from_stage) {
    return layout.zero >= from_stage ? (bytes + shard - 1) / shard : bytes;
  };
  ModelStates states;
  MemoryParts& device = states.device;
  device.weights = sharded(parameters * w, 3) + frozen_bytes;
  device.gradients = sharded(parameters * g, 2);
  device.master = w < 4 ? sharded(parameters * 4, 1) : 0;
  device.optimizer = sharded(parameters * 8, 1);
  if (layout.offload == Offload::kOptimizer || layout.offload == Offload::kParameters) {
    states.host_bytes += device.gradients + device.master + device.optimizer;
    device.gradients = device.master = device.optimizer = 0;
  }
  if (layout.offload == Offload::kParameters) {
    states.host_bytes += device.weights;
    device.weights = 0;
  }
  return states;
}

}  // namespace rematlab::layout
