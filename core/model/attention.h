// The attention sublayer of both families: x + dropout(out(core(qkv(norm(x))))). GPT: LayerNorm,
// biases, one key/value head per query head. Llama: RMSNorm, no biases, grouped-query attention
// (fewer key/value heads, each shared by heads/kv_heads query heads) and rotary positions.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <utility>
#include <vector>

#include "model/head_norm.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/norm.h"
#include "model/quantised_projection.h"
#include "model/rotary.h"
#include "model/sublayer.h"
#include "model/tensor_parallel_layout.h"
#include "model/windowed_attention.h"

namespace rematlab {

struct AttentionShape {
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  // Tensor parallelism with fewer key/value heads than ranks: the projection makes
  // `kv_projected` of them (all, replicated on every rank) and this rank's query heads use
  // kv_heads (one) from `kv_first`. Otherwise kv_projected == kv_heads and kv_first == 0.
  int64_t kv_projected = 0;
  int64_t kv_first = 0;
  int64_t qkv_width() const { return (heads + 2 * kv_projected) * head_dim; }
};

// Qwen 3's normalisations of each head's q and k (both null: none).
struct QkNorms {
  HeadNorm q{nullptr};
  HeadNorm k{nullptr};
  explicit operator bool() const { return !q.is_empty(); }
};

// Each key/value head (batch, kv_heads, seq, head_dim) repeated for the heads/kv_heads query
// heads that share it, for the explicit (math) core.
torch::Tensor repeat_kv(const torch::Tensor& t, int64_t groups);

// The attention core on a fused projection (batch, seq, (heads + 2·kv_heads)·head_dim) →
// (batch, seq, heads·head_dim): q and k normalised when `norms` holds them, rotary positions when
// `rotary` is given, QKᵀ, causal softmax (over the latest window()'s keys when `window` is given
// and the sequence is longer), dropout on the probabilities, ·V. It is what `selective`
// recomputes.
torch::Tensor attention_core(const torch::Tensor& qkv, const AttentionShape& shape,
                             const RotaryTables* rotary, double dropout, bool training,
                             AttentionKind kind, const QkNorms& norms = {},
                             const WindowMasks* window = nullptr);

class AttentionSublayer : public Sublayer {
 public:
  // `rotary` (Llama) and `window` (a sliding window's masks) are shared by every block's
  // attention; either may be null (GPT; attention over the whole sequence).
  AttentionSublayer(const ModelConfig& config, std::shared_ptr<const RotaryTables> rotary,
                    std::shared_ptr<const WindowMasks> window = nullptr);
  SublayerTail forward_until_tail(const torch::Tensor& x) override;
  // Keeps this rank's query heads (and key/value heads: split when the ranks divide them, else
  // all of them, each rank using the one its query heads share), the projections' rows and the
  // output projection's columns; the output projection's bias stays whole, added after the sum.
  void split_for_tensor_parallel(const TensorParallel& group, TensorParallelLayout& layout,
                                 bool sequence_parallel);
  // `selective` recompute: keep the projections, recompute only the attention core.
  void set_recompute_core(bool recompute) { recompute_core_ = recompute; }
  // Fine-tuning: adapters on the projections `lora` targets among q, k, v and the output.
  void attach_lora(const LoraOptions& lora);
  // A frozen base stored quantised: q, k, v and the output projection dequantise as they run.
  void quantise_projections(QuantisedFormat format);

 private:
  Norm norm_{nullptr};
  QkNorms qk_norms_;  // Qwen 3 only
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear out_{nullptr};
  LoraBranch qkv_lora_{nullptr};  // fine-tuning only
  LoraBranch out_lora_{nullptr};
  QuantisedWeightPtr qkv_quantised_;  // a quantised base only
  QuantisedWeightPtr out_quantised_;
  AttentionShape shape_;
  std::shared_ptr<const RotaryTables> rotary_;
  std::shared_ptr<const WindowMasks> window_;
  double dropout_;
  AttentionKind kind_;
  bool recompute_core_ = false;
  TensorParallel group_;            // null: the whole layer on this process
  bool sequence_parallel_ = false;  // x is this rank's slice of the sequence
};

// Tests only: while one exists, every fused-attention call records whether grad mode was on
// (off: a checkpointed segment's forward; on: its recomputation or a plain forward) and the
// kernel it was given (an at::SDPBackend value, -1 when this LibTorch cannot tell).
class AttentionKernelLog {
 public:
  AttentionKernelLog();
  ~AttentionKernelLog();
  AttentionKernelLog(const AttentionKernelLog&) = delete;
  AttentionKernelLog& operator=(const AttentionKernelLog&) = delete;
  std::vector<std::pair<bool, int>> entries() const;
  static void record(bool grad_enabled, int backend);

 private:
  std::vector<std::pair<bool, int>> entries_;
};

}  // namespace rematlab
