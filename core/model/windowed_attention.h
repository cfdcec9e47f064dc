// Sliding-window attention, as Mistral 7B (v0.1) and Qwen 2 with use_sliding_window have it:
// the query at position i scores the `window` keys i-window+1 … i, none before. It is computed a
// block of `window` queries at a time against the keys of that block and the one before, so what
// it forms and keeps for backward is s × (at most 2·window) rather than s × s: its memory and
// FLOPs follow the window, not the sequence. A sequence no longer than the window is plain causal
// attention and does not come here.
#pragma once

#include <torch/torch.h>

#include <map>
#include <mutex>
#include <tuple>

#include "model/attention_window.h"
#include "model/model_config.h"

namespace rematlab {

// The masks of a block's scores, made once per shape, dtype and device and shared by every layer
// of a model: each layer's fused kernel keeps its mask for backward, and a shared mask is one
// tensor rather than one a layer.
class WindowMasks {
 public:
  explicit WindowMasks(int64_t window) : window_(window) {}
  int64_t window() const { return window_; }
  // A block of `rows` queries against `keys` keys, the first query `offset` positions after the
  // first key. kBool: true where a score is hidden (for masked_fill_); a floating dtype: 0 where
  // a key is seen and -inf where it is not (an additive mask for the fused kernel).
  torch::Tensor get(int64_t rows, int64_t keys, int64_t offset, torch::ScalarType dtype,
                    const torch::Device& device) const;

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int, std::string>;
  int64_t window_;
  mutable std::mutex mutex_;
  mutable std::map<Key, torch::Tensor> cache_;
};

// q (batch, heads, seq, head_dim); k and v (batch, kv_heads, seq, head_dim), each shared by
// heads/kv_heads query heads; seq > masks.window(). Returns the context as (batch, seq, heads,
// head_dim), contiguous. The fused kernel of each block is chosen and forced as attention_core
// does, so a checkpointed segment's recomputation runs the kernels its forward ran. Where a
// masked block's fused kernels refuse shared key/value heads (some of CUDA's), k and v are
// repeated to the query heads once rather than left to the explicit fallback.
torch::Tensor windowed_attention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const WindowMasks& masks, double dropout,
                                 bool training, AttentionKind kind);

}  // namespace rematlab
