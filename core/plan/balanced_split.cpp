#include "plan/balanced_split.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace rematlab::plan {

BalancedSplit balanced_chunk_blocks(const ChainCosts& costs, int64_t chunks) {
  const int64_t sublayers = static_cast<int64_t>(costs.stages.size());
  const int64_t blocks = sublayers / 2;
  if (sublayers % 2 != 0 || chunks < 1 || chunks > blocks) {
    throw std::invalid_argument("a balanced split needs 1 to blocks chunks of whole blocks");
  }
  // before[b]: the first b blocks' time.
  std::vector<double> before(static_cast<std::size_t>(blocks) + 1, 0.0);
  for (int64_t b = 0; b < blocks; ++b) {
    const StageCost& attention = costs.stages[static_cast<std::size_t>(2 * b)];
    const StageCost& mlp = costs.stages[static_cast<std::size_t>(2 * b + 1)];
    before[static_cast<std::size_t>(b) + 1] = before[static_cast<std::size_t>(b)] +
                                              attention.forward_ms + attention.backward_ms +
                                              mlp.forward_ms + mlp.backward_ms;
  }
  auto chunk_ms = [&](int64_t chunk, int64_t from, int64_t to) {
    return before[static_cast<std::size_t>(to)] - before[static_cast<std::size_t>(from)] +
           (chunk == 0 ? costs.embedding_ms : 0.0) + (chunk == chunks - 1 ? costs.head_ms : 0.0);
  };
  // slowest[c][b]: the least slowest chunk over the first b blocks in c + 1 chunks; cut[c][b]
  // where its last chunk starts. Every chunk keeps a block: chunk c ends after block c at least.
  constexpr double kNone = std::numeric_limits<double>::infinity();
  const auto width = static_cast<std::size_t>(blocks) + 1;
  std::vector<std::vector<double>> slowest(static_cast<std::size_t>(chunks),
                                           std::vector<double>(width, kNone));
  std::vector<std::vector<int64_t>> cut(static_cast<std::size_t>(chunks),
                                        std::vector<int64_t>(width, 0));
  for (int64_t b = 1; b <= blocks; ++b) slowest[0][static_cast<std::size_t>(b)] = chunk_ms(0, 0, b);
  for (int64_t c = 1; c < chunks; ++c) {
    auto& row = slowest[static_cast<std::size_t>(c)];
    const auto& previous = slowest[static_cast<std::size_t>(c) - 1];
    for (int64_t b = c + 1; b <= blocks - (chunks - 1 - c); ++b) {
      for (int64_t start = c; start < b; ++start) {
        const double candidate =
            std::max(previous[static_cast<std::size_t>(start)], chunk_ms(c, start, b));
        // Strictly faster only: of equal splits the earliest cut, so earlier chunks stay small.
        if (candidate < row[static_cast<std::size_t>(b)]) {
          row[static_cast<std::size_t>(b)] = candidate;
          cut[static_cast<std::size_t>(c)][static_cast<std::size_t>(b)] = start;
        }
      }
    }
  }
  BalancedSplit split;
  split.chunk_blocks.assign(static_cast<std::size_t>(chunks), 0);
  split.chunk_ms.assign(static_cast<std::size_t>(chunks), 0.0);
  int64_t end = blocks;
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t start =
        c == 0 ? 0 : cut[static_cast<std::size_t>(c)][static_cast<std::size_t>(end)];
    split.chunk_blocks[static_cast<std::size_t>(c)] = end - start;
    split.chunk_ms[static_cast<std::size_t>(c)] = chunk_ms(c, start, end);
    end = start;
  }
  return split;
}

}  // namespace rematlab::plan
