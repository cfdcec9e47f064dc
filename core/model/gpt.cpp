#include "model/gpt.h"

#include <cmath>
#include <mutex>

#include "checkpoint/segment_checkpoint.h"
#include "compat/torch_compat.h"

namespace rematlab {
namespace {

// GPT-2's initialisation: N(0, 0.02) weights, zero biases, and residual output projections
// scaled by 1/√(2·layers) so the residual stream's variance does not grow with depth.
void init_linear(torch::nn::Linear& linear, double std) {
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, std);
  linear->bias.zero_();
}

torch::nn::LayerNorm make_norm(int64_t d_model) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model}));
}

double residual_std(const ModelConfig& config) {
  return 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
}

std::mutex g_kernel_log_mutex;
AttentionKernelLog* g_kernel_log = nullptr;

}  // namespace

AttentionKernelLog::AttentionKernelLog() {
  std::lock_guard<std::mutex> lock(g_kernel_log_mutex);
  g_kernel_log = this;
}

AttentionKernelLog::~AttentionKernelLog() {
  std::lock_guard<std::mutex> lock(g_kernel_log_mutex);
  g_kernel_log = nullptr;
}

void AttentionKernelLog::record(bool grad_enabled, int backend) {
  std::lock_guard<std::mutex> lock(g_kernel_log_mutex);
  if (g_kernel_log) g_kernel_log->entries_.emplace_back(grad_enabled, backend);
}

std::vector<std::pair<bool, int>> AttentionKernelLog::entries() const {
  std::lock_guard<std::mutex> lock(g_kernel_log_mutex);
  return entries_;
}

torch::Tensor attention_core(const torch::Tensor& qkv, int64_t heads, double dropout, bool training,
                             AttentionKind kind) {
  const int64_t batch = qkv.size(0);
  const int64_t seq = qkv.size(1);
  const int64_t d_model = qkv.size(2) / 3;
  auto split_heads = [&](const torch::Tensor& t) {
    return t.view({batch, seq, heads, d_model / heads}).transpose(1, 2);
  };
  const auto parts = qkv.split(d_model, /*dim=*/2);
  const torch::Tensor q = split_heads(parts[0]);
  const torch::Tensor k = split_heads(parts[1]);
  const torch::Tensor v = split_heads(parts[2]);
  const double p = training ? dropout : 0.0;

  torch::Tensor context;
  if (kind == AttentionKind::kSdpa) {
    // The dispatcher picks a kernel from the inputs, whether they require grad among them: the
    // no-grad forward of a checkpointed segment and its recomputation with grad could run
    // different kernels, with other rounding and other dropout masks. The kernel is chosen once,
    // as with grad, and forced on both.
    const int backend = compat::sdpa_backend_with_grad(q, k, v, p, /*causal=*/true);
    AttentionKernelLog::record(torch::GradMode::is_enabled(), backend);
    const compat::ScopedSdpaBackend only(backend);
    context = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, p, /*is_causal=*/true);
  } else {
    // Scale q (b·h·s·d elements) rather than the scores (b·h·s·s), and mask in place: the only
    // s×s tensor this keeps for backward is the probabilities, as the literature's formula assumes.
    const double scale = 1.0 / std::sqrt(static_cast<double>(d_model / heads));
    const torch::Tensor future = torch::ones({seq, seq}, qkv.options().dtype(torch::kBool)).triu(1);
    torch::Tensor scores = torch::matmul(q * scale, k.transpose(-2, -1));
    scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
    torch::Tensor probs = torch::softmax(scores, -1);
    probs = torch::dropout(probs, p, training);
    context = torch::matmul(probs, v);
  }
  return context.transpose(1, 2).contiguous().view({batch, seq, d_model});
}

AttentionSublayer::AttentionSublayer(const ModelConfig& config)
    : heads_(config.heads), dropout_(config.dropout), kind_(config.attention) {
  const int64_t d = config.d_model;
  norm_ = register_module("norm", make_norm(d));
  qkv_ = register_module("qkv", torch::nn::Linear(d, 3 * d));
  out_ = register_module("out", torch::nn::Linear(d, d));
  init_linear(qkv_, 0.02);
  init_linear(out_, residual_std(config));
}

torch::Tensor AttentionSublayer::forward(const torch::Tensor& x) {
  const torch::Tensor qkv = qkv_(norm_(x));
  const bool training = is_training();
  const int64_t heads = heads_;
  const double dropout = dropout_;
  const AttentionKind kind = kind_;
  auto core = [heads, dropout, training, kind](const torch::Tensor& fused) {
    return attention_core(fused, heads, dropout, training, kind);
  };
  const torch::Tensor context = recompute_core_ ? checkpoint_segment(core, qkv, {}) : core(qkv);
  return x + torch::dropout(out_(context), dropout_, training);
}

MlpSublayer::MlpSublayer(const ModelConfig& config) : dropout_(config.dropout) {
  const int64_t d = config.d_model;
  norm_ = register_module("norm", make_norm(d));
  up_ = register_module("up", torch::nn::Linear(d, 4 * d));
  down_ = register_module("down", torch::nn::Linear(4 * d, d));
  init_linear(up_, 0.02);
  init_linear(down_, residual_std(config));
}

torch::Tensor MlpSublayer::forward(const torch::Tensor& x) {
  return x + torch::dropout(down_(torch::gelu(up_(norm_(x)))), dropout_, is_training());
}

GptImpl::GptImpl(const ModelConfig& config) : config_(config) {
  token_embedding_ =
      register_module("token_embedding", torch::nn::Embedding(config.vocab, config.d_model));
  position_embedding_ =
      register_module("position_embedding", torch::nn::Embedding(config.seq_len, config.d_model));
  {
    torch::NoGradGuard no_grad;
    token_embedding_->weight.normal_(0.0, 0.02);
    position_embedding_->weight.normal_(0.0, 0.02);
  }
  for (int64_t block = 0; block < config.layers; ++block) {
    auto attention = std::make_shared<AttentionSublayer>(config);
    auto mlp = std::make_shared<MlpSublayer>(config);
    register_module("block" + std::to_string(block) + "_attn", attention);
    register_module("block" + std::to_string(block) + "_mlp", mlp);
    attention_sublayers_.push_back(attention);
    sublayers_.push_back(attention);
    sublayers_.push_back(mlp);
  }
  final_norm_ = register_module("final_norm", make_norm(config.d_model));
}

torch::Tensor GptImpl::run_segment(const Segment& segment, const torch::Tensor& input) {
  // The closure holds the sublayers it runs, so a pending recomputation never dangles.
  std::vector<std::shared_ptr<Sublayer>> span(sublayers_.begin() + segment.begin,
                                              sublayers_.begin() + segment.end);
  auto run = [span](const torch::Tensor& x) {
    torch::Tensor h = x;
    for (const auto& sublayer : span) h = sublayer->forward(h);
    return h;
  };
  if (!segment.recompute) return run(input);
  std::vector<torch::Tensor> params;
  for (const auto& sublayer : span) {
    for (const auto& param : sublayer->parameters()) params.push_back(param);
  }
  return checkpoint_segment(run, input, params);
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens, const CheckpointPlan& plan) {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be (batch, seq)");
  TORCH_CHECK(tokens.size(1) <= config_.seq_len, "sequence longer than the model's seq_len");
  for (const auto& attention : attention_sublayers_) {
    attention->set_recompute_core(plan.recompute_attention_core);
  }
  const torch::Tensor positions = torch::arange(
      tokens.size(1), torch::TensorOptions().dtype(torch::kLong).device(tokens.device()));
  torch::Tensor h = token_embedding_(tokens) + position_embedding_(positions);
  for (const Segment& segment : plan.segments) h = run_segment(segment, h);
  h = final_norm_(h);
  return torch::nn::functional::linear(h, token_embedding_->weight);  // tied LM head
}

torch::Tensor GptImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets,
                            const CheckpointPlan& plan) {
  const torch::Tensor logits = forward(tokens, plan);
  return torch::nn::functional::cross_entropy(logits.view({-1, config_.vocab}),
                                              targets.reshape({-1}));
}

}  // namespace rematlab
