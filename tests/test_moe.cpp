// Mixtures of experts: their published sizes, routing, the balance loss's gradient, exactness
// under every checkpoint policy, and training.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cctype>
#include <cmath>
#include <limits>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "model/balance_loss.h"
#include "model/expert_routing.h"
#include "model/hf_config.h"
#include "model/moe.h"
#include "model/transformer.h"
#include "run/run_config.h"
#include "run/run_fields.h"
#include "scratch_dir.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "tiny_variants.h"
#include "train/gradient_check.h"
#include "train/trainer.h"

namespace rematlab {
namespace {

int64_t engine_parameters(const ModelConfig& config) {
  Transformer model(config);
  int64_t count = 0;
  for (const auto& param : model->parameters()) count += param.numel();
  return count;
}

TEST(MoeSizes, ThePublishedTotalAndActiveParameters) {
  // Mixtral 8×7B: 46.7B, 12.9B active; Qwen3-30B-A3B: 30.5B, 3.3B active (their model cards).
  const ModelConfig mixtral = model_preset("mixtral-8x7b");
  EXPECT_NEAR(static_cast<double>(mixtral.parameter_count()) / 46.7e9, 1.0, 0.005);
  EXPECT_NEAR(static_cast<double>(mixtral.active_parameter_count()) / 12.9e9, 1.0, 0.005);
  const ModelConfig qwen = model_preset("qwen3-30b-a3b");
  EXPECT_NEAR(static_cast<double>(qwen.parameter_count()) / 30.5e9, 1.0, 0.005);
  EXPECT_NEAR(static_cast<double>(qwen.active_parameter_count()) / 3.3e9, 1.0, 0.02);
  // A dense model uses every parameter.
  const ModelConfig dense = model_preset("llama3-8b");
  EXPECT_EQ(dense.active_parameter_count(), dense.parameter_count());
}

TEST(MoeSizes, TheCountIsTheEnginesModel) {
  for (const char* name : {"moe-tiny", "qwen2-moe-tiny"}) {
    const ModelConfig config = testing::tiny_variant(name);
    EXPECT_EQ(config.parameter_count(), engine_parameters(config)) << name;
  }
  // Four experts of width 96, two a token: the two unused experts' three matrices a block.
  const ModelConfig tiny = model_preset("moe-tiny");
  EXPECT_EQ(tiny.parameter_count() - tiny.active_parameter_count(), 2 * 2 * 3 * 64 * 96);
}

TEST(MoeConfig, SettingsThatCannotTrainAreRefusedByName) {
  auto refused_field = [](const ModelConfig& config) {
    try {
      validate(config);
    } catch (const InvalidInput& error) {
      return error.field();
    }
    return std::string("accepted");
  };
  ModelConfig config = model_preset("moe-tiny");
  EXPECT_EQ(refused_field(config), "accepted");
  config.moe.experts_per_token = 5;
  EXPECT_EQ(refused_field(config), "--experts-per-token");
  config = model_preset("moe-tiny");
  config.moe.capacity_factor = -1.0;
  EXPECT_EQ(refused_field(config), "--capacity-factor");
  config = model_preset("moe-tiny");
  config.switch_family(ModelFamily::kGpt);  // experts go with the family
  EXPECT_FALSE(config.moe.enabled());
  config.moe.experts = 4;
  config.moe.experts_per_token = 2;
  EXPECT_EQ(refused_field(config), "--experts");
  config = model_preset("llama-tiny");
  config.moe.experts_per_token = 2;  // without experts
  EXPECT_EQ(refused_field(config), "--experts");
  config = model_preset("moe-tiny");
  config.lora = default_lora_options(config.family);
  EXPECT_EQ(refused_field(config), "--finetune");
  // Layouts that split experts are not built: each refused by its flag.
  auto refused_run_field = [](RunConfig run) {
    try {
      validate(run);
    } catch (const InvalidInput& error) {
      return error.field() + (error.reason().find("mixture of experts") != std::string::npos
                                  ? " (experts)"
                                  : " (" + error.reason() + ")");
    }
    return std::string("accepted");
  };
  RunConfig run;
  run.model = model_preset("moe-tiny");
  run.world_size = 2;
  EXPECT_EQ(refused_run_field(run), "accepted");  // data parallelism trains them
  run.tp = 2;
  EXPECT_EQ(refused_run_field(run), "accepted");  // each expert split by width
  run.world_size = 4;
  run.ep = 2;  // but not over expert ranks beside
  EXPECT_EQ(refused_run_field(run).rfind("--tp", 0), 0U);
  run.world_size = 2;
  run.ep = 1;
  run.tp = 1;
  run.pp = 2;
  EXPECT_EQ(refused_run_field(run), "--pp (experts)");
  run.pp = 1;
  run.shard = "parameters";
  EXPECT_EQ(refused_run_field(run), "--shard (experts)");
  // More weights than anything counts: one line, not an overflow.
  config = model_preset("moe-tiny");
  config.layers = 10'000;
  config.d_model = 1 << 20;
  config.heads = 1 << 10;
  config.moe.experts = kMaxExperts;
  config.moe.expert_hidden = 1 << 22;
  EXPECT_EQ(refused_field(config), "--experts");
}

// The balance loss is recorded once a block and micro-batch: a policy that recomputes some
// blocks records what none records, bit for bit.
TEST(MoeTraining, ARecomputedBlockDoesNotRecordItsBalanceLossAgain) {
  auto balance_losses = [](const std::string& policy) {
    RunConfig config;
    config.model = model_preset("moe-tiny");
    config.model.layers = 3;
    config.batch = 2;
    config.accum = 2;
    config.steps = 2;
    config.threads = 1;
    config.checkpoint = policy;
    std::vector<double> values;
    TrainerCallbacks callbacks;
    callbacks.on_step = [&](const StepMetrics& step) { values.push_back(step.balance_loss); };
    Trainer(config).run(callbacks);
    return values;
  };
  const std::vector<double> none = balance_losses("none");
  ASSERT_EQ(none.size(), 2u);
  EXPECT_EQ(balance_losses("segments:a0-m0"), none);  // block 0 recomputed, 1 and 2 not
  EXPECT_EQ(balance_losses("every:1"), none);
}

TEST(ExpertRouting, EveryChoiceIsTakenWithoutACapacityAndGroupedByExpert) {
  torch::manual_seed(3);
  MoeOptions moe{4, 2, 0, 0, true, 0.0, 0.0};
  const torch::Tensor logits = torch::randn({50, 4});
  const ExpertRouting routing = route_tokens(logits, moe);
  int64_t taken = 0;
  for (int64_t count : routing.taken) taken += count;
  EXPECT_EQ(taken, 100);
  EXPECT_EQ(routing.chosen.sum().item<int64_t>(), 100);
  // Grouped by expert: each slot's expert (its token's choice) never decreases.
  const torch::Tensor experts = std::get<1>(logits.topk(2, -1)).reshape({-1});
  const torch::Tensor in_order = experts.index_select(0, routing.slots);
  EXPECT_TRUE((in_order.slice(0, 1) >= in_order.slice(0, 0, -1)).all().item<bool>());
  // Normalised: each token's two weights sum to 1.
  const torch::Tensor per_token = torch::zeros({100}).index_copy(0, routing.slots, routing.weights);
  EXPECT_TRUE(torch::allclose(per_token.view({50, 2}).sum(1), torch::ones({50})));
}

TEST(ExpertRouting, ACapacityKeepsEachExpertsFirstTokens) {
  // Every token prefers expert 0, then 1: with capacity ⌈1 · 8 · 2 / 4⌉ = 4, experts 0 and 1
  // take tokens 0-3 and the rest are dropped.
  MoeOptions moe{4, 2, 0, 0, true, 0.0, 1.0};
  const torch::Tensor logits = torch::tensor({3.0, 2.0, 1.0, 0.0}).repeat({8, 1});
  const ExpertRouting routing = route_tokens(logits, moe);
  EXPECT_EQ(expert_capacity(8, moe), 4);
  EXPECT_EQ(routing.taken, (std::vector<int64_t>{4, 4, 0, 0}));
  EXPECT_EQ(routing.chosen[0].item<int64_t>(), 8);  // the router's choices, before the cut
  EXPECT_TRUE(torch::equal(routing.slots, torch::tensor({0, 2, 4, 6, 1, 3, 5, 7}, torch::kLong)));
}

// A rank's load is the rows its experts took over the rows its tokens sent, summed over what
// was recorded since the last take (blocks and micro-batches), not their ratios' mean.
TEST(BalanceLedger, ARanksLoadIsItsRowsTakenOverItsRowsSent) {
  BalanceLedger ledger(0.0, 2);
  EXPECT_FALSE(ledger.take_rank_load());
  ledger.record_rank_rows(30, 10);
  ledger.record_rank_rows(10, 30);
  EXPECT_EQ(ledger.take_rank_load(), 1.0);        // the ratios' mean would be 5/3
  EXPECT_EQ(ledger.take_block_rank_load(), 3.0);  // the busiest block's alone
  EXPECT_FALSE(ledger.take_rank_load());
  EXPECT_FALSE(ledger.take_block_rank_load());
  ledger.record_rank_rows(3, 2);
  ledger.forget();
  EXPECT_FALSE(ledger.take_rank_load());
  EXPECT_FALSE(ledger.take_block_rank_load());
}

TEST(BalanceLoss, IsKWhenEveryExpertGetsItsShare) {
  // Uniform probabilities and choices spread evenly: E/N · Σ c_e · 1/E = (N·k)/N = k.
  const torch::Tensor probabilities = torch::full({8, 4}, 0.25);
  const torch::Tensor chosen = torch::full({4}, 4, torch::kLong);  // 8 tokens × 2 choices
  EXPECT_FLOAT_EQ(balance_loss(probabilities, chosen).item<float>(), 2.0f);
}

// The block's gradients with a balance coefficient are those of its output's sum plus
// coefficient × the balance loss, formed with autograd from the same router.
TEST(BalanceLoss, EntersBackwardAsIfAddedToTheLoss) {
  ModelConfig config = model_preset("moe-tiny");
  const double coefficient = 0.5;
  torch::manual_seed(7);
  auto ledger = std::make_shared<BalanceLedger>(coefficient, 1);
  MoeSublayer block(config, ledger);
  torch::manual_seed(7);
  MoeSublayer reference(config, std::make_shared<BalanceLedger>(0.0, 1));
  block.train();
  reference.train();
  torch::manual_seed(8);
  const torch::Tensor x = torch::randn({2, 16, 64}).requires_grad_(true);
  const torch::Tensor x_reference = x.detach().clone().requires_grad_(true);
  block.forward(x).sum().backward();

  auto params = reference.named_parameters();
  auto* norm = reference.named_children()["norm"]->as<NormImpl>();
  const torch::Tensor tokens = norm->forward(x_reference).reshape({-1, 64});
  const ExpertRouting routing = route_tokens(tokens.mm(params["router.weight"].t()), config.moe);
  (reference.forward(x_reference).sum() +
   coefficient * balance_loss(routing.probabilities, routing.chosen))
      .backward();
  EXPECT_TRUE(torch::allclose(x.grad(), x_reference.grad(), 1e-5, 1e-7));
  const auto block_params = block.named_parameters();
  EXPECT_TRUE(torch::allclose(block_params["router.weight"].grad(), params["router.weight"].grad(),
                              1e-5, 1e-7));
  // The router's gradient does change with the coefficient (the check can fail).
  torch::manual_seed(7);
  MoeSublayer plain(config, std::make_shared<BalanceLedger>(0.0, 1));
  plain.train();
  plain.forward(x.detach()).sum().backward();
  EXPECT_FALSE(torch::allclose(plain.named_parameters()["router.weight"].grad(),
                               params["router.weight"].grad(), 1e-5, 1e-7));
  // The value was recorded once.
  const std::optional<double> recorded = ledger->take();
  ASSERT_TRUE(recorded.has_value());
  EXPECT_FALSE(ledger->take().has_value());
}

RunConfig moe_check_config(const std::string& policy, const std::string& preset) {
  RunConfig config;
  config.model = testing::tiny_variant(preset);
  config.model.layers = 3;
  config.model.dropout = 0.1;
  config.batch = 4;
  config.accum = 2;
  config.threads = 1;
  config.checkpoint = policy;
  return config;
}

class MoeEveryPolicy : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

// A recomputed block routes exactly as its forward did: every policy is bit-identical to none,
// the balance loss's gradient included.
TEST_P(MoeEveryPolicy, GradientsAndLossAreIdenticalToNone) {
  const auto& [policy, preset] = GetParam();
  const GradientCheckResult result = check_gradients(moe_check_config(policy, preset));
  EXPECT_TRUE(result.identical) << policy << ": max abs diff " << result.max_abs_diff << " in "
                                << result.worst_param;
  EXPECT_EQ(result.loss_diff, 0.0);
  // Token embedding, final norm, head; a block: attention's norm, qkv and output, the MoE's
  // norm, router and 4 experts × 2 (+ a shared expert's up, down and gate).
  const int64_t per_block = preset == "qwen2-moe-tiny" ? 16 : 13;
  EXPECT_EQ(result.params_compared, 3 + 3 * per_block);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, MoeEveryPolicy,
    ::testing::Combine(::testing::Values("every:1", "every:2", "sublayer:1,2", "sublayer:1,1",
                                         "selective", "keep:matmul", "keep:router",
                                         "keep:mlp-in,expert-out", "segments:m0,a1-m2"),
                       ::testing::Values("moe-tiny", "qwen2-moe-tiny", "moe-capacity-tiny")),
    [](const auto& param_info) {
      std::string name = std::get<1>(param_info.param) + "_" + std::get<0>(param_info.param);
      for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

// One accumulation without a step (a gradient check) leaves no balance loss or load behind for
// the step after it to count.
TEST(MoeTraining, AnAccumulationWithoutAStepLeavesNothingForTheNextStep) {
  RunConfig config;
  config.model = model_preset("moe-tiny");
  config.batch = 2;
  config.threads = 1;
  Trainer trainer(config);
  ASSERT_TRUE(trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0)));
  BalanceLedger* ledger = trainer.model()->balance();
  ASSERT_NE(ledger, nullptr);
  EXPECT_FALSE(ledger->take());
  EXPECT_FALSE(ledger->take_load());
}

TEST(MoeTraining, LearnsAndRecordsItsBalanceLossEachStep) {
  RunConfig config;
  config.model = model_preset("moe-tiny");
  config.batch = 4;
  config.steps = 12;
  config.threads = 1;
  config.lr = 3e-3;
  config.checkpoint = "every:1";
  Trainer trainer(config);
  std::vector<StepMetrics> steps;
  TrainerCallbacks callbacks;
  callbacks.on_step = [&](const StepMetrics& step) { steps.push_back(step); };
  const RunSummary summary = trainer.run(callbacks);
  ASSERT_EQ(steps.size(), 12u);
  EXPECT_LT(steps.back().loss, steps.front().loss);
  for (const StepMetrics& step : steps) {
    // k = 2 when balanced; never below 1 (the router's own choices weigh most).
    EXPECT_TRUE(std::isfinite(step.balance_loss));
    EXPECT_GE(step.balance_loss, 1.0);
    EXPECT_LT(step.balance_loss, 4.0);
  }
  // A dense model records none.
  config.model = model_preset("llama-tiny");
  config.steps = 1;
  Trainer dense(config);
  std::vector<StepMetrics> dense_steps;
  callbacks.on_step = [&](const StepMetrics& step) { dense_steps.push_back(step); };
  dense.run(callbacks);
  ASSERT_EQ(dense_steps.size(), 1u);
  EXPECT_TRUE(std::isnan(dense_steps.front().balance_loss));
}

// What a run records of its experts reads back as the same model, its preset's or its own, and
// each step's balance loss survives the database exactly.
TEST(MoeRecords, TheExpertsAndTheBalanceLossReadBack) {
  RunConfig preset;
  preset.preset = "moe-tiny";
  preset.model = model_preset("moe-tiny");
  RunConfig custom;
  custom.preset = "custom";
  custom.model = testing::tiny_variant("qwen2-moe-tiny");
  custom.model.moe.capacity_factor = 1.25;
  custom.model.moe.experts_per_token = 3;
  RunConfig dense = preset;  // the preset made dense: the record must say so
  dense.model.moe = MoeOptions{};
  for (const RunConfig& config : {preset, custom, dense}) {
    const RunConfig read = run_config_from_record(to_json(config));
    EXPECT_TRUE(read.model.moe == config.model.moe) << to_json(config).dump();
    EXPECT_EQ(read.model.expert_width(), config.model.expert_width());
  }
  // Its name in lists says it has experts.
  EXPECT_EQ(describe_run(preset), "llama moe 4/2 none b8");
  EXPECT_EQ(describe_run(dense), "llama none b8");
  RunConfig split = preset;
  split.world_size = 4;
  split.ep = 2;
  EXPECT_EQ(describe_run(split), "llama moe 4/2 none b8 x4 ep2");
  testing::ScratchDir dir("moe-records");
  const std::string path = dir.file("runs.sqlite");
  RunStore store(path);
  StepMetrics step;
  step.balance_loss = 2.0123456789;
  int64_t run = 0;
  {
    RunWriter writer(path);
    run = writer.begin_run(std::nullopt, "moe", custom);
    writer.add_step(run, step);
    step.step = 1;
    step.balance_loss = std::numeric_limits<double>::quiet_NaN();
    writer.add_step(run, step);
  }
  const std::vector<StepMetrics> steps = store.steps(run);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].balance_loss, 2.0123456789);
  EXPECT_TRUE(std::isnan(steps[1].balance_loss));
  EXPECT_TRUE(store.run(run).config.model.moe == custom.model.moe);
}

TEST(MoeImport, MixtralAndQwenMoeConfigurationsAreTheirModels) {
  // Mixtral-8x7B-v0.1's config.json (the fields that shape it).
  const ImportedConfig mixtral = import_hf_config_text(
      R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
          "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
          "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
          "rope_theta": 1000000.0, "rms_norm_eps": 1e-05, "router_aux_loss_coef": 0.02,
          "output_router_logits": false, "sliding_window": null,
          "max_position_embeddings": 32768, "tie_word_embeddings": false})",
      "mixtral");
  EXPECT_EQ(mixtral.model.parameter_count(), model_preset("mixtral-8x7b").parameter_count());
  EXPECT_EQ(mixtral.model.moe.experts, 8);
  EXPECT_EQ(mixtral.model.moe.balance_coefficient, 0.0);  // transformers adds none: said so
  ASSERT_FALSE(mixtral.warnings.empty());
  EXPECT_NE(mixtral.warnings.front().find("output_router_logits"), std::string::npos);
  // Qwen3-30B-A3B's.
  const ImportedConfig qwen3 = import_hf_config_text(
      R"({"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
          "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
          "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
          "num_experts_per_tok": 8, "norm_topk_prob": true, "vocab_size": 151936,
          "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "router_aux_loss_coef": 0.001,
          "output_router_logits": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
          "max_position_embeddings": 40960, "tie_word_embeddings": false})",
      "qwen3");
  EXPECT_EQ(qwen3.model.parameter_count(), model_preset("qwen3-30b-a3b").parameter_count());
  EXPECT_EQ(qwen3.model.active_parameter_count(),
            model_preset("qwen3-30b-a3b").active_parameter_count());
  EXPECT_TRUE(qwen3.model.qk_norm);
  EXPECT_DOUBLE_EQ(qwen3.model.moe.balance_coefficient, 0.001);
  // Qwen1.5-MoE-A2.7B's: a shared expert of 5632, weights not normalised, q/k/v biases.
  const ImportedConfig qwen2 = import_hf_config_text(
      R"({"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
          "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
          "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
          "num_experts": 60, "num_experts_per_tok": 4, "norm_topk_prob": false,
          "vocab_size": 151936, "max_position_embeddings": 8192, "tie_word_embeddings": false})",
      "qwen2");
  EXPECT_EQ(qwen2.model.moe.shared_expert_hidden, 5632);
  EXPECT_FALSE(qwen2.model.moe.normalise_weights);
  EXPECT_TRUE(qwen2.model.qkv_bias);
  // 14.3B parameters, 2.7B active (its model card).
  EXPECT_NEAR(static_cast<double>(qwen2.model.parameter_count()) / 14.3e9, 1.0, 0.01);
  EXPECT_NEAR(static_cast<double>(qwen2.model.active_parameter_count()) / 2.7e9, 1.0, 0.03);
  // The shipped files (resources/examples/configs) are the presets, as published.
  for (const char* name : {"mixtral-8x7b", "qwen3-30b-a3b"}) {
    const ImportedConfig shipped =
        import_hf_config(std::string(REMATLAB_EXAMPLES_DIR) + "/configs/" + name + ".json");
    EXPECT_EQ(shipped.model.parameter_count(), model_preset(name).parameter_count()) << name;
    EXPECT_EQ(shipped.model.active_parameter_count(), model_preset(name).active_parameter_count())
        << name;
  }
  // A missing expert count is one line naming the field.
  try {
    import_hf_config_text(R"({"model_type": "mixtral", "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 256, "num_experts_per_tok": 2})",
                          "cut");
    FAIL() << "accepted";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("num_local_experts"), std::string::npos);
  }
}

}  // namespace
}  // namespace rematlab
