#include "model/attention.h"

#include <cmath>
#include <limits>
#include <mutex>

#include "checkpoint/kept_outputs.h"
#include "checkpoint/segment_checkpoint.h"
#include "compat/torch_compat.h"
#include "model/gathered_projection.h"
#include "model/initialisation.h"
#include "model/windowed_attention.h"

namespace rematlab {
namespace {

std::mutex g_kernel_log_mutex;
AttentionKernelLog* g_kernel_log = nullptr;

}  // namespace

torch::Tensor repeat_kv(const torch::Tensor& t, int64_t groups) {
  if (groups == 1) return t;
  const auto sizes = t.sizes();  // (batch, kv_heads, seq, head_dim)
  return t.unsqueeze(2)
      .expand({sizes[0], sizes[1], groups, sizes[2], sizes[3]})
      .reshape({sizes[0], sizes[1] * groups, sizes[2], sizes[3]});
}

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

torch::Tensor attention_core(const torch::Tensor& qkv, const AttentionShape& shape,
                             const RotaryTables* rotary, double dropout, bool training,
                             AttentionKind kind, const QkNorms& norms, const WindowMasks* window) {
  const int64_t batch = qkv.size(0);
  const int64_t seq = qkv.size(1);
  const int64_t hd = shape.head_dim;
  auto split_heads = [&](const torch::Tensor& t, int64_t heads) {
    return t.view({batch, seq, heads, hd}).transpose(1, 2);
  };
  const int64_t projected = shape.kv_projected;
  const auto parts = qkv.split({shape.heads * hd, projected * hd, projected * hd}, 2);
  torch::Tensor q = split_heads(parts[0], shape.heads);
  torch::Tensor k = split_heads(parts[1], projected);
  torch::Tensor v = split_heads(parts[2], projected);
  if (projected != shape.kv_heads) {
    k = k.narrow(1, shape.kv_first, shape.kv_heads);
    v = v.narrow(1, shape.kv_first, shape.kv_heads);
  }
  if (norms) {
    q = norms.q->forward(q);
    k = norms.k->forward(k);
  }
  if (rotary) {
    q = apply_rotary(q, *rotary);
    k = apply_rotary(k, *rotary);
    // Rotated, q and k are new tensors; v alone would keep the whole fused QKV tensor alive as
    // the core's saved input. A compact copy of v (laid out as the view was: sequence before
    // heads) lets it go: the fused core then keeps q + k + v rather than q + k + the QKV tensor.
    if (kind == AttentionKind::kSdpa) v = v.transpose(1, 2).contiguous().transpose(1, 2);
  }
  if (window && seq > window->window()) {
    return windowed_attention(q, k, v, *window, dropout, training, kind)
        .view({batch, seq, shape.heads * hd});
  }
  const double p = training ? dropout : 0.0;
  const bool grouped = shape.kv_heads != shape.heads;

  torch::Tensor context;
  if (kind == AttentionKind::kSdpa) {
    // The dispatcher picks a kernel from the inputs, whether they require grad among them: the
    // no-grad forward of a checkpointed segment and its recomputation with grad could run
    // different kernels, with other rounding and other dropout masks. The kernel is chosen once,
    // as with grad, and forced on both.
    bool shared_heads = grouped;
    int backend = compat::sdpa_backend_with_grad(q, k, v, p, /*causal=*/true, shared_heads);
    if (shared_heads && q.is_cuda() && backend == compat::kSdpaMathBackend) {
      // In fp32 CUDA's only fused kernel (memory-efficient) refuses shared key/value heads (seen
      // on an H200), and the explicit fallback keeps seq × seq probabilities a head. Repeated to
      // the query heads, k and v cost two q-sized tensors instead. Not asked on the CPU (its
      // fused kernel takes shared heads, and with dropout neither is fused); the recomputation
      // asks the same question and repeats as well.
      const int64_t groups = shape.heads / shape.kv_heads;
      const torch::Tensor k_repeated = repeat_kv(k, groups);
      const torch::Tensor v_repeated = repeat_kv(v, groups);
      const int repeated =
          compat::sdpa_backend_with_grad(q, k_repeated, v_repeated, p, true, false);
      if (repeated >= 0 && repeated != compat::kSdpaMathBackend) {
        k = k_repeated;
        v = v_repeated;
        shared_heads = false;
        backend = repeated;
      }
    }
    AttentionKernelLog::record(torch::GradMode::is_enabled(), backend);
    const compat::ScopedSdpaBackend only(backend);
    context = compat::scaled_dot_product_attention(q, k, v, p, /*causal=*/true, shared_heads);
  } else {
    // Scale q (b·h·s·d elements) rather than the scores (b·h·s·s), and mask in place: the only
    // s×s tensor this keeps for backward is the probabilities, as the literature's formula assumes.
    const int64_t groups = shape.heads / shape.kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const torch::Tensor future = torch::ones({seq, seq}, qkv.options().dtype(torch::kBool)).triu(1);
    torch::Tensor scores = torch::matmul(q * scale, repeat_kv(k, groups).transpose(-2, -1));
    scores.masked_fill_(future, -std::numeric_limits<double>::infinity());
    torch::Tensor probs = torch::softmax(scores, -1);
    probs = torch::dropout(probs, p, training);
    context = torch::matmul(probs, repeat_kv(v, groups));
  }
  return context.transpose(1, 2).contiguous().view({batch, seq, shape.heads * hd});
}

AttentionSublayer::AttentionSublayer(const ModelConfig& config,
                                     std::shared_ptr<const RotaryTables> rotary,
                                     std::shared_ptr<const WindowMasks> window)
    : shape_{config.heads, config.key_value_heads(), config.head_dim(), config.key_value_heads(),
             0},
      rotary_(std::move(rotary)),
      window_(std::move(window)),
      dropout_(config.dropout),
      kind_(config.attention) {
  const int64_t d = config.d_model;
  const bool bias = config.family == ModelFamily::kGpt;
  norm_ = register_module("norm", Norm(config.family, d));
  if (config.qk_norm) {
    qk_norms_.q = register_module("q_norm", HeadNorm(shape_.head_dim));
    qk_norms_.k = register_module("k_norm", HeadNorm(shape_.head_dim));
  }
  qkv_ = register_module(
      "qkv", torch::nn::Linear(
                 torch::nn::LinearOptions(d, shape_.qkv_width()).bias(bias || config.qkv_bias)));
  out_ = register_module(
      "out",
      torch::nn::Linear(torch::nn::LinearOptions(shape_.heads * shape_.head_dim, d).bias(bias)));
  initialise_linear(qkv_, kProjectionStd);
  initialise_linear(out_, residual_projection_std(config));
}

void AttentionSublayer::split_for_tensor_parallel(const TensorParallel& group,
                                                  TensorParallelLayout& layout,
                                                  bool sequence_parallel) {
  TORCH_CHECK(!qkv_quantised_, "a quantised base split over tensor ranks is not built");
  TORCH_CHECK(!qk_norms_, "q/k norms split over tensor ranks are not built");
  const int64_t ranks = group->size();
  const int64_t rank = group->rank();
  const int64_t hd = shape_.head_dim;
  const int64_t heads = shape_.heads / ranks;
  const int64_t kv_all = shape_.kv_projected;
  std::vector<RowRange> rows = {{rank * heads * hd, heads * hd}};
  AttentionShape local{heads, 0, hd, 0, 0};
  if (kv_all % ranks == 0) {
    local.kv_heads = local.kv_projected = kv_all / ranks;
    rows.push_back({(shape_.heads + rank * local.kv_heads) * hd, local.kv_heads * hd});
    rows.push_back({(shape_.heads + kv_all + rank * local.kv_heads) * hd, local.kv_heads * hd});
  } else {
    // Every key/value head on every rank; this rank's query heads all share one of them. The
    // rows of the others get no gradient here, and the ranks' gradients are summed.
    local.kv_heads = 1;
    local.kv_projected = kv_all;
    local.kv_first = rank * kv_all / ranks;
    rows.push_back({shape_.heads * hd, 2 * kv_all * hd});
    layout.partial.push_back({qkv_->weight, {heads * hd, 2 * kv_all * hd}});
    if (qkv_->bias.defined()) layout.partial.push_back({qkv_->bias, {heads * hd, 2 * kv_all * hd}});
  }
  keep_rows(qkv_->weight, rows);
  if (qkv_->bias.defined()) keep_rows(qkv_->bias, rows);
  keep_columns(out_->weight, {rank * heads * hd, heads * hd});
  layout.split.push_back(qkv_->weight);
  if (qkv_->bias.defined()) layout.split.push_back(qkv_->bias);
  layout.split.push_back(out_->weight);
  shape_ = local;
  group_ = group;
  sequence_parallel_ = sequence_parallel;
}

void AttentionSublayer::attach_lora(const LoraOptions& lora) {
  const int64_t hd = shape_.head_dim;
  const int64_t q = shape_.heads * hd;
  const int64_t kv = shape_.kv_projected * hd;
  std::vector<LoraSlice> slices;
  if (lora.adapts(kLoraQ)) slices.push_back({0, q});
  if (lora.adapts(kLoraK)) slices.push_back({q, kv});
  if (lora.adapts(kLoraV)) slices.push_back({q + kv, kv});
  const int64_t d = out_->weight.size(0);
  if (!slices.empty()) {
    qkv_lora_ = register_module("qkv_lora",
                                LoraBranch(d, shape_.qkv_width(), slices, lora.rank, lora.scale()));
  }
  if (lora.adapts(kLoraO)) {
    out_lora_ = register_module(
        "out_lora", LoraBranch(q, d, std::vector<LoraSlice>{{0, d}}, lora.rank, lora.scale()));
  }
}

void AttentionSublayer::quantise_projections(QuantisedFormat format) {
  TORCH_CHECK(!group_, "a quantised base split over tensor ranks is not built");
  qkv_quantised_ = quantise_projection(*qkv_, format);
  out_quantised_ = quantise_projection(*out_, format);
}

SublayerTail AttentionSublayer::forward_until_tail(const torch::Tensor& x) {
  torch::Tensor qkv;
  {  // the norm's output goes before the core runs
    const torch::Tensor normed = norm_(x);
    qkv = column_projection(KeptOutput::kQkv, normed, qkv_->weight, qkv_->bias, group_,
                            sequence_parallel_, qkv_quantised_);
    if (qkv_lora_) qkv = qkv_lora_->add_to(qkv, normed);
  }
  const bool training = is_training();
  // The closure holds what it needs by value: a pending recomputation never dangles.
  auto core = [shape = shape_, rotary = rotary_, window = window_, dropout = dropout_, training,
               kind = kind_, norms = qk_norms_](const torch::Tensor& fused) {
    return attention_core(fused, shape, rotary.get(), dropout, training, kind, norms, window.get());
  };
  // The q/k norms' scales are used inside the recomputed core: their gradients come from there.
  std::vector<torch::Tensor> core_params;
  if (qk_norms_) core_params = {qk_norms_.q->weight(), qk_norms_.k->weight()};
  const torch::Tensor context =
      recompute_core_ ? checkpoint_segment(core, qkv, core_params) : core(qkv);
  return {x,
          context,
          out_->weight,
          out_->bias,
          dropout_,
          training,
          KeptOutput::kAttentionOut,
          group_,
          sequence_parallel_,
          GatheredOrder::kSequence,
          nullptr,
          adapter_term_of(out_lora_),
          out_quantised_};
}

}  // namespace rematlab
