#include "layout/sharded_transfers.h"

#include <algorithm>

#include "layout/collective_time.h"

namespace rematlab::layout {

int reduction_phases(int zero, bool engine, bool gloo) {
  if (zero == 0) return 2;
  if (engine && (zero == 1 || gloo)) return 2;
  return 1;
}

ShardedTransfers block_transfers(const Cluster& cluster, const Layout& layout,
                                 const StateGroup& group, const ShardedBlocks& blocks, int64_t w,
                                 int64_t g) {
  const double passes = blocks.recompute_interval > 0 ? 3.0 : 2.0;
  const int64_t span = layout.tp * layout.cp * layout.dp;
  const double units = static_cast<double>(std::max<int64_t>(blocks.blocks, 1));
  const double P = static_cast<double>(group.parameters);
  ShardedTransfers transfers;
  transfers.seconds =
      units * (passes * all_gather_seconds(cluster, group.ranks, span, P * w / units) +
               all_gather_seconds(cluster, group.ranks, span, P * g / units));
  transfers.first = transfers.seconds / units;
  transfers.shard_bytes_gathered = passes * P * w / static_cast<double>(group.ranks);
  return transfers;
}

ShardedTransfers engine_unit_transfers(const Cluster& cluster, const Layout& layout,
                                       const StateGroup& group, const ShardedBlocks& blocks,
                                       int64_t w, int64_t g, bool gloo) {
  const int64_t span = layout.tp * layout.cp * layout.dp;
  const double L = static_cast<double>(blocks.blocks);
  const double A = static_cast<double>(blocks.attention_parameters);
  const double M = static_cast<double>(blocks.mlp_parameters);
  const double P = static_cast<double>(group.parameters);
  const double beyond = std::max(0.0, P - L * (A + M));
  const double ends = beyond > 0.0 ? 1.0 : 0.0;  // the unit beyond the blocks, where it has one
  // Forward and backward.
  double gathers = ends + 4.0 * L;
  double gathered = beyond + 2.0 * L * (A + M);
  if (blocks.recompute_interval > 0 && blocks.blocks > 0) {
    // Segments of K blocks, the last perhaps shorter, each ending on a block's MLP.
    const int64_t k = blocks.recompute_interval;
    const double segments = static_cast<double>((blocks.blocks + k - 1) / k);
    gathers += 2.0 * L - segments;
    gathered += L * (A + M) - segments * M;
  }
  const double reductions = ends + 2.0 * L;
  ShardedTransfers transfers;
  if (gathers == 0.0) return transfers;
  const double gather = all_gather_seconds(cluster, group.ranks, span, gathered * w / gathers);
  const int phases = reduction_phases(3, true, gloo);
  transfers.seconds = gathers * gather + reductions * ring_seconds(cluster, group.ranks, span,
                                                                   phases, P * g / reductions);
  // Prefetching cannot hide the first gather of forward, the unit beyond the blocks where there
  // is one (the embeddings, the largest unit), nor that unit's reduction, the last of backward.
  transfers.first = ends > 0.0 ? all_gather_seconds(cluster, group.ranks, span, beyond * w) +
                                     ring_seconds(cluster, group.ranks, span, phases, beyond * g)
                               : gather;
  transfers.shard_bytes_gathered = gathered * w / static_cast<double>(group.ranks);
  return transfers;
}

}  // namespace rematlab::layout
