// Sliding-window attention (model/windowed_attention.h): the blocked computation equals full
// attention under the banded mask, in value and gradient, for both cores, shared K/V heads and
// windows that do not divide the sequence; a model sees exactly the window it is given; a
// sequence that fits in the window is plain causal attention bit for bit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "checkpoint/replay_state.h"
#include "model/attention.h"
#include "model/transformer.h"
#include "model/windowed_attention.h"

namespace rematlab {
namespace {

// Full attention, written out: the query at i sees keys i-window+1 … i.
torch::Tensor banded_reference(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t window) {
  const int64_t seq = q.size(2);
  const int64_t groups = q.size(1) / k.size(1);
  const torch::Tensor keys = k.repeat_interleave(groups, 1);
  const torch::Tensor values = v.repeat_interleave(groups, 1);
  const torch::Tensor i = torch::arange(seq).unsqueeze(1);
  const torch::Tensor j = torch::arange(seq).unsqueeze(0);
  const torch::Tensor hidden = (j > i).logical_or(j <= i - window);
  const torch::Tensor scores = torch::matmul(q, keys.transpose(-2, -1)) / std::sqrt(q.size(3));
  const torch::Tensor probs =
      torch::softmax(scores.masked_fill(hidden, -std::numeric_limits<double>::infinity()), -1);
  return torch::matmul(probs, values).transpose(1, 2).contiguous();
}

struct Gradients {
  torch::Tensor out, q, k, v;
};

template <typename Attend>
Gradients run(const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
              const torch::Tensor& upstream, Attend attend) {
  torch::Tensor q = q0.clone().requires_grad_(true);
  torch::Tensor k = k0.clone().requires_grad_(true);
  torch::Tensor v = v0.clone().requires_grad_(true);
  torch::Tensor out = attend(q, k, v);
  (out * upstream).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  EXPECT_TRUE(torch::allclose(a, b, 1e-9, 1e-10))
      << what << ": max diff " << (a - b).abs().max().item<double>();
}

TEST(WindowedAttention, EqualsFullAttentionUnderTheBandedMaskInValueAndGradient) {
  for (const AttentionKind kind : {AttentionKind::kSdpa, AttentionKind::kMath}) {
    for (const int64_t kv_heads : {4, 2}) {
      // A window dividing the sequence, one that does not, and one key more than the window.
      for (const auto& [window, seq] :
           std::vector<std::pair<int64_t, int64_t>>{{8, 32}, {7, 30}, {12, 13}, {5, 11}}) {
        SCOPED_TRACE(to_string(kind) + ", kv heads " + std::to_string(kv_heads) + ", window " +
                     std::to_string(window) + ", seq " + std::to_string(seq));
        torch::manual_seed(window * 100 + seq);
        const auto options = torch::TensorOptions().dtype(torch::kDouble);
        const torch::Tensor q = torch::randn({2, 4, seq, 16}, options);
        const torch::Tensor k = torch::randn({2, kv_heads, seq, 16}, options);
        const torch::Tensor v = torch::randn({2, kv_heads, seq, 16}, options);
        const torch::Tensor upstream = torch::randn({2, seq, 4, 16}, options);
        const WindowMasks masks(window);
        const Gradients blocked = run(q, k, v, upstream, [&](auto& a, auto& b, auto& c) {
          return windowed_attention(a, b, c, masks, 0.0, true, kind);
        });
        const Gradients full = run(q, k, v, upstream, [&](auto& a, auto& b, auto& c) {
          return banded_reference(a, b, c, window);
        });
        EXPECT_TRUE(blocked.out.is_contiguous());
        expect_close(blocked.out, full.out, "output");
        expect_close(blocked.q, full.q, "q gradient");
        expect_close(blocked.k, full.k, "k gradient");
        expect_close(blocked.v, full.v, "v gradient");
      }
    }
  }
}

TEST(WindowedAttention, CountsTheScoresOfItsBlocks) {
  // No window, or a sequence inside it: s².
  EXPECT_EQ(attention_score_values(32, 0), 32 * 32);
  EXPECT_EQ(attention_score_values(32, 32), 32 * 32);
  // 32 tokens, window 8: the first block 8×8, three more 8×16.
  EXPECT_EQ(attention_score_values(32, 8), 8 * 8 + 3 * 8 * 16);
  EXPECT_EQ(attention_block_score_values(32, 8), 8 * 16);
  // 30 tokens, window 7: 7×7, 7×14 three times, then the last 2 queries against 9 keys.
  EXPECT_EQ(attention_score_values(30, 7), 7 * 7 + 3 * 7 * 14 + 2 * 9);
  EXPECT_EQ(attention_block_score_values(30, 7), 7 * 14);
  // 12 tokens, window 7: 7×7, then 5 queries against 12 keys, the widest block.
  EXPECT_EQ(attention_block_score_values(12, 7), 5 * 12);
  // The closed forms against the blocks walked one by one, as the engine cuts them.
  for (int64_t seq = 1; seq <= 70; ++seq) {
    for (int64_t window = 1; window <= 40; ++window) {
      int64_t total = 0, widest = 0;
      for (int64_t first = 0; first < seq; first += window) {
        const int64_t rows = std::min(window, seq - first);
        const int64_t keys =
            seq <= window ? seq : first + rows - std::max<int64_t>(0, first - window);
        total += rows * (seq <= window ? seq : keys);
        widest = std::max(widest, rows * keys);
        if (seq <= window) break;
      }
      if (seq <= window) total = widest = seq * seq;
      EXPECT_EQ(attention_score_values(seq, window), total) << seq << " " << window;
      EXPECT_EQ(attention_block_score_values(seq, window), widest) << seq << " " << window;
    }
  }
}

ModelConfig one_layer_llama(int64_t window, AttentionKind kind) {
  ModelConfig config = model_preset("llama-tiny");
  config.layers = 1;
  config.seq_len = 32;
  config.sliding_window = window;
  config.attention = kind;
  return config;
}

// A token changes the logits of the `window` positions that see it, from its own on, and no
// others: the window is exactly as wide as asked (Mistral's convention, the token itself one of
// them).
TEST(SlidingWindow, ATokenReachesExactlyTheWindowAfterIt) {
  for (const AttentionKind kind : {AttentionKind::kSdpa, AttentionKind::kMath}) {
    SCOPED_TRACE(to_string(kind));
    torch::manual_seed(5);
    Transformer model(one_layer_llama(8, kind));
    model->eval();
    const auto plan = CheckpointPolicy::none().plan_for(1, 0.0);
    const torch::Tensor tokens = torch::randint(0, 256, {1, 32}, torch::kLong);
    torch::Tensor changed = tokens.clone();
    changed.index_put_({0, 3}, (tokens.index({0, 3}).item<int64_t>() + 1) % 256);
    const torch::Tensor before = model->forward(tokens, plan);
    const torch::Tensor after = model->forward(changed, plan);
    for (int64_t position = 0; position < 32; ++position) {
      const bool sees = position >= 3 && position < 3 + 8;
      EXPECT_EQ(torch::equal(before.index({0, position}), after.index({0, position})), !sees)
          << "position " << position;
    }
  }
}

// A window as long as the sequence hides nothing: the same logits and gradients as no window,
// bit for bit (the causal kernel runs, not the blocked one).
TEST(SlidingWindow, AWindowAsLongAsTheSequenceIsPlainCausalAttention) {
  for (const AttentionKind kind : {AttentionKind::kSdpa, AttentionKind::kMath}) {
    SCOPED_TRACE(to_string(kind));
    const torch::Tensor tokens = torch::randint(0, 256, {2, 32}, torch::kLong);
    std::vector<torch::Tensor> logits, gradients;
    for (const int64_t window : {int64_t{0}, int64_t{32}}) {
      torch::manual_seed(9);
      Transformer model(one_layer_llama(window, kind));
      const torch::Tensor out = model->forward(tokens, CheckpointPolicy::none().plan_for(1, 0.0));
      out.square().mean().backward();
      logits.push_back(out.detach());
      gradients.push_back(model->named_parameters()["block0_attn.qkv.weight"].grad());
    }
    EXPECT_TRUE(torch::equal(logits[0], logits[1]));
    EXPECT_TRUE(torch::equal(gradients[0], gradients[1]));
  }
}

// Under autocast the fused kernel sees q in bfloat16, and the block masks are made in it; the
// masked blocks run fused, as the unmasked first one does.
TEST(SlidingWindow, RunsUnderBfloat16Autocast) {
  torch::manual_seed(2);
  Transformer model(one_layer_llama(8, AttentionKind::kSdpa));
  const torch::Tensor tokens = torch::randint(0, 256, {2, 32}, torch::kLong);
  const auto plan = CheckpointPolicy::none().plan_for(1, 0.0);
  const torch::Tensor reference = model->forward(tokens, plan).detach();
  torch::Tensor low;
  const AttentionKernelLog kernels;
  {
    const ScopedAutocast bf16(*AutocastSnapshot::for_precision(Precision::kBf16, torch::kCPU));
    low = model->forward(tokens, plan);
  }
  // Four blocks, each in a fused kernel: the masked ones too, not the explicit fallback.
  ASSERT_EQ(kernels.entries().size(), 4u);
  for (const auto& [grad, backend] : kernels.entries())
    EXPECT_NE(backend, static_cast<int>(at::SDPBackend::math));
  low.to(torch::kFloat).square().mean().backward();
  EXPECT_EQ(low.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::allclose(low.to(torch::kFloat), reference, 0.1, 0.1))
      << (low.to(torch::kFloat) - reference).abs().max().item<double>();
  const torch::Tensor gradient = model->named_parameters()["block0_attn.qkv.weight"].grad();
  EXPECT_TRUE(gradient.isfinite().all().item<bool>());
}

}  // namespace
}  // namespace rematlab
