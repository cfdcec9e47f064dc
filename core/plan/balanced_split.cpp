#include "plan/balanced_split.h"

#include <cmath>
#include <optional>
#include <stdexcept>

namespace rematlab::plan {
namespace {

class ChainTimes {
 public:
  ChainTimes(const ChainCosts& costs, int64_t chunks) : chunks_(chunks) {
    const int64_t sublayers = static_cast<int64_t>(costs.stages.size());
    blocks_ = sublayers / 2;
    if (sublayers % 2 != 0 || chunks < 1 || chunks > blocks_) {
      throw std::invalid_argument("a balanced split needs 1 to blocks chunks of whole blocks");
    }
    embedding_ms_ = costs.embedding_ms;
    head_ms_ = costs.head_ms;
    before_.assign(static_cast<std::size_t>(blocks_) + 1, 0.0);
    for (int64_t b = 0; b < blocks_; ++b) {
      const StageCost& attention = costs.stages[static_cast<std::size_t>(2 * b)];
      const StageCost& mlp = costs.stages[static_cast<std::size_t>(2 * b + 1)];
      const double ms =
          attention.forward_ms + attention.backward_ms + mlp.forward_ms + mlp.backward_ms;
      if (!(std::isfinite(ms) && ms >= 0.0)) {
        throw std::invalid_argument("a balanced split of a chain with a time that is no time");
      }
      before_[static_cast<std::size_t>(b) + 1] = before_[static_cast<std::size_t>(b)] + ms;
    }
    if (!(std::isfinite(embedding_ms_) && embedding_ms_ >= 0.0 && std::isfinite(head_ms_) &&
          head_ms_ >= 0.0)) {
      throw std::invalid_argument("a balanced split without the embedding's and head's times");
    }
  }

  int64_t blocks() const { return blocks_; }

  // Chunk `chunk`'s time over blocks [from, to).
  double chunk_ms(int64_t chunk, int64_t from, int64_t to) const {
    return before_[static_cast<std::size_t>(to)] - before_[static_cast<std::size_t>(from)] +
           (chunk == 0 ? embedding_ms_ : 0.0) + (chunk == chunks_ - 1 ? head_ms_ : 0.0);
  }

  // Chunks of at most `slowest_ms` each, packed from the last: each takes as many blocks as fit
  // while every earlier chunk keeps one. Packing from an end as far as each chunk allows fits
  // whenever any split does, and leaves the earlier chunks the fewest blocks. Nothing when
  // the first chunk is left over `slowest_ms`.
  std::optional<std::vector<int64_t>> packed_from_the_last(double slowest_ms) const {
    std::vector<int64_t> sizes(static_cast<std::size_t>(chunks_), 0);
    int64_t end = blocks_;
    for (int64_t chunk = chunks_ - 1; chunk > 0; --chunk) {
      int64_t start = end - 1;
      if (chunk_ms(chunk, start, end) > slowest_ms) return std::nullopt;
      while (start - 1 >= chunk && chunk_ms(chunk, start - 1, end) <= slowest_ms) --start;
      sizes[static_cast<std::size_t>(chunk)] = end - start;
      end = start;
    }
    if (chunk_ms(0, 0, end) > slowest_ms) return std::nullopt;
    sizes[0] = end;
    return sizes;
  }

 private:
  int64_t chunks_ = 1;
  int64_t blocks_ = 0;
  double embedding_ms_ = 0.0;
  double head_ms_ = 0.0;
  std::vector<double> before_;  // before_[b]: the first b blocks' time
};

}  // namespace

BalancedSplit balanced_chunk_blocks(const ChainCosts& costs, int64_t chunks) {
  const ChainTimes times(costs, chunks);
  // The least slowest chunk, bisected to neighbouring doubles: one chunk of everything is an
  // upper bound (each chunk of a split takes part of it), and each check is one pass over the
  // blocks, so a model of thousands of blocks in thousands of chunks splits at once.
  double fits = times.chunk_ms(0, 0, times.blocks()) + times.chunk_ms(chunks - 1, 0, 0);
  double fails = 0.0;
  if (times.packed_from_the_last(fails)) fits = fails;  // every time 0
  while (fails < fits) {
    const double middle = fails + (fits - fails) / 2.0;
    if (middle <= fails || middle >= fits) break;
    (times.packed_from_the_last(middle) ? fits : fails) = middle;
  }
  BalancedSplit split;
  split.chunk_blocks = *times.packed_from_the_last(fits);
  int64_t start = 0;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t end = start + split.chunk_blocks[static_cast<std::size_t>(chunk)];
    split.chunk_ms.push_back(times.chunk_ms(chunk, start, end));
    start = end;
  }
  return split;
}

}  // namespace rematlab::plan
