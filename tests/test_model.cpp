#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/errors.h"
#include "estimate/architecture.h"
#include "memory/memory_tracker.h"
#include "model/chunked_loss.h"
#include "model/head_norm.h"
#include "model/rotary.h"
#include "model/swiglu.h"
#include "model/transformer.h"

namespace rematlab {
namespace {

int64_t count_parameters(Transformer& model) {
  int64_t total = 0;
  for (const auto& p : model->parameters()) total += p.numel();
  return total;
}

TEST(ModelConfig, PresetsHaveTheDesignedShapes) {
  const ModelConfig tiny = model_preset("tiny");
  EXPECT_EQ(std::vector<int64_t>({tiny.layers, tiny.d_model, tiny.heads, tiny.seq_len, tiny.vocab}),
            std::vector<int64_t>({2, 64, 4, 64, 256}));
  const ModelConfig small = model_preset("small");
  EXPECT_EQ(
      std::vector<int64_t>({small.layers, small.d_model, small.heads, small.seq_len, small.vocab}),
      std::vector<int64_t>({12, 256, 8, 256, 256}));
  const ModelConfig big = model_preset("gpt2-350m");
  EXPECT_EQ(std::vector<int64_t>({big.layers, big.d_model, big.heads, big.seq_len, big.vocab}),
            std::vector<int64_t>({24, 1024, 16, 1024, 50257}));
}

// The published counts (the models' cards and config.json shapes), against the engine's formula
// and the estimator's, which are written independently.
TEST(ModelConfig, PresetsHaveTheirPublishedParameterCounts) {
  const std::vector<std::pair<const char*, int64_t>> published = {
      {"gpt2-124m", 124'439'808},         {"llama3.2-1b", 1'235'814'400},
      {"llama2-7b", 6'738'415'616},       {"llama3-8b", 8'030'261'248},
      {"mistral-7b", 7'241'732'096},      {"llama2-70b", 68'976'648'192},
      {"mistral-7b-v0.3", 7'248'023'552}, {"qwen2.5-7b", 7'615'616'512},
      {"qwen3-8b", 8'190'735'360}};
  for (const auto& [name, count] : published) {
    EXPECT_EQ(model_preset(name).parameter_count(), count) << name;
  }
  for (const std::string& name : preset_names()) {
    EXPECT_EQ(estimate::parameter_count(estimate::architecture_preset(name)),
              model_preset(name).parameter_count())
        << name;
  }
}

TEST(ModelConfig, CountMatchesTheEngineModel) {
  for (const char* name : {"tiny", "small", "llama-tiny", "llama-small"}) {
    Transformer model(model_preset(name));
    EXPECT_EQ(count_parameters(model), model_preset(name).parameter_count()) << name;
  }
  ModelConfig odd = model_preset("tiny");
  odd.layers = 3;
  odd.d_model = 48;
  odd.heads = 6;
  odd.vocab = 97;
  Transformer model(odd);
  EXPECT_EQ(count_parameters(model), odd.parameter_count());
  odd.family = ModelFamily::kLlama;
  odd.kv_heads = 2;
  odd.tie_head = false;
  Transformer llama(odd);
  EXPECT_EQ(count_parameters(llama), odd.parameter_count());
  EXPECT_EQ(estimate::parameter_count(estimate::from_model_config(odd)), odd.parameter_count());
  odd.qk_norm = true;  // Qwen 3's, on heads wider than d_model / heads
  odd.head_width = 16;
  Transformer qwen3(odd);
  EXPECT_EQ(count_parameters(qwen3), odd.parameter_count());
  EXPECT_EQ(estimate::parameter_count(estimate::from_model_config(odd)), odd.parameter_count());
}

// Llama's gated activation, whose backward is written out: its output and its input's gradient
// are autograd's through silu and the product, bit for bit, in fp32 and bf16 — on a fused tensor
// whose halves are strided views, as the projection makes it.
TEST(SwiGlu, EqualsAutogradThroughSiluAndTheProductBitForBit) {
  torch::manual_seed(5);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor values = torch::randn({3, 7, 2 * 24}).to(dtype);
    const torch::Tensor fused = values.clone().requires_grad_(true);
    const torch::Tensor reference = values.clone().requires_grad_(true);
    const torch::Tensor out = swiglu(fused);
    const auto halves = reference.chunk(2, -1);
    const torch::Tensor expected = torch::silu(halves[0]) * halves[1];
    EXPECT_TRUE(torch::equal(out, expected));
    const torch::Tensor grad = torch::randn_like(out);
    out.backward(grad);
    expected.backward(grad);
    EXPECT_TRUE(torch::equal(fused.grad(), reference.grad())) << dtype;
  }
}

// Qwen 3's per-head RMSNorm, whose backward is written out, against autograd through the same
// formula: its outputs and its input's and scale's gradients agree to fp32 rounding, on a strided
// view of a fused tensor (as q and k are) and under bf16.
TEST(HeadNorm, MatchesAutogradOfTheFormula) {
  torch::manual_seed(3);
  const torch::Tensor fused = torch::randn({2, 5, 3 * 4 * 8});
  const torch::Tensor weight = torch::rand({8}) + 0.5;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    auto heads = [&](const torch::Tensor& t) {
      return t.to(dtype).narrow(2, 4 * 8, 4 * 8).view({2, 5, 4, 8}).transpose(1, 2);
    };
    const torch::Tensor x = heads(fused).detach().requires_grad_(true);
    const torch::Tensor w = weight.clone().requires_grad_(true);
    const torch::Tensor y = head_rms_norm(x, w, 1e-5);
    EXPECT_EQ(y.scalar_type(), dtype);
    const torch::Tensor grad = torch::randn_like(y);
    y.backward(grad);
    const torch::Tensor x_ref = x.detach().to(torch::kDouble).requires_grad_(true);
    const torch::Tensor w_ref = weight.to(torch::kDouble).requires_grad_(true);
    const torch::Tensor y_ref = x_ref * torch::rsqrt(x_ref.pow(2).mean(-1, true) + 1e-5) * w_ref;
    y_ref.backward(grad.to(torch::kDouble));
    const double tolerance = dtype == torch::kFloat ? 1e-5 : 2e-2;
    EXPECT_TRUE(torch::allclose(y.to(torch::kDouble), y_ref, tolerance, tolerance));
    EXPECT_TRUE(torch::allclose(x.grad().to(torch::kDouble), x_ref.grad(), tolerance, tolerance));
    EXPECT_TRUE(torch::allclose(w.grad().to(torch::kDouble), w_ref.grad(), tolerance, tolerance))
        << w.grad() << w_ref.grad();
  }
}

TEST(ModelConfig, RejectsBadShapesNamingTheFlag) {
  ModelConfig config = model_preset("tiny");
  config.heads = 5;
  try {
    validate(config);
    FAIL() << "5 heads accepted for d_model 64";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "--heads");
  }
  config = model_preset("tiny");
  config.layers = 0;
  EXPECT_THROW(validate(config), InvalidInput);
  config = model_preset("tiny");
  config.dropout = 1.0;
  EXPECT_THROW(validate(config), InvalidInput);
  EXPECT_THROW(model_preset("gpt5"), InvalidInput);
  EXPECT_THROW(parse_attention("flash"), InvalidInput);
}

// Switching a Llama preset to GPT gives GPT-2 on the same sizes, and back again Llama's rules.
TEST(ModelConfig, SwitchingFamilyResetsWhatOnlyOneFamilyHas) {
  ModelConfig config = model_preset("llama-small");
  config.switch_family(ModelFamily::kGpt);
  EXPECT_EQ(config.key_value_heads(), config.heads);
  EXPECT_EQ(config.mlp_width(), 4 * config.d_model);
  EXPECT_TRUE(config.tie_head);
  EXPECT_EQ(config.parameter_count(), [&] {
    ModelConfig gpt = model_preset("small");
    gpt.vocab = config.vocab;
    gpt.seq_len = config.seq_len;
    return gpt.parameter_count();
  }());
  config.switch_family(ModelFamily::kLlama);
  EXPECT_FALSE(config.tie_head);
  EXPECT_EQ(config.kv_heads, 0);    // as many as heads until asked
  EXPECT_EQ(config.mlp_hidden, 0);  // Llama's width rule
}

TEST(Llama, HasNoBiasesGroupedKeyValuesNoPositionTableAndItsOwnHead) {
  const ModelConfig config = model_preset("llama-tiny");
  Transformer model(config);
  EXPECT_EQ(model->sublayers().size(), 4u);
  const int64_t d = config.d_model;
  const int64_t hd = config.head_dim();
  bool saw_qkv = false;
  for (const auto& item : model->named_parameters()) {
    EXPECT_EQ(item.key().find("bias"), std::string::npos) << item.key();
    EXPECT_EQ(item.key().find("position"), std::string::npos) << item.key();
    if (item.key().find("qkv") != std::string::npos) {
      // 4 query heads and 2 key/value heads of width 16: (4 + 2·2)·16 rows.
      EXPECT_EQ(item.value().sizes(), torch::IntArrayRef({(4 + 2 * 2) * hd, d}));
      saw_qkv = true;
    }
  }
  EXPECT_TRUE(saw_qkv);
  EXPECT_FALSE(model->head_weight().is_same(model->named_parameters()["token_embedding.weight"]));
}

// Rotary positions make a query–key score depend on their distance only.
TEST(Llama, RotaryScoresDependOnRelativePositionOnly) {
  torch::manual_seed(5);
  const RotaryTables tables = make_rotary_tables(32, 16, 10000.0);
  const torch::Tensor q = torch::randn({16});
  const torch::Tensor k = torch::randn({16});
  auto at = [&](const torch::Tensor& v, int64_t position) {
    // One vector placed at `position` of a (1, 1, 32, 16) sequence.
    torch::Tensor sequence = torch::zeros({1, 1, 32, 16});
    sequence.index_put_({0, 0, position}, v);
    return apply_rotary(sequence, tables).index({0, 0, position});
  };
  const double near = at(q, 7).dot(at(k, 3)).item<double>();
  const double shifted = at(q, 27).dot(at(k, 23)).item<double>();
  const double other = at(q, 7).dot(at(k, 5)).item<double>();
  EXPECT_NEAR(near, shifted, 1e-4);
  EXPECT_GT(std::abs(near - other), 1e-3);
}

// Slicing the head and loss changes the summation order only: the loss to fp32 rounding and
// every gradient within a few ulps of the largest.
TEST(ChunkedLoss, MatchesTheWholeComputation) {
  torch::manual_seed(2);
  const torch::Tensor weight = torch::randn({1000, 32}, torch::requires_grad());
  const torch::Tensor hidden = torch::randn({96, 32}, torch::requires_grad());
  const torch::Tensor targets = torch::randint(0, 1000, {96}, torch::kLong);
  // Through backward(): a slice is a recomputed segment, which adds the weight's gradient into
  // its .grad (segment_checkpoint.h).
  auto gradients = [&](int64_t chunks) {
    hidden.mutable_grad() = torch::Tensor();
    weight.mutable_grad() = torch::Tensor();
    const torch::Tensor loss = chunked_cross_entropy(hidden, weight, targets, chunks);
    loss.backward();
    return std::make_pair(loss,
                          std::vector<torch::Tensor>{hidden.grad().clone(), weight.grad().clone()});
  };
  const auto [whole, whole_grads] = gradients(1);
  const auto [sliced, sliced_grads] = gradients(7);
  EXPECT_NEAR(sliced.item<double>(), whole.item<double>(), 1e-6 * whole.item<double>());
  for (int i = 0; i < 2; ++i) {
    const double scale = whole_grads[i].abs().max().item<double>();
    EXPECT_LE((sliced_grads[i] - whole_grads[i]).abs().max().item<double>(), 1e-5 * scale);
  }
}

TEST(ChunkedLoss, TheFullLogitsNeverExistAtOnce) {
  torch::manual_seed(2);
  const int64_t tokens = 512, vocab = 4096, width = 16;
  const torch::Tensor weight = torch::randn({vocab, width}, torch::requires_grad());
  const torch::Tensor hidden = torch::randn({tokens, width}, torch::requires_grad());
  const torch::Tensor targets = torch::randint(0, vocab, {tokens}, torch::kLong);
  const int64_t logits_bytes = tokens * vocab * 4;
  auto peak_of = [&](int64_t chunks) {
    MemoryTracker tracker(c10::Device(c10::kCPU));
    tracker.reset_peak();
    const int64_t before = tracker.current_bytes();
    chunked_cross_entropy(hidden, weight, targets, chunks).backward();
    return tracker.peak_bytes() - before;
  };
  EXPECT_GT(peak_of(1), logits_bytes);      // whole: the logits and their gradient
  EXPECT_LT(peak_of(8), logits_bytes / 2);  // eight slices: about a quarter of them
}

TEST(Gpt, ExposesTwoSublayersPerBlockAndTiesTheHead) {
  ModelConfig config = model_preset("tiny");
  config.vocab = 97;  // a shape no other weight has
  Transformer model(config);
  EXPECT_EQ(model->sublayers().size(), 4u);
  EXPECT_NE(std::dynamic_pointer_cast<AttentionSublayer>(model->sublayers()[0]), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<MlpSublayer>(model->sublayers()[1]), nullptr);
  // No separate head weight: a vocab × d matrix appears once among the parameters.
  int64_t vocab_sized = 0;
  for (const auto& p : model->parameters()) vocab_sized += p.sizes() == torch::IntArrayRef{97, 64};
  EXPECT_EQ(vocab_sized, 1);
}

class GptAttention : public ::testing::TestWithParam<AttentionKind> {};

TEST_P(GptAttention, IsCausalAndShapedLikeTheVocabulary) {
  torch::manual_seed(1);
  ModelConfig config = model_preset("tiny");
  config.attention = GetParam();
  Transformer model(config);
  model->eval();
  const auto plan = CheckpointPolicy::none().plan_for(config.layers, 0.0);
  torch::Tensor tokens = torch::randint(0, config.vocab, {2, 16}, torch::kLong);
  const torch::Tensor logits = model->forward(tokens, plan);
  EXPECT_EQ(logits.sizes(), torch::IntArrayRef({2, 16, 256}));
  torch::Tensor changed = tokens.clone();
  changed.index_put_({torch::indexing::Slice(), 10},
                     (tokens.index({0, 10}).item<int64_t>() + 1) % 256);
  const torch::Tensor logits_changed = model->forward(changed, plan);
  const auto before = torch::indexing::Slice(0, 10);
  EXPECT_TRUE(torch::equal(logits.index({torch::indexing::Slice(), before}),
                           logits_changed.index({torch::indexing::Slice(), before})));
  EXPECT_FALSE(torch::allclose(logits.index({torch::indexing::Slice(), 10}),
                               logits_changed.index({torch::indexing::Slice(), 10})));
}

// Fused and explicit attention compute the same function: GPT's, and Llama's with grouped K/V
// heads and rotary positions.
void expect_math_and_fused_attention_agree(const std::string& preset) {
  ModelConfig config = model_preset(preset);
  torch::manual_seed(3);
  Transformer fused(config);
  config.attention = AttentionKind::kMath;
  torch::manual_seed(3);
  Transformer math(config);
  fused->eval();
  math->eval();
  const auto plan = CheckpointPolicy::none().plan_for(config.layers, 0.0);
  const torch::Tensor tokens = torch::randint(0, 256, {2, 32}, torch::kLong);
  EXPECT_TRUE(
      torch::allclose(fused->forward(tokens, plan), math->forward(tokens, plan), 1e-4, 1e-5));
}

TEST(Gpt, MathAndFusedAttentionAgree) { expect_math_and_fused_attention_agree("tiny"); }

TEST(Llama, GroupedQueryFusedAttentionAgreesWithTheExplicitOne) {
  expect_math_and_fused_attention_agree("llama-tiny");
}

INSTANTIATE_TEST_SUITE_P(BothCores, GptAttention,
                         ::testing::Values(AttentionKind::kSdpa, AttentionKind::kMath),
                         [](const auto& param_info) { return to_string(param_info.param); });

}  // namespace
}  // namespace rematlab
