// What a sliding window leaves of attention's scores (model/windowed_attention.h computes them a
// block of `window` queries at a time against that block's keys and the previous block's): the
// engine's shapes, counted without LibTorch so that the estimator and the FLOP count use them.
#pragma once

#include <cstdint>

namespace rematlab {

// Values of the scores one head forms over a sequence of `seq` tokens: seq² without a window
// (0) or when the sequence fits in it, else the blocks' (each `window` queries against at most
// 2·window keys).
int64_t attention_score_values(int64_t seq, int64_t window);
// The widest block of scores one head forms at once: seq × seq, or window × 2·window.
int64_t attention_block_score_values(int64_t seq, int64_t window);

}  // namespace rematlab
