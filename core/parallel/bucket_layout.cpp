#include "parallel/bucket_layout.h"

#include <algorithm>

#include "common/errors.h"

namespace rematlab::parallel {

std::vector<BucketLayout> plan_buckets(const std::vector<int64_t>& numels, int64_t element_size,
                                       int64_t bucket_bytes, int world_size) {
  if (bucket_bytes <= 0) throw InvalidInput("--bucket-size", "must be positive");
  const int64_t capacity = std::max<int64_t>(1, bucket_bytes / std::max<int64_t>(1, element_size));
  std::vector<BucketLayout> buckets;
  BucketLayout current;
  auto close = [&] {
    if (current.slots.empty()) return;
    current.padded_numel = (current.numel + world_size - 1) / world_size * world_size;
    current.shard_numel = current.padded_numel / world_size;
    buckets.push_back(current);
    current = BucketLayout{};
  };
  for (std::size_t i = numels.size(); i-- > 0;) {
    const int64_t numel = numels[i];
    if (numel <= 0) continue;
    if (current.numel > 0 && current.numel + numel > capacity) close();
    current.slots.push_back({i, current.numel, numel});
    current.numel += numel;
  }
  close();
  return buckets;
}

}  // namespace rematlab::parallel
