// How parameters are grouped for communication: buckets of at most a given size, filled in the
// reverse order of the parameters' registration (about the order backward produces their
// gradients), each one flat buffer padded to a multiple of the world size so that it splits
// into equal shards, shard r belonging to rank r. No LibTorch here.
#pragma once

#include <cstdint>
#include <vector>

namespace rematlab::parallel {

struct BucketSlot {
  std::size_t param = 0;  // index into the parameter list
  int64_t offset = 0;     // first element in the bucket's flat buffer
  int64_t numel = 0;
};

struct BucketLayout {
  std::vector<BucketSlot> slots;
  int64_t numel = 0;         // elements of its parameters
  int64_t padded_numel = 0;  // numel rounded up to a multiple of the world size
  int64_t shard_numel = 0;   // padded_numel / world size

  int64_t shard_begin(int rank) const { return rank * shard_numel; }
};

// Elements [begin, begin + count) of parameter `param` in its flattened (row-major) order.
struct ElementRange {
  std::size_t param = 0;
  int64_t begin = 0;
  int64_t count = 0;
};

// A run of elements in one rank's shard of bucket `bucket`: [offset, offset + count) of it.
struct ShardPiece {
  std::size_t bucket = 0;
  int64_t offset = 0;
  int64_t count = 0;
};

// The parts of `ranges` that lie in `rank`'s shards of `buckets`, in the order of `ranges`.
std::vector<ShardPiece> pieces_in_shards(const std::vector<BucketLayout>& buckets, int rank,
                                         const std::vector<ElementRange>& ranges);

// A parameter larger than `bucket_bytes` gets a bucket of its own, and a bucket holds parameters
// of one group only (`groups` indexed as `numels`; empty: one group). Parameters of zero elements
// are left out. Throws InvalidInput("--bucket-size") when bucket_bytes is not positive.
std::vector<BucketLayout> plan_buckets(const std::vector<int64_t>& numels, int64_t element_size,
                                       int64_t bucket_bytes, int world_size,
                                       const std::vector<int64_t>& groups = {});

}  // namespace rematlab::parallel
