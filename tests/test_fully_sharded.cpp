// Fully sharded parameters (--shard parameters, ZeRO-3) with real processes over Gloo on
// 127.0.0.1: D ranks against plain data parallelism over the same D ranks, for both families;
// every checkpoint policy against `none`, bit for bit, with the all-gathers each one costs
// counted; what each rank keeps between steps (1/D of every model state) and what the estimator
// predicts for it. The ranks are this test binary again (dist_workers.h);
// run_fully_sharded_case is one rank's side.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "dist_workers.h"
#include "estimate/architecture.h"
#include "estimate/estimate.h"
#include "estimate/sharded_states.h"
#include "estimate/sharded_units.h"
#include "estimate/tensor_layout.h"
#include "parallel/fully_sharded.h"
#include "train/trainer.h"

namespace rematlab {

// Returns: [0] the steps' losses, [1] per step (parameter gathers, recomputation's gathers),
// [2] (parameter, gradient, optimizer bytes kept, baseline, units, recomputed sublayers' extra
// gathers the step-0 plan implies, peak, the most whole units and gradients held at once), [3] each
// unit's parameter count, then every parameter, whole.
std::vector<torch::Tensor> testing::dist::run_fully_sharded_case(
    const std::shared_ptr<parallel::DistContext>& context, const nlohmann::json& item) {
  RunConfig config = config_from(item.at("run"));
  config.world_size = context->world_size();
  auto exchange = std::make_shared<parallel::FullyShardedParameters>(context);
  Trainer trainer(config, exchange);
  const RunSummary summary = trainer.run();
  std::vector<double> losses;
  std::vector<double> gathers;
  for (const StepMetrics& step : summary.steps) {
    losses.push_back(step.loss);
    gathers.push_back(static_cast<double>(step.parameter_gathers));
    gathers.push_back(static_cast<double>(step.recompute_gathers));
  }
  // A recomputed segment of n sublayers gathers n - 1 of them again (fully_sharded.h).
  int64_t extra = 0;
  for (const Segment& segment : trainer.policy().plan_for(config.model.layers, 0.0).segments) {
    if (segment.recompute) extra += segment.end - segment.begin - 1;
  }
  const parallel::ModelStateBytes& bytes = exchange->model_state_bytes();
  std::vector<torch::Tensor> result = {
      torch::tensor(losses, torch::kFloat64), torch::tensor(gathers, torch::kFloat64),
      torch::tensor(
          {static_cast<double>(bytes.params), static_cast<double>(bytes.grads),
           static_cast<double>(bytes.optimizer), static_cast<double>(summary.baseline_bytes),
           static_cast<double>(exchange->units().size()), static_cast<double>(extra),
           static_cast<double>(summary.peak_bytes),
           static_cast<double>(exchange->buffer_peak_bytes())},
          torch::kFloat64)};
  std::vector<double> unit_sizes;
  for (const parallel::BucketLayout& unit : exchange->units()) {
    unit_sizes.push_back(static_cast<double>(unit.numel));
  }
  result.push_back(torch::tensor(unit_sizes, torch::kFloat64));
  for (torch::Tensor& param : exchange->whole_parameters()) result.push_back(param);
  return result;
}

// Named, not anonymous: a unity batch shares one anonymous namespace between suites.
namespace fully_sharded_suite {

using namespace testing::dist;

constexpr std::size_t kFirstParameter = 4;  // in a fully sharded case's result

// Plain data parallelism's parameters after the same steps ("steps" mode of test_dist.cpp).
constexpr std::size_t kFirstPlainParameter = 1;

class FullyShardedParameters : public ::testing::TestWithParam<int> {};

// Gradients summed unit by unit instead of bucket by bucket, summed over ranks every micro-batch
// before the micro-batches are added (data parallelism adds them first), and the clipping norm
// summed shard by shard: the same sums in another order. That can move the last bit of a
// gradient, and AdamW's division by sqrt(v) + eps can let it reach a few ulps of a parameter
// after 5 steps: the bound is the sharded optimizer's (test_dist.cpp), the figure is printed.
TEST_P(FullyShardedParameters, TrainLikeDataParallelHoldingOneNthOfEveryModelState) {
  const int world = GetParam();
  ScratchDir dir("fully-sharded");
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const std::string arch : {"gpt", "llama"}) {
    const nlohmann::json base =
        with(tiny_fields(),
             {{"arch", arch}, {"heads", 4}, {"checkpoint", "every:1"}, {"accum", 2}, {"steps", 5}});
    spec["cases"].push_back({{"name", arch + "_plain"}, {"mode", "steps"}, {"run", base}});
    spec["cases"].push_back({{"name", arch + "_sharded"},
                             {"mode", "sharded_steps"},
                             {"run", with(base, {{"shard", "parameters"}})}});
  }
  run_workers(spec, world, dir);
  if (HasFatalFailure()) return;

  for (const std::string arch : {"gpt", "llama"}) {
    const RunConfig config = config_from(with(tiny_fields(), {{"arch", arch}, {"heads", 4}}));
    const int64_t params = config.model.parameter_count();
    const auto plain = load(result_file(dir.path(), arch + "_plain", 0));
    double largest = 0.0;
    for (int rank = 0; rank < world; ++rank) {
      const auto sharded = load(result_file(dir.path(), arch + "_sharded", rank));
      ASSERT_EQ(sharded.size() - kFirstParameter, plain.size() - kFirstPlainParameter);
      for (std::size_t i = 0; i + kFirstParameter < sharded.size(); ++i) {
        const torch::Tensor& got = sharded[i + kFirstParameter];
        const torch::Tensor& expected = plain[i + kFirstPlainParameter];
        const double scale = std::max(1.0, expected.abs().max().item<double>());
        const double difference = max_abs_difference(got, expected);
        EXPECT_LE(difference, 16 * 1.19e-7 * scale) << arch << ", rank " << rank << ", " << i;
        largest = std::max(largest, difference);
      }
      // Every micro-batch gathers: 2 of them a step here, each 2 · sublayers + 1 and one more
      // per recomputed block (every:1).
      const int64_t layers = config.model.layers;
      for (int64_t step = 0; step < sharded[1].numel() / 2; ++step) {
        EXPECT_EQ(sharded[1][2 * step].item<double>(), 2 * (4 * layers + 1 + layers)) << arch;
        EXPECT_EQ(sharded[1][2 * step + 1].item<double>(), 2 * layers) << arch;
      }
      // The engine's units are the ones the estimator counts.
      const estimate::UnitParameters counted =
          estimate::unit_parameter_counts(estimate::from_model_config(config.model));
      ASSERT_EQ(sharded[3].numel(), 1 + 2 * layers);
      EXPECT_EQ(sharded[3][0].item<double>(), counted.ends) << arch;
      for (int64_t block = 0; block < layers; ++block) {
        EXPECT_EQ(sharded[3][1 + 2 * block].item<double>(), counted.attention) << arch;
        EXPECT_EQ(sharded[3][2 + 2 * block].item<double>(), counted.mlp) << arch;
      }
      // What the rank kept between steps: 1/D of the parameters, gradients and AdamW moments
      // (each unit padded to a multiple of D adds at most D - 1 values).
      const torch::Tensor s = sharded[2];
      const double full = 4.0 * static_cast<double>(params);
      const double slack = 4.0 * s[4].item<double>() * (world - 1);
      EXPECT_NEAR(s[0].item<double>(), full / world, slack) << arch << ", rank " << rank;
      EXPECT_NEAR(s[1].item<double>(), full / world, slack) << arch;
      EXPECT_NEAR(s[2].item<double>(), 2 * full / world, 2 * slack) << arch;
      const double states = s[0].item<double>() + s[1].item<double>() + s[2].item<double>();
      const estimate::ModelStateBytes predicted = estimate::per_rank_model_states(
          estimate::model_state_bytes(params, Precision::kFp32, estimate::Optimizer::kAdamW), world,
          "parameters");
      EXPECT_NEAR(states, static_cast<double>(predicted.total()), 4 * slack) << arch;
      // Nothing whole outlives a step: what is live when a step begins is those states.
      EXPECT_GE(s[3].item<double>(), states) << arch;
      EXPECT_LT(s[3].item<double>(), states + 4096) << arch << ", rank " << rank;
    }
    std::cout << world << " ranks, " << arch
              << ": largest parameter difference from data parallelism after 5 steps " << largest
              << std::endl;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, FullyShardedParameters, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& ranks) {
                           return std::to_string(ranks.param) + "Ranks";
                         });

// Recomputation runs the same arithmetic on parameters gathered again, and every unit's
// gradients are summed in the same order whatever the policy: bit for bit. Each step gathers
// every unit for forward and every sublayer unit again for backward (2·sublayers + 1), and a
// recomputed segment of n sublayers n - 1 more.
TEST(FullyShardedParametersPolicies, EveryPolicyTrainsAsNoneBitForBitAndCountsItsGathers) {
  ScratchDir dir("fully-sharded-policies");
  const std::vector<std::string> policies = {
      "none", "every:1", "every:2", "selective", "sublayer:1,1", "keep:qkv,mlp-in", "disk"};
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  const nlohmann::json base =
      with(tiny_fields(), {{"arch", "llama"}, {"heads", 4}, {"steps", 3}, {"shard", "parameters"}});
  for (const std::string& policy : policies) {
    const nlohmann::json run =
        policy == "disk"
            ? with(base, {{"checkpoint", "every:1"}, {"offload", "disk:" + dir.file("offload")}})
            : with(base, {{"checkpoint", policy}});
    spec["cases"].push_back({{"name", policy}, {"mode", "sharded_steps"}, {"run", run}});
  }
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  const int64_t sublayers = 2 * config_from(base).model.layers;
  const auto none = load(result_file(dir.path(), "none", 0));
  for (const std::string& policy : policies) {
    for (int rank = 0; rank < 2; ++rank) {
      const auto result = load(result_file(dir.path(), policy, rank));
      ASSERT_EQ(result.size(), none.size());
      EXPECT_TRUE(torch::equal(result[0], none[0])) << policy << ": losses";
      for (std::size_t i = kFirstParameter; i < result.size(); ++i) {
        EXPECT_TRUE(torch::equal(result[i], none[i])) << policy << ", rank " << rank << ", " << i;
      }
      const int64_t extra = static_cast<int64_t>(result[2][5].item<double>());
      const torch::Tensor gathers = result[1];
      ASSERT_EQ(gathers.numel(), 2 * config_from(base).steps) << policy;  // two counts a step
      for (int64_t step = 0; step < gathers.numel() / 2; ++step) {
        EXPECT_EQ(gathers[2 * step].item<double>(), 2 * sublayers + 1 + extra)
            << policy << ", step " << step;
        EXPECT_EQ(gathers[2 * step + 1].item<double>(), extra) << policy << ", step " << step;
      }
      // Predicted: the rank's model states, the units it gathers and its activations.
      if (policy == "none" || policy == "every:1" || policy == "selective") {
        estimate::EstimateRequest request;
        const RunConfig config = config_from(with(base, {{"checkpoint", policy}}));
        request.arch = estimate::from_model_config(config.model);
        request.batch = config.batch;
        request.checkpoint = policy;
        request.world_size = 2;
        request.shard = "parameters";
        const estimate::Estimate predicted = estimate::make_estimate(request);
        const double measured = result[2][6].item<double>();
        const double expected =
            static_cast<double>(predicted.fixed_bytes() + predicted.activations->peak_bytes);
        EXPECT_NEAR(expected / measured, 1.0, 0.05) << policy << ", rank " << rank;
        // The whole units and gradients held at once, as counted where they are made and freed:
        // the estimator's to the byte but the padding (at most one element of each of the four
        // buffers over 2 ranks).
        const double buffers = result[2][7].item<double>();
        EXPECT_NEAR(buffers, static_cast<double>(predicted.gathered_bytes), 4 * 4)
            << policy << ", rank " << rank;
        if (rank == 0) {
          std::cout << policy << ": predicted / measured peak " << expected / measured
                    << ", gathered units "
                    << static_cast<double>(predicted.gathered_bytes) / buffers << std::endl;
        }
      }
      if (policy == "every:2") {
        EXPECT_EQ(extra, sublayers - 1);  // the whole chain is one segment
      }
    }
  }
}

TEST(ShardedUnitsEstimate, UnitsAddUpToTheModelAndTheGatheredBytesAreTheLargestTwice) {
  for (const std::string& name : estimate::architecture_names()) {
    const estimate::Architecture arch = estimate::architecture_preset(name);
    const estimate::UnitParameters units = estimate::unit_parameter_counts(arch);
    EXPECT_EQ(units.ends + arch.layers * (units.attention + units.mlp),
              estimate::parameter_count(arch))
        << name;
    EXPECT_EQ(estimate::gathered_unit_bytes(arch, Precision::kBf16),
              2 * 2 * (units.ends + std::max(units.attention, units.mlp)))
        << name;
  }
  // The article's 70B over 8 ranks in fp32: every model state divided by 8.
  const estimate::ModelStateBytes whole =
      estimate::model_state_bytes(70'000'000'000, Precision::kFp32, estimate::Optimizer::kAdamW);
  EXPECT_EQ(estimate::per_rank_model_states(whole, 8, "parameters").total(), whole.total() / 8);
}

TEST(ShardedParametersCli, EstimateAddsTheGatheredUnitsAndRunRefusesWhatItCannotShard) {
  const testing::CliResult estimate =
      testing::cli("estimate --model small --nproc 4 --shard parameters --json");
  ASSERT_EQ(estimate.exit_code, 0) << estimate.err;
  const nlohmann::json json = testing::last_line_json(estimate.out);
  const estimate::Architecture arch = estimate::architecture_preset("small");
  EXPECT_EQ(json.at("gathered_bytes").get<int64_t>(),
            estimate::gathered_unit_bytes(arch, Precision::kFp32));
  EXPECT_EQ(json.at("weights_bytes").get<int64_t>(), (estimate::parameter_count(arch) * 4 + 3) / 4);

  EXPECT_EQ(json.at("build_bytes").get<int64_t>(), 4 * estimate::parameter_count(arch));

  // Under TP 2 × DP 2: one tensor rank's units, its part of the model over 2 data ranks, and
  // that part whole on the device before it is sharded.
  const testing::CliResult split =
      testing::cli("estimate --model small --nproc 4 --tp 2 --shard parameters --json");
  ASSERT_EQ(split.exit_code, 0) << split.err;
  const nlohmann::json split_json = testing::last_line_json(split.out);
  EXPECT_EQ(split_json.at("gathered_bytes").get<int64_t>(),
            estimate::gathered_unit_bytes(arch, Precision::kFp32, 2));
  EXPECT_LT(split_json.at("gathered_bytes").get<int64_t>(), json.at("gathered_bytes"));
  EXPECT_EQ(split_json.at("weights_bytes").get<int64_t>(),
            (estimate::rank_parameter_count(arch, 2) * 4 + 1) / 2);
  EXPECT_EQ(split_json.at("build_bytes").get<int64_t>(),
            4 * estimate::rank_parameter_count(arch, 2));

  for (const std::string refused_flags :
       {"--nproc 2 --precision bf16", "--nproc 4 --tp 2 --precision bf16"}) {
    const testing::CliResult refused =
        testing::cli("run --preset tiny --shard parameters " + refused_flags);
    EXPECT_EQ(refused.exit_code, 2) << refused_flags;
    EXPECT_NE(refused.err.find("--shard: parameters are sharded in fp32 only"), std::string::npos)
        << refused.err;
    EXPECT_EQ(testing::count_lines(refused.err), 1) << refused.err;
  }
}

// ZeRO 1's update gathers every rank's updated shard in place: under every:1, where a short
// sequence keeps the activations small, what the step holds above the model states is no more
// than plain data parallelism's or AdamW's own temporaries (its denominator, twice a shard).
// Gloo's all-gather had staged bucket-sized buffers and a copy of the shard, three times that.
TEST(ShardedOptimizerCli, TheUpdatedParametersAreGatheredWithoutBuffers) {
  const std::string run =
      "run --preset tiny --layers 2 --d-model 32 --heads 2 --vocab 64 --seq-len 8 --batch 1 "
      "--threads 1 --nproc 2 --steps 2 --checkpoint every:1 --json --shard ";
  const testing::CliResult plain = testing::cli(run + "none");
  const testing::CliResult sharded = testing::cli(run + "optimizer");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(sharded.exit_code, 0) << sharded.err;
  const nlohmann::json plain_json = testing::last_line_json(plain.out);
  const nlohmann::json sharded_json = testing::last_line_json(sharded.out);
  const int64_t shard_bytes = (4 * sharded_json.at("params").get<int64_t>() + 7) / 2;
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json& figures = sharded_json.at("ranks").at(rank);
    const int64_t above_states = figures.at("peak_activation_bytes").get<int64_t>();
    const int64_t plain_above =
        plain_json.at("ranks").at(rank).at("peak_activation_bytes").get<int64_t>();
    EXPECT_LE(above_states, std::max(plain_above, 2 * shard_bytes) + 4096) << figures.dump();
    EXPECT_EQ(figures.at("buffer_peak_bytes").get<int64_t>(), 0) << figures.dump();
  }
}

}  // namespace fully_sharded_suite
}  // namespace rematlab
