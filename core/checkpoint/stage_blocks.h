// Which blocks each of a model's stages (or, with virtual stages, each of its P·V chunks in chain
// order) holds: the split pipeline stages run (parallel/), the stages:P0/P1/… checkpoint policy
// plans (checkpoint_policy.h) and the layout planner weighs.
#pragma once

#include <cstdint>
#include <vector>

namespace rematlab {

// Stage s runs blocks [bounds[s], bounds[s + 1]): two stages split the layers in halves (the
// second taking an odd one); more have equal middle stages and split what is left between the
// first and the last, which also run the embedding and the head (where that leaves them less
// than a block each, every stage ⌊L/P⌋ and the rest one more each in the middle). The layout
// planner weighs the same split. Needs 1 ≤ stages ≤ layers.
std::vector<int64_t> stage_block_bounds(int64_t layers, int64_t stages);

// The bounds of `chunks` chunks: `given` blocks each in chain order (--pp-split), or by the rule
// above when none are given. Throws std::invalid_argument for a list of another length or sum,
// or a chunk of no block (RunConfig's validate says which in the user's words first).
std::vector<int64_t> chunk_block_bounds(int64_t layers, int64_t chunks,
                                        const std::vector<int64_t>& given);

}  // namespace rematlab
