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
    const int64_t middle = (layers + stages - 1) / stages;
    const int64_t ends = layers - (stages - 2) * middle;
    if (ends >= 2) {
      std::fill(sizes.begin(), sizes.end(), middle);
      sizes.front() = ends / 2;
      sizes.back() = ends - ends / 2;
    } else {
      // Too few left for the ends (105 blocks in 70 chunks): every stage ⌊L/P⌋, the rest one
      // more each in the middle (fewer than P − 2 of them then), spread evenly from the centre
      // of each share, so that interleaved stages, which hold every P-th chunk, get them in turn.
      std::fill(sizes.begin(), sizes.end(), layers / stages);
      const int64_t extras = layers % stages;
      for (int64_t extra = 0; extra < extras; ++extra) {
        ++sizes[static_cast<std::size_t>(1 + (2 * extra + 1) * (stages - 2) / (2 * extras))];
      }
    }
  }
  std::vector<int64_t> bounds{0};
  for (int64_t size : sizes) bounds.push_back(bounds.back() + size);
  return bounds;
}

std::vector<int64_t> chunk_block_bounds(int64_t layers, int64_t chunks,
                                        const std::vector<int64_t>& given) {
  if (given.empty()) return stage_block_bounds(layers, chunks);
  if (static_cast<int64_t>(given.size()) != chunks) {
    throw std::invalid_argument("a split of another number of chunks");
  }
  std::vector<int64_t> bounds{0};
  for (int64_t blocks : given) {
    if (blocks < 1 || blocks > layers - bounds.back()) {
      throw std::invalid_argument("a split whose chunks are not blocks of the model");
    }
    bounds.push_back(bounds.back() + blocks);
  }
  if (bounds.back() != layers) throw std::invalid_argument("a split of another model's blocks");
  return bounds;
}

}  // namespace rematlab
