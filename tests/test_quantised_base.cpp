// A frozen base stored quantised (--base-precision int8|nf4): the formats themselves, training
// exactly as an fp32 base holding the dequantised weights would, every policy bit-identical to
// none, the bytes held against the count, and the CLI.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/quantised_weight.h"
#include "cli_runner.h"
#include "estimate/fine_tuning.h"
#include "model/model_config.h"
#include "model/quantised_projection.h"
#include "run/run_config.h"
#include "run/run_fields.h"
#include "scratch_dir.h"
#include "train/gradient_check.h"
#include "train/trainer.h"

namespace rematlab {
// Named, not anonymous: a unity batch shares one anonymous namespace between suites.
namespace quantised_base_suite {

RunConfig quantised_config(const std::string& preset, BasePrecision base) {
  RunConfig config;
  config.model = model_preset(preset);
  config.model.layers = 3;
  config.model.lora = default_lora_options(config.model.family);
  config.model.lora.rank = 4;
  config.model.lora.base = base;
  config.batch = 4;
  config.threads = 1;
  config.steps = 3;
  return config;
}

// The blocks' projections of `trainer`'s model (its adapters and head excluded).
std::vector<std::pair<std::string, torch::nn::LinearImpl*>> block_projections(Trainer& trainer) {
  std::vector<std::pair<std::string, torch::nn::LinearImpl*>> found;
  for (const auto& item : trainer.model()->named_modules()) {
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(item.value().get());
    if (linear && item.key().rfind("block", 0) == 0) found.emplace_back(item.key(), linear);
  }
  return found;
}

TEST(QuantisedWeights, Int8KeepsEachRowWithinHalfAStepAndNf4DecodesItsLevelsExactly) {
  torch::manual_seed(7);
  const torch::Tensor weight = torch::randn({24, 41}) * 0.05;
  const torch::Tensor int8 = QuantisedWeight(weight, QuantisedFormat::kInt8).dequantise();
  const torch::Tensor step = weight.abs().amax(1, /*keepdim=*/true) / 127.0;
  EXPECT_TRUE(((int8 - weight).abs() <= step / 2 + 1e-9).all().item<bool>());
  // Values on the levels times a block's absmax come back as they were; 24·41 is not a multiple
  // of the block, so the last block is a padded one.
  const torch::Tensor levels =
      QuantisedWeight(torch::linspace(-1, 1, 16).view({4, 4}), QuantisedFormat::kNf4)
          .dequantise()
          .reshape({-1});
  torch::Tensor on_levels = levels.index_select(0, torch::randint(16, {24 * 41})).view({24, 41});
  on_levels.view({-1}).narrow(0, 0, 16).copy_(levels);  // each block holds ±1 (its absmax)
  for (int64_t block = 0; block * kNf4BlockSize < 24 * 41; ++block) {
    on_levels.view({-1})[block * kNf4BlockSize] = 1.0;
  }
  const torch::Tensor scaled = on_levels * 0.03;
  EXPECT_TRUE(torch::equal(QuantisedWeight(scaled, QuantisedFormat::kNf4).dequantise(),
                           (on_levels * 0.03f)));
  const QuantisedWeight nf4(weight, QuantisedFormat::kNf4);
  EXPECT_EQ(nf4.bytes(), quantised_bytes(24, 24 * 41, QuantisedFormat::kNf4));
  EXPECT_EQ(nf4.bytes(), 16 * 32 + 16 * 4);  // 984 values: 15 blocks and a padded one
  EXPECT_EQ(QuantisedWeight(weight, QuantisedFormat::kInt8).bytes(), 24 * 41 + 24 * 4);
  // Dequantised, the padded weight is its own shape, and close to it (nf4's levels are coarse).
  const torch::Tensor back = nf4.dequantise();
  EXPECT_EQ(back.sizes(), weight.sizes());
  EXPECT_LT((back - weight).abs().max().item<double>(), 0.2 * weight.abs().max().item<double>());
}

// The quantised model and an fp32 one whose projections hold the dequantised values train alike,
// loss for loss and adapter for adapter, in fp32 and under bf16 autocast.
TEST(QuantisedBase, TrainsAsAnFp32BaseHoldingItsDequantisedWeights) {
  for (const char* preset : {"tiny", "llama-tiny"}) {
    for (const BasePrecision base : {BasePrecision::kInt8, BasePrecision::kNf4}) {
      for (const Precision precision : {Precision::kFp32, Precision::kBf16}) {
        SCOPED_TRACE(std::string(preset) + " " + to_string(base) + " " + to_string(precision));
        RunConfig quantised = quantised_config(preset, base);
        quantised.precision = precision;
        RunConfig reference = quantised;
        reference.model.lora.base = BasePrecision::kFp32;
        Trainer stored(quantised);
        Trainer dequantised(reference);
        const auto projections = block_projections(dequantised);
        ASSERT_EQ(projections.size(), 3u * 4u);
        for (const auto& [name, linear] : projections) {
          torch::NoGradGuard no_grad;
          linear->weight.copy_(
              QuantisedWeight(linear->weight, quantised_format(base)).dequantise());
        }
        for (const auto& [name, linear] : block_projections(stored)) {
          EXPECT_EQ(linear->weight.numel(), 0) << name << " holds its full values";
        }
        const RunSummary a = stored.run();
        const RunSummary b = dequantised.run();
        ASSERT_EQ(a.status, RunStatus::kOk) << a.message;
        ASSERT_EQ(a.steps.size(), b.steps.size());
        for (std::size_t i = 0; i < a.steps.size(); ++i) {
          EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << i;
        }
        const auto trained = stored.model()->named_parameters();
        const auto expected = dequantised.model()->named_parameters();
        int compared = 0, trainable = 0;
        for (const auto& item : trained) {
          trainable += item.value().requires_grad();
          if (item.key().find("_lora.") == std::string::npos) continue;
          EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
          ++compared;
        }
        // Every trained parameter is an adapter and was compared: a renamed one would be skipped.
        EXPECT_GT(compared, 0);
        EXPECT_EQ(compared, trainable);
      }
    }
  }
}

TEST(QuantisedBase, EveryPolicyGivesTheAdaptersGradientsOfNoneBitForBit) {
  testing::ScratchDir dir("quantised-offload");
  for (const char* preset : {"tiny", "llama-tiny"}) {
    for (const BasePrecision base : {BasePrecision::kInt8, BasePrecision::kNf4}) {
      for (const char* policy :
           {"every:1", "every:2", "sublayer:2,1", "selective", "keep:qkv", "keep:matmul",
            "segments:a0-m0,m1,a2-m2", "every:1+disk", "every:1+bf16", "keep:matmul+bf16"}) {
        RunConfig config = quantised_config(preset, base);
        config.model.dropout = 0.1;
        config.accum = 2;
        std::string name = policy;
        const std::size_t plus = name.find('+');
        if (plus != std::string::npos) {
          if (name.substr(plus + 1) == "disk") config.offload = "disk:" + dir.path();
          if (name.substr(plus + 1) == "bf16") config.precision = Precision::kBf16;
          name = name.substr(0, plus);
        }
        config.checkpoint = name;
        const GradientCheckResult result = check_gradients(config, nullptr, std::nullopt, 2);
        EXPECT_TRUE(result.identical) << preset << " " << to_string(base) << " " << policy << ": "
                                      << result.max_abs_diff << " in " << result.worst_param;
        EXPECT_EQ(result.loss_diff, 0.0) << preset << " " << policy;
        EXPECT_GT(result.params_compared, 0) << preset << " " << policy;
      }
    }
  }
}

// What the model holds is what the count says, and the estimator counts the same.
TEST(QuantisedBase, HoldsTheBytesItsFormatCounts) {
  for (const char* preset : {"tiny", "llama-tiny"}) {
    for (const BasePrecision base : {BasePrecision::kInt8, BasePrecision::kNf4}) {
      SCOPED_TRACE(std::string(preset) + " " + to_string(base));
      const RunConfig config = quantised_config(preset, base);
      Trainer alone(config);
      int64_t buffers = 0;  // Llama's rotary tables (the codes and scales are model states)
      for (const auto& item : alone.model()->named_buffers()) {
        if (item.key().find("rotary") != std::string::npos) buffers += item.value().nbytes();
      }
      const int64_t measured = alone.run().baseline_bytes;
      const int64_t adapters = config.model.adapter_parameter_count();
      EXPECT_EQ(measured, config.model.frozen_base_bytes() + 16 * adapters + buffers);
      EXPECT_EQ(measured,
                estimate::fine_tuning_state_bytes(estimate::from_model_config(config.model),
                                                  Precision::kFp32, estimate::Optimizer::kAdamW)
                        .total() +
                    buffers);
      RunConfig full_base = config;
      full_base.model.lora.base = BasePrecision::kFp32;
      EXPECT_LT(config.model.frozen_base_bytes(), full_base.model.frozen_base_bytes() / 2);
    }
  }
}

TEST(QuantisedBaseCli, ARunRecordsItsBaseAndTheEstimateCountsIt) {
  testing::ScratchDir dir("quantised-cli");
  const std::string db = dir.file("runs.sqlite");
  const auto ran = testing::cli(
      "run --preset llama-tiny --finetune lora --base-precision nf4 --steps 2 --threads 1 "
      "--checkpoint every:1 --json --db " +
      db);
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const nlohmann::json run = testing::last_line_json(ran.out);
  EXPECT_EQ(run["base_precision"], "nf4");
  const auto shown =
      testing::cli("show --db " + db + " " + std::to_string(run["run_id"].get<int64_t>()));
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const RunConfig read = run_config_from_record(nlohmann::json::parse(shown.out)["config"]);
  EXPECT_EQ(read.model.lora.base, BasePrecision::kNf4);
  const auto estimated =
      testing::cli("estimate --model llama-tiny --finetune lora --base-precision int8 --json");
  ASSERT_EQ(estimated.exit_code, 0) << estimated.err;
  ModelConfig int8 = model_preset("llama-tiny");
  int8.lora = default_lora_options(int8.family);
  int8.lora.base = BasePrecision::kInt8;
  const nlohmann::json figures = testing::last_line_json(estimated.out);
  EXPECT_EQ(figures["base_precision"], "int8");
  EXPECT_EQ(figures["weights_bytes"].get<int64_t>(),
            int8.frozen_base_bytes() + 4 * int8.adapter_parameter_count());
}

}  // namespace quantised_base_suite
}  // namespace rematlab
