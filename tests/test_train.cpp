#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>

#include "common/errors.h"
#include "run_json_contract.h"
#include "runtime/numerics.h"
#include "train/loss_scaler.h"
#include "train/trainer.h"

namespace rematlab {
namespace {

RunConfig tiny_run(int64_t steps) {
  RunConfig config;
  config.preset = "tiny";
  config.model = model_preset("tiny");
  config.steps = steps;
  config.threads = 1;
  return config;
}

TEST(Trainer, LossFallsOnTinyByTheDocumentedAmount) {
  // docs/architecture.md: the Markov task starts at ln 256 ≈ 5.55 and falls below 2.5 within
  // 100 steps (floor ln 2 ≈ 0.69).
  Trainer trainer(tiny_run(100));
  const RunSummary summary = trainer.run();
  EXPECT_EQ(summary.status, RunStatus::kOk);
  EXPECT_EQ(summary.steps_completed, 100);
  EXPECT_NEAR(summary.first_loss, std::log(256.0), 0.15);
  EXPECT_LT(summary.final_loss, 2.5);
}

TEST(Trainer, LlamaTrainsOnTinyToo) {
  RunConfig config = tiny_run(100);
  config.preset = "llama-tiny";
  config.model = model_preset("llama-tiny");
  const RunSummary summary = Trainer(config).run();
  EXPECT_EQ(summary.status, RunStatus::kOk);
  EXPECT_EQ(summary.params, config.model.parameter_count());
  EXPECT_NEAR(summary.first_loss, std::log(256.0), 0.15);
  EXPECT_LT(summary.final_loss, 2.5);
}

TEST(Trainer, SameSeedGivesBitIdenticalLosses) {
  RunConfig config = tiny_run(8);
  config.model.dropout = 0.1;
  const RunSummary first = Trainer(config).run();
  const RunSummary second = Trainer(config).run();
  ASSERT_EQ(first.steps.size(), second.steps.size());
  for (std::size_t i = 0; i < first.steps.size(); ++i) {
    EXPECT_EQ(first.steps[i].loss, second.steps[i].loss) << "step " << i;
  }
  config.seed = 1;
  EXPECT_NE(Trainer(config).run().steps.back().loss, first.steps.back().loss);
}

int64_t peak_activation(int64_t batch, int64_t layers) {
  RunConfig config = tiny_run(2);
  config.batch = batch;
  config.model.layers = layers;
  return Trainer(config).run().peak_activation_bytes;
}

TEST(Trainer, PeakActivationGrowsLinearlyWithBatch) {
  const int64_t b4 = peak_activation(4, 2);
  const int64_t b8 = peak_activation(8, 2);
  const int64_t b16 = peak_activation(16, 2);
  EXPECT_LT(b4, b8);
  EXPECT_LT(b8, b16);
  EXPECT_NEAR(static_cast<double>(b16) / b8, 2.0, 0.2);
  EXPECT_NEAR(static_cast<double>(b8) / b4, 2.0, 0.2);
}

TEST(Trainer, PeakActivationGrowsByAConstantAmountPerBlock) {
  const int64_t l2 = peak_activation(8, 2);
  const int64_t l4 = peak_activation(8, 4);
  const int64_t l6 = peak_activation(8, 6);
  EXPECT_LT(l2, l4);
  EXPECT_LT(l4, l6);
  EXPECT_NEAR(static_cast<double>(l6 - l4) / static_cast<double>(l4 - l2), 1.0, 0.05);
}

TEST(Trainer, BaselineHoldsParametersGradientsAndAdamState) {
  RunConfig config = tiny_run(3);
  const RunSummary summary = Trainer(config).run();
  // Timed steps begin with weights, gradients and AdamW's two moments: 4 × params × 4 bytes.
  const int64_t model_states = 4 * config.model.parameter_count() * 4;
  EXPECT_GE(summary.baseline_bytes, model_states);
  EXPECT_LT(summary.baseline_bytes, model_states + (64 << 10));
  EXPECT_EQ(summary.peak_activation_bytes, summary.peak_bytes - summary.baseline_bytes);
}

TEST(Trainer, BudgetTurnsAnOverrunIntoOom) {
  RunConfig config = tiny_run(10);
  config.budget_bytes = 1 << 20;  // below the model states themselves
  const RunSummary summary = Trainer(config).run();
  EXPECT_EQ(summary.status, RunStatus::kOom);
  EXPECT_EQ(summary.steps_completed, 1);
  EXPECT_NE(summary.message.find("budget"), std::string::npos);
}

TEST(Trainer, CancelStopsBetweenMicroBatches) {
  RunConfig config = tiny_run(50);
  config.accum = 4;
  std::atomic<bool> cancel{false};
  TrainerCallbacks callbacks;
  callbacks.cancel = &cancel;
  callbacks.on_step = [&](const StepMetrics& step) {
    if (step.step == 2) cancel = true;
  };
  const RunSummary summary = Trainer(config).run(callbacks);
  EXPECT_EQ(summary.status, RunStatus::kCancelled);
  EXPECT_EQ(summary.steps_completed, 3);
}

TEST(Trainer, MetricsAreConsistent) {
  RunConfig config = tiny_run(4);
  config.accum = 2;
  config.batch = 3;
  std::vector<StepMetrics> seen;
  TrainerCallbacks callbacks;
  callbacks.on_step = [&](const StepMetrics& step) { seen.push_back(step); };
  const RunSummary summary = Trainer(config).run(callbacks);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_TRUE(seen[0].warmup);
  EXPECT_FALSE(seen[1].warmup);
  for (const auto& step : seen) {
    EXPECT_NEAR(step.tokens_per_s, 2 * 3 * 64 / (step.step_ms / 1e3), 1e-6 * step.tokens_per_s);
    EXPECT_GE(step.step_ms, step.forward_ms + step.backward_ms);
    EXPECT_GT(step.grad_norm, 0.0);
    EXPECT_EQ(step.loss_scale, 1.0);
    EXPECT_GE(step.peak_activation_bytes, step.saved_activation_bytes);
    EXPECT_GT(step.saved_activation_bytes, 0);
  }
  EXPECT_EQ(summary.first_loss, seen.front().loss);
  EXPECT_EQ(summary.final_loss, seen.back().loss);
}

TEST(Trainer, Bf16AutocastTrainsOnCpu) {
  RunConfig config = tiny_run(30);
  config.precision = Precision::kBf16;
  const RunSummary summary = Trainer(config).run();
  EXPECT_EQ(summary.status, RunStatus::kOk);
  EXPECT_LT(summary.final_loss, summary.first_loss - 0.5);
}

TEST(Trainer, RejectsBadConfigurationsNamingTheFlag) {
  auto field_of = [](RunConfig config) -> std::string {
    try {
      Trainer trainer(config);
    } catch (const InvalidInput& error) {
      return error.field();
    }
    return "accepted";
  };
  RunConfig config = tiny_run(1);
  config.precision = Precision::kFp16;
  EXPECT_EQ(field_of(config), "--precision");
  config = tiny_run(1);
  config.batch = 0;
  EXPECT_EQ(field_of(config), "--batch");
  config = tiny_run(1);
  config.device = "tpu";
  EXPECT_EQ(field_of(config), "--device");
  config = tiny_run(1);
  config.checkpoint = "every:0";
  EXPECT_EQ(field_of(config), "--checkpoint");
  config = tiny_run(1);
  config.data = "text:/nonexistent/file";
  EXPECT_EQ(field_of(config), "--data");
}

TEST(Trainer, JsonSummaryHasEveryContractKey) {
  const nlohmann::json json = to_json(Trainer(tiny_run(2)).run());
  for (const char* key : rematlab::testing::kRunJsonKeys) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
  EXPECT_TRUE(json["run_id"].is_null());
  EXPECT_EQ(json["status"], "ok");
}

TEST(Trainer, GpuMemoryFieldsAreZeroOnCpu) {
  const RunSummary summary = Trainer(tiny_run(2)).run();
  for (const StepMetrics& step : summary.steps) {
    EXPECT_EQ(step.reserved_bytes, 0);
    EXPECT_EQ(step.device_used_bytes, 0);
  }
  const nlohmann::json json = to_json(summary);
  EXPECT_EQ(json.at("reserved_bytes"), 0);
  EXPECT_EQ(json.at("device_used_bytes"), 0);
  EXPECT_EQ(to_json(summary.steps.front()).at("reserved_bytes"), 0);
}

TEST(Trainer, NumericsSwitchesHoldForTheRunAndAreRestored) {
  auto& context = at::globalContext();
  ASSERT_FALSE(context.deterministicAlgorithms());
  ASSERT_FALSE(context.allowTF32CuBLAS());
  RunConfig config = tiny_run(2);
  config.tf32 = true;
  config.deterministic = true;
  {
    Trainer trainer(config);
    EXPECT_TRUE(context.deterministicAlgorithms());
    EXPECT_TRUE(context.allowTF32CuBLAS());
    EXPECT_EQ(trainer.run().status, RunStatus::kOk);  // no CPU kernel of the model refuses
  }
  EXPECT_FALSE(context.deterministicAlgorithms());
  EXPECT_FALSE(context.allowTF32CuBLAS());
  // It stays for the process: cuBLAS reads it once.
  ASSERT_NE(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
}

TEST(Trainer, SwitchesLeftOffKeepWhatTheProcessChose) {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  { Trainer trainer(tiny_run(1)); }
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  at::globalContext().setDeterministicAlgorithms(false, false);
}

TEST(Trainer, LossScaleSettingsAreValidated) {
  RunConfig config = tiny_run(1);
  config.loss_scale = 0.5;
  try {
    validate(config);
    ADD_FAILURE() << "a loss scale below 1 was accepted";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "--loss-scale");
  }
  config = tiny_run(1);
  config.loss_scale_growth_interval = 0;
  EXPECT_THROW(validate(config), InvalidInput);
}

TEST(LossScaler, SkipsAndHalvesOnOverflowAndGrowsAfterGoodSteps) {
  torch::Tensor w = torch::ones({4}, torch::requires_grad());
  LossScaler scaler(1024.0, /*growth_interval=*/3);
  scaler.scale((w * 2.0).sum()).backward();
  EXPECT_TRUE(scaler.unscale({w}));
  EXPECT_TRUE(torch::equal(w.grad(), torch::full({4}, 2.0)));
  w.mutable_grad().index_put_({1}, std::numeric_limits<float>::infinity());
  EXPECT_FALSE(scaler.unscale({w}));
  scaler.update(false);
  EXPECT_EQ(scaler.current(), 512.0);
  for (int i = 0; i < 3; ++i) scaler.update(true);
  EXPECT_EQ(scaler.current(), 1024.0);
}

}  // namespace
}  // namespace rematlab
