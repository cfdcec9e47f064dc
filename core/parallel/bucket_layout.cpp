#include "parallel/bucket_layout.h"

#include <algorithm>
#include <stdexcept>

#include "common/errors.h"

namespace rematlab::parallel {

std::vector<BucketLayout> plan_buckets(const std::vector<int64_t>& numels, int64_t element_size,
                                       int64_t bucket_bytes, int world_size,
                                       const std::vector<int64_t>& groups) {
  if (bucket_bytes <= 0) throw InvalidInput("--bucket-size", "must be positive");
  const int64_t capacity = std::max<int64_t>(1, bucket_bytes / std::max<int64_t>(1, element_size));
  std::vector<BucketLayout> buckets;
  BucketLayout current;
  int64_t current_group = 0;
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
    const int64_t group = i < groups.size() ? groups[i] : 0;
    if (current.numel > 0 && (group != current_group || current.numel + numel > capacity)) close();
    current_group = group;
    current.slots.push_back({i, current.numel, numel});
    current.numel += numel;
  }
  close();
  return buckets;
}

std::vector<ShardPiece> pieces_in_shards(const std::vector<BucketLayout>& buckets, int rank,
                                         const std::vector<ElementRange>& ranges) {
  struct Place {
    std::size_t bucket;
    int64_t offset;
  };
  std::vector<Place> place_of;  // per parameter
  for (std::size_t index = 0; index < buckets.size(); ++index) {
    for (const BucketSlot& slot : buckets[index].slots) {
      if (place_of.size() <= slot.param) place_of.resize(slot.param + 1, Place{0, -1});
      place_of[slot.param] = Place{index, slot.offset};
    }
  }
  std::vector<ShardPiece> pieces;
  for (const ElementRange& range : ranges) {
    if (range.count <= 0) continue;
    if (range.param >= place_of.size() || place_of[range.param].offset < 0) {
      throw std::logic_error("pieces_in_shards: a parameter in no bucket");
    }
    const Place place = place_of[range.param];
    const BucketLayout& bucket = buckets[place.bucket];
    const int64_t shard_begin = bucket.shard_begin(rank);
    const int64_t first = std::max(place.offset + range.begin, shard_begin);
    const int64_t end =
        std::min(place.offset + range.begin + range.count, shard_begin + bucket.shard_numel);
    if (first < end) pieces.push_back({place.bucket, first - shard_begin, end - first});
  }
  return pieces;
}

}  // namespace rematlab::parallel
