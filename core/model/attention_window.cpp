#include "model/attention_window.h"

#include <algorithm>

namespace rematlab {

// The blocks are the first (window × window), whole ones of window queries against 2·window
// keys, and a last one of r = seq mod window queries against window + r keys: counted in
// closed form, since a window of 1 over millions of tokens would otherwise loop as long.
int64_t attention_score_values(int64_t seq, int64_t window) {
  if (window <= 0 || seq <= window) return seq * seq;
  const int64_t whole = seq / window;  // at least 1: the first block
  const int64_t rest = seq % window;
  return window * window + (whole - 1) * 2 * window * window + rest * (window + rest);
}

int64_t attention_block_score_values(int64_t seq, int64_t window) {
  if (window <= 0 || seq <= window) return seq * seq;
  const int64_t rest = seq % window;
  if (seq / window >= 2) return 2 * window * window;
  return std::max(window * window, rest * (window + rest));
}

}  // namespace rematlab
