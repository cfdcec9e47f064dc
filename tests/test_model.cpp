#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/errors.h"
#include "model/gpt.h"

namespace rematlab {
namespace {

int64_t count_parameters(Gpt& model) {
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

TEST(ModelConfig, Gpt2SmallHasItsPublishedParameterCount) {
  // GPT-2 "124M" with its LM head tied to the token embedding: 124,439,808 parameters.
  EXPECT_EQ(model_preset("gpt2-124m").parameter_count(), 124439808);
}

TEST(ModelConfig, CountMatchesTheEngineModel) {
  for (const char* name : {"tiny", "small"}) {
    Gpt model(model_preset(name));
    EXPECT_EQ(count_parameters(model), model_preset(name).parameter_count()) << name;
  }
  ModelConfig odd = model_preset("tiny");
  odd.layers = 3;
  odd.d_model = 48;
  odd.heads = 6;
  odd.vocab = 97;
  Gpt model(odd);
  EXPECT_EQ(count_parameters(model), odd.parameter_count());
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

TEST(Gpt, ExposesTwoSublayersPerBlockAndTiesTheHead) {
  ModelConfig config = model_preset("tiny");
  config.vocab = 97;  // a shape no other weight has
  Gpt model(config);
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
  Gpt model(config);
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

TEST(Gpt, MathAndFusedAttentionAgree) {
  ModelConfig config = model_preset("tiny");
  torch::manual_seed(3);
  Gpt fused(config);
  config.attention = AttentionKind::kMath;
  torch::manual_seed(3);
  Gpt math(config);
  fused->eval();
  math->eval();
  const auto plan = CheckpointPolicy::none().plan_for(config.layers, 0.0);
  const torch::Tensor tokens = torch::randint(0, 256, {2, 32}, torch::kLong);
  EXPECT_TRUE(
      torch::allclose(fused->forward(tokens, plan), math->forward(tokens, plan), 1e-4, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(BothCores, GptAttention,
                         ::testing::Values(AttentionKind::kSdpa, AttentionKind::kMath),
                         [](const auto& param_info) { return to_string(param_info.param); });

}  // namespace
}  // namespace rematlab
