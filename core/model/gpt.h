// GPT-2-style decoder-only transformer, built so checkpoint policies can cut it at sublayer
// granularity: block i is the two residual sublayers attn_i and mlp_i.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_policy.h"
#include "model/model_config.h"

namespace rematlab {

// One residual sublayer: forward(x) = x + branch(LayerNorm(x)).
class Sublayer : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};

// Causal multi-head self-attention with a fused QKV projection.
class AttentionSublayer : public Sublayer {
 public:
  explicit AttentionSublayer(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x) override;
  // `selective` recompute: keep the projections, recompute only the attention core.
  void set_recompute_core(bool recompute) { recompute_core_ = recompute; }

 private:
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear out_{nullptr};
  int64_t heads_;
  double dropout_;
  AttentionKind kind_;
  bool recompute_core_ = false;
};

// Linear(d, 4d) → GELU → Linear(4d, d).
class MlpSublayer : public Sublayer {
 public:
  explicit MlpSublayer(const ModelConfig& config);
  torch::Tensor forward(const torch::Tensor& x) override;

 private:
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear up_{nullptr};
  torch::nn::Linear down_{nullptr};
  double dropout_;
};

// The attention core on a fused QKV tensor (batch, seq, 3·d) → (batch, seq, d): QKᵀ, causal
// softmax, dropout on the probabilities, ·V. It is what `selective` recomputes.
torch::Tensor attention_core(const torch::Tensor& qkv, int64_t heads, double dropout, bool training,
                             AttentionKind kind);

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

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const ModelConfig& config);

  // Logits (batch, seq, vocab) for token ids (batch, seq), run under `plan`.
  torch::Tensor forward(const torch::Tensor& tokens, const CheckpointPlan& plan);
  // Mean cross-entropy of predicting `targets`.
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets,
                     const CheckpointPlan& plan);

  const ModelConfig& config() const { return config_; }
  // attn0, mlp0, attn1, mlp1, …
  const std::vector<std::shared_ptr<Sublayer>>& sublayers() const { return sublayers_; }

 private:
  torch::Tensor run_segment(const Segment& segment, const torch::Tensor& input);

  ModelConfig config_;
  torch::nn::Embedding token_embedding_{nullptr};
  torch::nn::Embedding position_embedding_{nullptr};
  std::vector<std::shared_ptr<Sublayer>> sublayers_;
  std::vector<std::shared_ptr<AttentionSublayer>> attention_sublayers_;
  torch::nn::LayerNorm final_norm_{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace rematlab
