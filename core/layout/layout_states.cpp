#include "layout/layout_states.h"

#include "estimate/model_state.h"

namespace rematlab::layout {

std::vector<StateGroup> state_groups(const Layout& layout, int64_t parameters,
                                     int64_t expert_parameters) {
  const int64_t shard = layout.dp * layout.cp;
  if (layout.ep == 1 || expert_parameters == 0) return {{shard, parameters}};
  std::vector<StateGroup> groups = {{shard, parameters - expert_parameters}};
  groups.push_back({shard / layout.ep, expert_parameters});
  return groups;
}

ModelStates model_states(int64_t parameters, const Layout& layout, Precision precision,
                         bool fp32_gradients, int64_t frozen_bytes, int64_t expert_parameters) {
  const int64_t w = estimate::bytes_per_value(precision);
  const int64_t g = fp32_gradients ? 4 : w;
  const std::vector<StateGroup> groups = state_groups(layout, parameters, expert_parameters);
  // Each group's bytes over the ranks that hold them, split from ZeRO `from_stage` on.
  auto sharded = [&](int64_t bytes_per_parameter, int from_stage) {
    if (layout.zero < from_stage) return parameters * bytes_per_parameter;
    int64_t bytes = 0;
    for (const auto& [ranks, held] : groups) {
      bytes += (held * bytes_per_parameter + ranks - 1) / ranks;
    }
    return bytes;
  };
  ModelStates states;
  MemoryParts& device = states.device;
  device.weights = sharded(w, 3) + frozen_bytes;
  device.gradients = sharded(g, 2);
  device.master = w < 4 ? sharded(4, 1) : 0;
  device.optimizer = sharded(8, 1);
  if (states_offloaded(layout)) {
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
