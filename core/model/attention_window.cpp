#include "model/attention_window.h"

#include <algorithm>

namespace rematlab {
namespace {

// Block `first`'s queries (rows) times its keys: from `window` before its first query on.
int64_t block_values(int64_t seq, int64_t window, int64_t first) {
  const int64_t rows = std::min(window, seq - first);
  return rows * (first + rows - std::max<int64_t>(0, first - window));
}

}  // namespace

int64_t attention_score_values(int64_t seq, int64_t window) {
  if (window <= 0 || seq <= window) return seq * seq;
  int64_t values = 0;
  for (int64_t first = 0; first < seq; first += window) values += block_values(seq, window, first);
  return values;
}

int64_t attention_block_score_values(int64_t seq, int64_t window) {
  if (window <= 0 || seq <= window) return seq * seq;
  int64_t widest = 0;
  for (int64_t first = 0; first < seq; first += window)
    widest = std::max(widest, block_values(seq, window, first));
  return widest;
}

}  // namespace rematlab
