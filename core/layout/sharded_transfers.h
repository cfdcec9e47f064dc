// ZeRO's collectives as the layout planner times them: those of a cluster trained by
// Megatron-LM or FSDP, and, for a layout RematLab's own engine runs (`--runnable-here`), the
// engine's own, whose counts and kinds differ (core/parallel/fully_sharded.h, data_parallel.h).
#pragma once

#include <cstdint>

#include "layout/layout.h"
#include "layout/layout_states.h"

namespace rematlab::layout {

// Passes round the ring of the data-parallel gradient reduction: an all-reduce's 2 where every
// rank keeps the whole sum, a reduce-scatter's 1 where each keeps its shard. Megatron-LM and
// FSDP reduce-scatter from ZeRO 1 on; RematLab's engine all-reduces under ZeRO 1 (its
// optimizer shards read the whole sum) and, on Gloo, under ZeRO 2 and 3 too (it keeps its
// shard of the sum: Gloo's reduce-scatter frees on its own thread what the memory tracker saw
// allocated on the training thread).
int reduction_phases(int zero, bool engine, bool gloo);

// One pipeline rank's blocks as ZeRO 3 gathers them.
struct ShardedBlocks {
  int64_t blocks = 0;
  int64_t attention_parameters = 0;  // one block's attention sublayer's (one tensor rank's part)
  int64_t mlp_parameters = 0;        // one block's MLP sublayer's
  int64_t recompute_interval = 0;    // K of every:K; 0 when no block is recomputed
};

// ZeRO 3's collectives in one micro-batch, one after another; of them the first, which a
// prefetching rank waits for where the compute hides the rest.
struct ShardedTransfers {
  double seconds = 0.0;
  double first = 0.0;
  double shard_bytes_gathered = 0.0;  // this rank's shards the gathers send (from host memory
                                      // when the parameters are offloaded)
};

// As Megatron-LM or FSDP wrapping each block: a gather per block and pass (forward, backward and
// a recomputation's forward) and a reduce-scatter of its gradients; whatever the group holds
// beyond the blocks is gathered and reduced with them.
ShardedTransfers block_transfers(const Cluster& cluster, const Layout& layout,
                                 const StateGroup& group, const ShardedBlocks& blocks, int64_t w,
                                 int64_t g);

// As RematLab's engine: each sublayer is a unit of its own and everything beyond the blocks
// (embeddings, final norm, head) one more. Forward gathers every unit; backward gathers each
// sublayer again (the unit beyond the blocks stays whole until its gradients are reduced); a
// recomputed segment gathers its units again but its last, whose backward comes next. Every
// unit's gradients are reduced once a micro-batch: reduce-scattered, or all-reduced on Gloo.
// One state group holding every parameter: the engine shards no experts' states beside expert
// ranks (run_config refuses it).
ShardedTransfers engine_unit_transfers(const Cluster& cluster, const Layout& layout,
                                       const StateGroup& group, const ShardedBlocks& blocks,
                                       int64_t w, int64_t g, bool gloo);

}  // namespace rematlab::layout
