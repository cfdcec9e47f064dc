#include "estimate/sharded_states.h"

#include "common/errors.h"
#include "run/shard_mode.h"

namespace rematlab::estimate {
namespace {

// A rank's share of `bytes` split in world_size equal parts, rounded up.
int64_t share(int64_t bytes, int64_t world_size) { return (bytes + world_size - 1) / world_size; }

}  // namespace

ModelStateBytes per_rank_model_states(const ModelStateBytes& whole, int64_t world_size,
                                      const std::string& shard) {
  if (world_size < 1) throw InvalidInput("--nproc", "must be at least 1");
  const ShardMode mode = parse_shard(shard);
  ModelStateBytes rank = whole;
  if (mode == ShardMode::kNone) return rank;
  rank.optimizer = share(whole.optimizer, world_size);
  rank.master = share(whole.master, world_size);
  if (mode == ShardMode::kGradients || mode == ShardMode::kParameters) {
    rank.gradients = share(whole.gradients, world_size);
  }
  if (mode == ShardMode::kParameters) rank.weights = share(whole.weights, world_size);
  return rank;
}

}  // namespace rematlab::estimate
