#include "checkpoint/stage_blocks.h"

#include <algorithm>
#include <stdexcept>

namespace rematlab {

std::vector<int64_t> stage_block_bounds(int64_t layers, int64_t stages) {
  if (stages < 1 || stages > layers) throw std::invalid_argument("stages outside [1, layers]");
  std::vector<int64_t> sizes(static_cast<std::size_t>(stages), 0);
  if (stages <= 2) {
    sizes.front() = layers / stages;
    sizes.back() = layers - (stages - 1) * (layers / stages);
  } else {
    // Equal middle stages, the rest split between the ends (Megatron-LM splits the middle
    // evenly and takes the ends' counts as given): the ends, which also hold the embedding and
    // the head, take no more than a middle stage each.
    int64_t middle = (layers + stages - 1) / stages;
    int64_t ends = layers - (stages - 2) * middle;
    if (ends < 2) {  // too few left for the ends: thinner middle stages
      middle = (layers - 2) / (stages - 2);
      ends = layers - (stages - 2) * middle;
    }
    std::fill(sizes.begin(), sizes.end(), middle);
    sizes.front() = ends / 2;
    sizes.back() = ends - ends / 2;
  }
  std::vector<int64_t> bounds{0};
  for (int64_t size : sizes) bounds.push_back(bounds.back() + size);
  return bounds;
}

}  // namespace rematlab
