// --pp-split balanced: the blocks of each pipeline chunk chosen from the chain's measured costs
// (plan/chain_profile.h) rather than by stage_blocks.h's rule, which counts blocks only. The
// first chunk also runs the embedding and the last the head and loss; with a large vocabulary
// the head alone can cost several blocks, and a stage idles for whatever its neighbour takes
// longer.
#pragma once

#include <cstdint>
#include <vector>

#include "run/chain_costs.h"

namespace rematlab::plan {

struct BalancedSplit {
  std::vector<int64_t> chunk_blocks;  // chain order, as --pp-split takes them
  std::vector<double> chunk_ms;       // each chunk's forwards and backwards over the step
};

// Contiguous chunks of at least one block each whose slowest chunk (a block's two sublayers'
// forward and backward; the embedding's on the first chunk, the head's and loss's on the last)
// is as fast as any split makes it; of equal splits, the one that packs the most blocks into
// the last chunk, then the one before it, and so on, leaving the first chunks (whose stages hold
// the most micro-batches in flight) the fewest. Under virtual stages it balances the chunks, not
// the sums of each stage's chunks. Ignores recomputation (the policy, a plan: above all, is
// chosen for the split) and the transfers between stages. Needs 1 ≤ chunks ≤ blocks, two
// sublayers a block in `costs` and finite, non-negative times; throws std::invalid_argument
// otherwise.
BalancedSplit balanced_chunk_blocks(const ChainCosts& costs, int64_t chunks);

}  // namespace rematlab::plan
