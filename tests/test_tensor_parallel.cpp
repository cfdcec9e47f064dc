// Tensor parallelism (--tp) with real processes over Gloo on 127.0.0.1: T ranks against one
// process at the same batch (and T × D ranks against one process at D times the batch), for both
// families, with key/value heads split and shared; every checkpoint policy against `none` under
// the same layout, bit for bit; what is refused before anything starts. The ranks are this test
// binary again (dist_workers.h); run_tensor_parallel_case is one rank's side.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "collective/tensor_parallel_group.h"
#include "dist_workers.h"
#include "estimate/estimate.h"
#include "estimate/sharded_units.h"
#include "estimate/tensor_layout.h"
#include "model/transformer.h"
#include "parallel/fully_sharded.h"
#include "parallel/tensor_parallel_exchange.h"
#include "run/shard_mode.h"
#include "train/trainer.h"

namespace rematlab {

std::vector<torch::Tensor> testing::dist::run_tensor_parallel_case(
    const std::shared_ptr<parallel::DistContext>& context, const nlohmann::json& item) {
  RunConfig config = config_from(item.at("run"));
  config.world_size = context->world_size();
  auto exchange = std::make_shared<parallel::TensorParallelExchange>(
      context, static_cast<int>(config.tp),
      parallel::DataParallelOptions{parse_shard(config.shard), config.bucket_bytes});
  if (item.at("mode") == "tensor_collectives") {
    // The group's own collectives on a known tensor, each dimension and a negative one.
    TensorParallelGroup& group = *exchange->tensor_parallel();
    const torch::Tensor mine =
        torch::arange(2 * 4 * 6, torch::kFloat32).view({2, 4, 6}) * (group.rank() + 1);
    std::vector<torch::Tensor> result;
    for (int64_t dim : {0, 1, 2, -1}) result.push_back(group.sum_and_scatter(mine, dim, "test"));
    for (int64_t dim : {0, 1, -1}) result.push_back(group.gather(mine, dim, "test"));
    return result;
  }
  Trainer trainer(config, exchange);
  std::vector<torch::Tensor> result;
  if (item.at("mode") == "tensor_gradients") {
    const std::optional<double> loss =
        trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0));
    result.push_back(torch::tensor({loss.value()}, torch::kFloat64));
    for (const auto& param : trainer.model()->parameters()) result.push_back(param.grad().clone());
    return result;
  }
  const RunSummary summary = trainer.run();
  if (item.at("mode") == "tensor_peak") {
    return {torch::tensor({static_cast<double>(summary.peak_activation_bytes)}, torch::kFloat64)};
  }
  // The steps' losses, then their gradient norms.
  std::vector<double> losses;
  for (const StepMetrics& step : summary.steps) losses.push_back(step.loss);
  for (const StepMetrics& step : summary.steps) losses.push_back(step.grad_norm);
  result.push_back(torch::tensor(losses, torch::kFloat64));
  if (auto* sharded = dynamic_cast<parallel::FullyShardedParameters*>(&exchange->data())) {
    for (torch::Tensor& param : sharded->whole_parameters()) result.push_back(param);
    return result;
  }
  for (const auto& param : trainer.model()->parameters()) result.push_back(param.detach().clone());
  return result;
}

// Named, not anonymous: a unity batch shares one anonymous namespace between suites.
namespace tensor_parallel_suite {

using namespace testing::dist;

// Heads 4 so that key/value heads can be split (2) or shared (1) over 2 ranks.
nlohmann::json small_fields(const std::string& arch) {
  return with(tiny_fields(), {{"arch", arch}, {"heads", 4}, {"tp", 2}});
}

// One process's run: the losses of its steps (or of its one accumulation) and its parameters (or
// their gradients).
struct Reference {
  std::vector<double> losses;
  std::vector<double> norms;  // steps only
  std::vector<torch::Tensor> tensors;
};

Reference one_process(const nlohmann::json& fields, int data_ranks, bool steps) {
  RunConfig config = config_from(fields);
  config.tp = 1;
  config.sequence_parallel = false;
  config.batch *= data_ranks;
  Trainer trainer(config);
  Reference reference;
  if (steps) {
    for (const StepMetrics& step : trainer.run().steps) {
      reference.losses.push_back(step.loss);
      reference.norms.push_back(step.grad_norm);
    }
    for (const auto& param : trainer.model()->parameters()) {
      reference.tensors.push_back(param.detach().clone());
    }
  } else {
    reference.losses.push_back(
        trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0)).value());
    for (const auto& param : trainer.model()->parameters()) {
      reference.tensors.push_back(param.grad().clone());
    }
  }
  return reference;
}

double relative_difference(const torch::Tensor& got, const torch::Tensor& expected) {
  const double scale = std::max(expected.abs().max().item<double>(), 1e-30);
  return max_abs_difference(got, expected) / scale;
}

// A step's gradient norm against one process's: its squares summed in another order, over
// parameters whose own values differ by the bound below after a few steps.
constexpr double kNormTolerance = 1e-4;

// The gradients and loss of each rank against its part of one process's, within `tolerance` of
// each tensor's largest element; returns the largest relative difference seen.
double expect_parts_match(const ScratchDir& dir, const std::string& name,
                          const nlohmann::json& fields, int world, bool steps, double tolerance) {
  const int tp = fields.at("tp").get<int>();
  const RunConfig config = config_from(fields);
  const Reference reference = one_process(fields, world / tp, steps);
  double largest = 0.0;
  for (int rank = 0; rank < world; ++rank) {
    const std::vector<torch::Tensor> got = load(result_file(dir.path(), name, rank));
    const std::vector<torch::Tensor> expected =
        part_of_rank(fields, reference.tensors, rank % tp, tp);
    EXPECT_EQ(got.size(), expected.size() + 1) << name;
    if (got.size() != expected.size() + 1) return INFINITY;
    for (std::size_t step = 0; step < reference.losses.size(); ++step) {
      EXPECT_NEAR(got[0][static_cast<int64_t>(step)].item<double>(), reference.losses[step],
                  1e-6 * std::abs(reference.losses[step]))
          << name << ", rank " << rank << ", loss " << step;
    }
    // The gradient norm each step clips with: every element counted once over the ranks.
    for (std::size_t step = 0; step < reference.norms.size(); ++step) {
      const int64_t at = static_cast<int64_t>(reference.losses.size() + step);
      EXPECT_GT(got[0].numel(), at) << name;
      if (got[0].numel() <= at) return INFINITY;
      EXPECT_NEAR(got[0][at].item<double>(), reference.norms[step],
                  kNormTolerance * reference.norms[step])
          << name << ", rank " << rank << ", gradient norm " << step;
    }
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(got[i + 1].sizes(), expected[i].sizes()) << name << ", tensor " << i;
      if (got[i + 1].sizes() != expected[i].sizes()) return INFINITY;
      torch::Tensor mine = got[i + 1];
      torch::Tensor theirs = expected[i];
      if (steps && is_qkv_bias(fields, i)) {
        // This rank's [query; key; value] bias: the key part only stays finite and near.
        const int64_t width =
            config.model.d_model / config.model.heads * (config.model.key_value_heads() / tp);
        const int64_t first = config.model.d_model / tp;
        const torch::Tensor key = mine.narrow(0, first, width);
        EXPECT_TRUE(torch::isfinite(key).all().item<bool>()) << name << ", the key bias";
        EXPECT_LE(max_abs_difference(key, theirs.narrow(0, first, width)),
                  2 * config.lr * static_cast<double>(config.steps))
            << name << ", rank " << rank << ", the key bias";
        auto without_key = [&](const torch::Tensor& t) {
          return torch::cat(
              {t.narrow(0, 0, first), t.narrow(0, first + width, t.size(0) - first - width)});
        };
        mine = without_key(mine);
        theirs = without_key(theirs);
      }
      const double difference = relative_difference(mine, theirs);
      EXPECT_LE(difference, tolerance) << name << ", rank " << rank << ", tensor " << i;
      largest = std::max(largest, difference);
    }
  }
  std::cout << name << " over " << world << " ranks: largest relative difference " << largest
            << std::endl;
  return largest;
}

nlohmann::json case_of(const std::string& name, const std::string& mode,
                       const nlohmann::json& fields) {
  return {{"name", name}, {"mode", mode}, {"run", fields}};
}

// One backward: the two matrix products a row-parallel layer splits, and the vocabulary's
// softmax split over ranks, add in another order than one process does, so gradients agree to
// fp32 rounding of the largest element (64 units in the last place leave room for the deepest
// chain of such sums here; the measured largest is printed).
constexpr double kGradientTolerance = 64 * 1.19e-7;

TEST(TensorParallel, TheGroupsCollectivesSumScatterAndGatherAlongAnyDimension) {
  ScratchDir dir("tp-collectives");
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  spec["cases"].push_back(case_of("collectives", "tensor_collectives", small_fields("gpt")));
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  const torch::Tensor base = torch::arange(2 * 4 * 6, torch::kFloat32).view({2, 4, 6});
  const torch::Tensor sum = base * 3;  // ranks 0 and 1 hold base × 1 and × 2
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<torch::Tensor> got = load(result_file(dir.path(), "collectives", rank));
    ASSERT_EQ(got.size(), 7u);
    const int64_t scattered[] = {0, 1, 2, 2};
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(torch::equal(got[i], sum.chunk(2, scattered[i])[rank])) << "scatter " << i;
    }
    const int64_t gathered[] = {0, 1, 2};
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(torch::equal(got[4 + i], torch::cat({base, base * 2}, gathered[i])))
          << "gather " << i;
    }
  }
}

TEST(TensorParallel, EveryGradientMatchesOneProcessForBothFamiliesAndBothKeyValueSplits) {
  ScratchDir dir("tp-gradients");
  const std::map<std::string, nlohmann::json> cases = {
      {"gpt", small_fields("gpt")},
      {"llama_kv_split", with(small_fields("llama"), {{"kv_heads", 2}})},
      {"llama_kv_shared", with(small_fields("llama"), {{"kv_heads", 1}})},
      {"gpt_sliced_loss", with(small_fields("gpt"), {{"loss_chunks", 4}})},
      {"llama_accum2", with(small_fields("llama"), {{"kv_heads", 1}, {"accum", 2}})},
      {"gpt_sp", with(small_fields("gpt"), {{"sequence_parallel", true}})},
      {"llama_sp", with(small_fields("llama"), {{"kv_heads", 1}, {"sequence_parallel", true}})},
      {"gpt_sp_sliced_loss",
       with(small_fields("gpt"), {{"sequence_parallel", true}, {"loss_chunks", 4}})},
      // Qwen 2's q, k and v biases, split with their heads or summed where all ranks hold them.
      {"llama_qkv_bias", with(small_fields("llama"), {{"kv_heads", 2}, {"qkv_bias", true}})},
      {"llama_qkv_bias_shared_sp",
       with(small_fields("llama"),
            {{"kv_heads", 1}, {"qkv_bias", true}, {"sequence_parallel", true}})},
      // Heads wider than d_model / heads (Qwen 3's small models).
      {"llama_wide_heads_sp",
       with(small_fields("llama"),
            {{"kv_heads", 2}, {"head_dim", 16}, {"sequence_parallel", true}})},
  };
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : cases) {
    spec["cases"].push_back(case_of(name, "tensor_gradients", fields));
  }
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const auto& [name, fields] : cases) {
    expect_parts_match(dir, name, fields, 2, false, kGradientTolerance);
  }
}

// Ten AdamW steps: AdamW divides each gradient by its running magnitude, which amplifies the
// gradients' rounding differences in elements of small gradient; measured, every parameter
// agrees to 1e-5 of its tensor's largest element (the qkv bias aside, see is_qkv_bias) and every
// step's loss to 1e-6 relative. The tolerance leaves a factor 10 over that.
constexpr double kStepsTolerance = 1e-4;

TEST(TensorParallel, TenStepsMatchOneProcessAndTwoByTwoRanksMatchOneProcessAtTwiceTheBatch) {
  // With and without sequence parallelism; clipped (each rank's part of the norm counted once)
  // and not.
  ScratchDir dir("tp-steps");
  const std::map<std::string, nlohmann::json> two = {
      {"gpt", with(small_fields("gpt"), {{"steps", 10}})},
      {"llama", with(small_fields("llama"), {{"kv_heads", 1}, {"steps", 10}})},
      {"gpt_unclipped", with(small_fields("gpt"), {{"steps", 10}, {"grad_clip", 0}})},
      {"llama_unclipped",
       with(small_fields("llama"), {{"kv_heads", 1}, {"steps", 10}, {"grad_clip", 0}})},
      {"gpt_sp", with(small_fields("gpt"), {{"steps", 10}, {"sequence_parallel", true}})},
      {"llama_sp",
       with(small_fields("llama"), {{"kv_heads", 1}, {"steps", 10}, {"sequence_parallel", true}})},
  };
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : two)
    spec["cases"].push_back(case_of(name, "tensor_steps", fields));
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const auto& [name, fields] : two)
    expect_parts_match(dir, name, fields, 2, true, kStepsTolerance);

  ScratchDir four_dir("tp-steps-4");
  const std::map<std::string, nlohmann::json> four = {
      {"tp2_dp2", with(small_fields("llama"), {{"kv_heads", 2}, {"steps", 10}})},
      {"tp2_sp_dp2", with(small_fields("gpt"), {{"steps", 10}, {"sequence_parallel", true}})},
  };
  // Four tensor ranks sharing two key/value heads: ranks 0–1 use one, 2–3 the other.
  const nlohmann::json shared_by_pairs =
      with(small_fields("llama"), {{"kv_heads", 2}, {"tp", 4}, {"sequence_parallel", true}});
  nlohmann::json four_spec = {{"output", four_dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : four) {
    four_spec["cases"].push_back(case_of(name, "tensor_steps", fields));
  }
  four_spec["cases"].push_back(case_of("tp4_kv2", "tensor_gradients", shared_by_pairs));
  run_workers(four_spec, 4, four_dir);
  if (HasFatalFailure()) return;
  for (const auto& [name, fields] : four) {
    expect_parts_match(four_dir, name, fields, 4, true, kStepsTolerance);
  }
  expect_parts_match(four_dir, "tp4_kv2", shared_by_pairs, 4, false, kGradientTolerance);
}

// Model states sharded over the data ranks of TP 2 × DP 2 (each data rank pair holds one tensor
// part): each shard mode, with key/value heads shared (rows of a split parameter every tensor
// rank holds alike, summed over them and counted once in the norm) and under sequence
// parallelism (every norm summed), clipped and not; held to one process at twice the batch as
// the unsharded layout is above, and to that layout itself (the same sums in the same order but
// the norm's, which clipping then carries into the parameters' last bits).
TEST(TensorParallel, ShardedModelStatesOverTheDataRanksTrainLikeOneProcess) {
  ScratchDir dir("tp-sharded");
  std::map<std::string, nlohmann::json> cases;
  const nlohmann::json llama =
      with(small_fields("llama"), {{"kv_heads", 1}, {"steps", 10}, {"accum", 2}});
  const nlohmann::json gpt_sp =
      with(small_fields("gpt"), {{"steps", 10}, {"sequence_parallel", true}});
  for (const std::string shard : {"none", "optimizer", "gradients", "parameters"}) {
    cases["llama " + shard] = with(llama, {{"shard", shard}});
    cases["gpt_sp " + shard] = with(gpt_sp, {{"shard", shard}});
    cases["gpt_sp_unclipped " + shard] = with(gpt_sp, {{"shard", shard}, {"grad_clip", 0}});
  }
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : cases) {
    spec["cases"].push_back(case_of(name, "tensor_steps", fields));
  }
  run_workers(spec, 4, dir);
  if (HasFatalFailure()) return;
  for (const auto& [name, fields] : cases) {
    expect_parts_match(dir, name, fields, 4, true, kStepsTolerance);
    const std::string layout = name.substr(0, name.find(' '));
    if (name == layout + " none") continue;
    if (layout != "gpt_sp_unclipped") continue;
    const int64_t steps = fields.at("steps").get<int64_t>();
    for (int rank = 0; rank < 4; ++rank) {
      const auto got = load(result_file(dir.path(), name, rank));
      const auto unsharded = load(result_file(dir.path(), layout + " none", rank));
      ASSERT_EQ(got.size(), unsharded.size()) << name;
      // The losses and parameters; the norms (summed shard by shard) are held above.
      EXPECT_TRUE(torch::equal(got[0].narrow(0, 0, steps), unsharded[0].narrow(0, 0, steps)))
          << name << ", rank " << rank << ", losses";
      for (std::size_t i = 1; i < got.size(); ++i) {
        EXPECT_TRUE(torch::equal(got[i], unsharded[i])) << name << ", rank " << rank << ", " << i;
      }
    }
  }
}

// Fully sharded parameters under TP 2 + SP × DP 2: every policy gathers what it recomputes and
// trains to the parameters of `none`, bit for bit.
TEST(TensorParallel, EveryPolicyTrainsLikeNoneWithParametersShardedOverTheDataRanks) {
  ScratchDir dir("tp-sharded-policies");
  // plan: measures the rank's chain on every rank at once (its gathers left out) and plans.
  const std::vector<std::string> policies = {
      "none",      "every:1",         "every:2",           "sublayer:1,2",
      "selective", "keep:qkv,mlp-in", "segments:a0-m0,m1", "plan:80KiB"};
  const nlohmann::json base =
      with(small_fields("llama"),
           {{"kv_heads", 1}, {"sequence_parallel", true}, {"steps", 2}, {"shard", "parameters"}});
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const std::string& policy : policies) {
    spec["cases"].push_back(case_of(policy, "tensor_steps", with(base, {{"checkpoint", policy}})));
  }
  spec["cases"].push_back(case_of("every:1+disk", "tensor_steps",
                                  with(base, {{"checkpoint", "every:1"}, {"offload", "disk"}})));
  run_workers(spec, 4, dir);
  if (HasFatalFailure()) return;
  for (const auto& item : spec["cases"]) {
    const std::string name = item.at("name");
    for (int rank = 0; rank < 4; ++rank) {
      const auto got = load(result_file(dir.path(), name, rank));
      const auto expected = load(result_file(dir.path(), "none", rank));
      ASSERT_EQ(got.size(), expected.size()) << name;
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(torch::equal(got[i], expected[i])) << name << ", rank " << rank << ", " << i;
      }
    }
  }
}

// Under tensor parallelism with and without sequence parallelism (where the tail of a recomputed
// segment runs whole: its scatter's backward gathers first).
TEST(TensorParallel, EveryPolicyGivesTheGradientsOfNoneBitForBitUnderTheSameLayout) {
  ScratchDir dir("tp-policies");
  // plan: measures its chain on both ranks at once and plans from the largest of each figure.
  const std::vector<std::string> policies = {
      "none",         "every:1",           "every:2",
      "sublayer:1,2", "selective",         "keep:qkv,mlp-in,attn-out",
      "keep:matmul",  "segments:a0-m0,m1", "plan:90KiB"};
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const std::string arch : {"gpt", "llama", "gpt_sp", "llama_sp"}) {
    const bool gpt = arch.rfind("gpt", 0) == 0;
    const nlohmann::json base = with(
        small_fields(gpt ? "gpt" : "llama"),
        {{"kv_heads", gpt ? 4 : 1}, {"sequence_parallel", arch.find("_sp") != std::string::npos}});
    for (const std::string& policy : policies) {
      spec["cases"].push_back(
          case_of(arch + " " + policy, "tensor_gradients", with(base, {{"checkpoint", policy}})));
    }
    spec["cases"].push_back(case_of(arch + " every:1+disk", "tensor_gradients",
                                    with(base, {{"checkpoint", "every:1"}, {"offload", "disk"}})));
  }
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const auto& item : spec["cases"]) {
    const std::string name = item.at("name");
    const std::string none = name.substr(0, name.find(' ')) + " none";
    for (int rank = 0; rank < 2; ++rank) {
      const auto got = load(result_file(dir.path(), name, rank));
      const auto expected = load(result_file(dir.path(), none, rank));
      ASSERT_EQ(got.size(), expected.size()) << name;
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(torch::equal(got[i], expected[i])) << name << ", rank " << rank << ", " << i;
      }
    }
  }
}

// The estimator's count of one tensor rank's parameters against the model's own split: exact,
// for both families, key/value heads split (kv 2 over 2 ranks) and shared (kv 1; kv 2 over 4).
TEST(TensorParallel, EstimatedParametersPerRankEqualTheSplitModel) {
  for (const auto& [arch, kv, tp] : std::vector<std::tuple<std::string, int, int>>{
           {"gpt", 4, 2}, {"gpt", 4, 4}, {"llama", 2, 2}, {"llama", 1, 2}, {"llama", 2, 4}}) {
    const nlohmann::json fields = with(small_fields(arch), {{"kv_heads", kv}, {"tp", tp}});
    const ModelConfig config = config_from(fields).model;
    int64_t whole = 0;
    Transformer model(config);
    for (const auto& param : model->parameters()) whole += param.numel();
    for (int rank = 0; rank < tp; ++rank) {
      model = Transformer(config);
      model->split_for_tensor_parallel(std::make_shared<TensorParallelGroup>(rank, tp));
      int64_t held = 0;
      for (const auto& param : model->parameters()) held += param.numel();
      EXPECT_EQ(estimate::rank_parameter_count(estimate::from_model_config(config), tp), held)
          << arch << " kv " << kv << " over " << tp << " ranks, rank " << rank;
      EXPECT_LT(held, whole);
      // The units --shard parameters gathers, as the estimator sizes them.
      const estimate::UnitParameters units =
          estimate::unit_parameter_counts(estimate::from_model_config(config), tp);
      const auto model_units = model->parameter_units();
      ASSERT_EQ(model_units.size(), 1 + 2 * static_cast<std::size_t>(config.layers));
      for (std::size_t unit = 0; unit < model_units.size(); ++unit) {
        int64_t numel = 0;
        for (const auto& param : model_units[unit]) numel += param.numel();
        const int64_t expected =
            unit == 0 ? units.ends : (unit % 2 == 1 ? units.attention : units.mlp);
        EXPECT_EQ(numel, expected) << arch << " kv " << kv << " over " << tp << ", unit " << unit;
      }
    }
  }
}

// Each rank's measured activation peak against the estimator's for that rank, within the ±5 % the
// single process is held to (docs/parallel.md has the table at 1, 2 and 4 ranks): llama-tiny at
// the batch its single-process calibration uses, with key/value heads split and shared, and GPT.
TEST(TensorParallel, PredictedActivationPeakPerRankWithinFivePercentOfMeasured) {
  ScratchDir dir("tp-peaks");
  std::map<std::string, nlohmann::json> cases;
  const nlohmann::json llama = {
      {"preset", "llama-tiny"}, {"batch", 8}, {"threads", 1}, {"tp", 2}, {"steps", 2}};
  const nlohmann::json gpt = with(llama, {{"preset", "tiny"}});
  for (const std::string policy : {"none", "selective", "every:1"}) {
    for (const bool sp : {false, true}) {
      const std::string suffix = policy + (sp ? " sp" : "");
      cases["llama " + suffix] = with(llama, {{"checkpoint", policy}, {"sequence_parallel", sp}});
      cases["gpt " + suffix] = with(gpt, {{"checkpoint", policy}, {"sequence_parallel", sp}});
    }
  }
  cases["llama shared kv every:1 sp"] =
      with(llama, {{"kv_heads", 1}, {"checkpoint", "every:1"}, {"sequence_parallel", true}});
  // A kept projection re-enters a recomputation on its input gathered whole.
  for (const std::string policy : {"keep:qkv", "keep:matmul"}) {
    cases["llama " + policy + " sp"] =
        with(llama, {{"checkpoint", policy}, {"sequence_parallel", true}});
    cases["gpt " + policy + " sp"] =
        with(gpt, {{"checkpoint", policy}, {"sequence_parallel", true}});
  }
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : cases) {
    spec["cases"].push_back(case_of(name, "tensor_peak", fields));
  }
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const auto& [name, fields] : cases) {
    const RunConfig config = config_from(fields);
    const int64_t predicted =
        estimate::estimate_policy_activations(estimate::from_model_config(config.model),
                                              config.batch, Precision::kFp32, config.checkpoint,
                                              false, estimate::Optimizer::kAdamW,
                                              {config.tp, config.sequence_parallel})
            .peak_bytes;
    for (int rank = 0; rank < 2; ++rank) {
      const double measured = load(result_file(dir.path(), name, rank)).at(0).item<double>();
      EXPECT_NEAR(static_cast<double>(predicted) / measured, 1.0, 0.05)
          << name << ", rank " << rank << ": predicted " << predicted << ", measured " << measured;
    }
  }
}

// A mixture of experts over tensor ranks: each expert (and a shared one) split by width, every
// rank routing every token alike. moe-tiny: 4 experts of width 96, 2 a token, its balance loss
// training (the same tokens route on every tensor rank as in one process, so the loss is the
// same too).
nlohmann::json moe_fields(const nlohmann::json& changes) {
  return with({{"preset", "moe-tiny"},
               {"seq_len", 16},
               {"batch", 2},
               {"threads", 1},
               {"bucket_bytes", 4096},
               {"tp", 2}},
              changes);
}

TEST(TensorParallel, AMixtureOfExpertsSplitByWidthMatchesOneProcess) {
  ScratchDir dir("tp-experts");
  const nlohmann::json sp = {{"sequence_parallel", true}};
  const std::map<std::string, nlohmann::json> cases = {
      {"moe", moe_fields({})},
      {"moe_sp", moe_fields(sp)},
      // Qwen 2 MoE's shared expert, split too, and its sigmoid gate, whole on every rank.
      {"moe_shared", moe_fields({{"shared_expert_hidden", 32}})},
      {"moe_shared_sp", moe_fields(with(sp, {{"shared_expert_hidden", 32}}))},
      // Tokens dropped at the capacity: each rank drops the ones one process drops (the first
      // rows; gathered, the sequences are in one process's order). At 1.0 few rows drop, the
      // same in either order; at 0.5 over three sequences, rank-major order drops others.
      {"moe_capacity_sp", moe_fields(with(sp, {{"capacity_factor", 1.0}}))},
      {"moe_capacity_half_sp", moe_fields(with(sp, {{"capacity_factor", 0.5}, {"batch", 3}}))},
      {"moe_capacity_half", moe_fields({{"capacity_factor", 0.5}, {"batch", 3}})},
      {"moe_every1_sp", moe_fields(with(sp, {{"checkpoint", "every:1"}}))},
      {"moe_accum2", moe_fields({{"accum", 2}})},
  };
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : cases) {
    spec["cases"].push_back(case_of(name, "tensor_gradients", fields));
  }
  // Steps without a shared expert: with one, an element of the first block's qkv weight has a
  // gradient about AdamW's epsilon (2e-8 after clipping), so rounding moves its update: after two
  // steps it is 1.6e-4 of the tensor's largest element from one process's (as far as one process
  // over a tensor exchange of one rank is from one without: 1.2e-4), beyond the tolerance.
  const nlohmann::json steps = moe_fields(with(sp, {{"steps", 6}}));
  spec["cases"].push_back(case_of("moe_sp_steps", "tensor_steps", steps));

  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const auto& [name, fields] : cases) {
    expect_parts_match(dir, name, fields, 2, false, kGradientTolerance);
  }
  expect_parts_match(dir, "moe_sp_steps", steps, 2, true, kStepsTolerance);

  // Four tensor ranks (experts of 24 each, two sharing each key/value head); two tensor ranks
  // over two data ranks, where each data rank's balance loss is its own tokens' (as under data
  // parallelism alone), so against one process at twice the batch it does not train.
  ScratchDir four_dir("tp-experts-4");
  const nlohmann::json tp4 = moe_fields(with(sp, {{"tp", 4}}));
  const nlohmann::json dp2 = moe_fields(with(sp, {{"steps", 6}, {"balance_coefficient", 0}}));
  nlohmann::json four_spec = {{"output", four_dir.path()}, {"cases", nlohmann::json::array()}};
  four_spec["cases"].push_back(case_of("tp4", "tensor_gradients", tp4));
  four_spec["cases"].push_back(case_of("tp2_dp2", "tensor_steps", dp2));
  run_workers(four_spec, 4, four_dir);
  if (HasFatalFailure()) return;
  expect_parts_match(four_dir, "tp4", tp4, 4, false, kGradientTolerance);
  expect_parts_match(four_dir, "tp2_dp2", dp2, 4, true, kStepsTolerance);
}

TEST(TensorParallel, EveryPolicyGivesAMixtureOfExpertsTheGradientsOfNoneBitForBit) {
  ScratchDir dir("tp-experts-policies");
  const std::vector<std::string> policies = {
      "none",         "every:1",     "every:2",
      "sublayer:1,2", "selective",   "keep:router,expert-out",
      "keep:mlp-in",  "keep:matmul", "segments:a0-m0,m1",
      "plan:230KiB"};
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const bool sp : {false, true}) {
    const std::string layout = sp ? "sp" : "tp";
    const nlohmann::json base =
        moe_fields({{"sequence_parallel", sp}, {"shared_expert_hidden", 32}});
    for (const std::string& policy : policies) {
      spec["cases"].push_back(
          case_of(layout + " " + policy, "tensor_gradients", with(base, {{"checkpoint", policy}})));
    }
    spec["cases"].push_back(case_of(layout + " every:1+disk", "tensor_gradients",
                                    with(base, {{"checkpoint", "every:1"}, {"offload", "disk"}})));
  }
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const auto& item : spec["cases"]) {
    const std::string name = item.at("name");
    const std::string none = name.substr(0, name.find(' ')) + " none";
    for (int rank = 0; rank < 2; ++rank) {
      const auto got = load(result_file(dir.path(), name, rank));
      const auto expected = load(result_file(dir.path(), none, rank));
      ASSERT_EQ(got.size(), expected.size()) << name;
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(torch::equal(got[i], expected[i])) << name << ", rank " << rank << ", " << i;
      }
    }
  }
}

// The estimator's count of one tensor rank's parameters, and of the units --shard parameters
// would gather, against a mixture of experts' own split: exact, with and without a shared expert.
TEST(TensorParallel, EstimatedParametersPerRankEqualTheSplitExperts) {
  for (const auto& [shared, tp] :
       std::vector<std::pair<int, int>>{{0, 2}, {32, 2}, {0, 4}, {32, 4}}) {
    const ModelConfig config =
        config_from(moe_fields({{"shared_expert_hidden", shared}, {"tp", tp}})).model;
    for (int rank = 0; rank < tp; ++rank) {
      Transformer model(config);
      model->split_for_tensor_parallel(std::make_shared<TensorParallelGroup>(rank, tp));
      int64_t held = 0;
      for (const auto& param : model->parameters()) held += param.numel();
      const estimate::Architecture arch = estimate::from_model_config(config);
      EXPECT_EQ(estimate::rank_parameter_count(arch, tp), held)
          << "shared " << shared << " over " << tp << ", rank " << rank;
      const estimate::UnitParameters units = estimate::unit_parameter_counts(arch, tp);
      const auto model_units = model->parameter_units();
      for (std::size_t unit = 1; unit < model_units.size(); unit += 2) {
        int64_t attention = 0;
        int64_t experts = 0;
        for (const auto& param : model_units[unit]) attention += param.numel();
        for (const auto& param : model_units[unit + 1]) experts += param.numel();
        EXPECT_EQ(attention, units.attention) << "unit " << unit;
        EXPECT_EQ(experts, units.mlp) << "unit " << unit + 1;
      }
    }
  }
}

// Each rank's measured activation peak against the estimator's, within the ±5 % of the rest:
// moe-tiny (experts of 96 split in two) at seq 64, batch 4, with and without sequence
// parallelism and a shared expert, recomputed and not.
TEST(TensorParallel, PredictedActivationPeakOfSplitExpertsWithinFivePercentOfMeasured) {
  ScratchDir dir("tp-experts-peaks");
  std::map<std::string, nlohmann::json> cases;
  const nlohmann::json base = moe_fields({{"seq_len", 64}, {"batch", 4}, {"steps", 2}});
  for (const std::string policy : {"none", "every:1", "keep:mlp-in"}) {
    for (const bool sp : {false, true}) {
      for (const int shared : {0, 32}) {
        cases[policy + (sp ? " sp" : "") + (shared ? " shared" : "")] = with(
            base,
            {{"checkpoint", policy}, {"sequence_parallel", sp}, {"shared_expert_hidden", shared}});
      }
    }
  }
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : cases) {
    spec["cases"].push_back(case_of(name, "tensor_peak", fields));
  }
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const auto& [name, fields] : cases) {
    const RunConfig config = config_from(fields);
    const int64_t predicted =
        estimate::estimate_policy_activations(estimate::from_model_config(config.model),
                                              config.batch, Precision::kFp32, config.checkpoint,
                                              false, estimate::Optimizer::kAdamW,
                                              {config.tp, config.sequence_parallel})
            .peak_bytes;
    for (int rank = 0; rank < 2; ++rank) {
      const double measured = load(result_file(dir.path(), name, rank)).at(0).item<double>();
      std::cout << name << " rank " << rank << ": " << static_cast<double>(predicted) / measured
                << std::endl;
      EXPECT_NEAR(static_cast<double>(predicted) / measured, 1.0, 0.05)
          << name << ", rank " << rank << ": predicted " << predicted << ", measured " << measured;
    }
  }
}

TEST(TensorParallel, LayoutsThatCannotSplitAreRefusedBeforeAnythingStarts) {
  ScratchDir dir("tp-refused");
  const std::string db = dir.file("runs.sqlite");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--nproc 3 --tp 3", "--tp: 3 tensor ranks cannot split heads 4 into equal parts"},
      {"--nproc 2 --tp 2 --arch llama --heads 6 --kv-heads 3 --d-model 48",
       "--tp: 2 tensor ranks can neither split nor share 3 key/value heads"},
      {"--nproc 3 --tp 2", "--tp: 2 tensor ranks need a multiple of 2 ranks in all, got --nproc 3"},
      {"--tp 2", "--tp: 2 tensor ranks need a multiple of 2 ranks in all, got --nproc 1"},
      {"--nproc 2 --tp 2 --vocab 63", "--tp: 2 tensor ranks cannot split the vocabulary 63"},
      {"--nproc 4 --tp 2 --shard parameters --precision bf16",
       "--shard: parameters are sharded in fp32 only for now"},
      {"--nproc 2 --tp 0", "--tp: must be between 1 and 4096, got 0"},
      {"--nproc 2 --tp 2 --dropout 0.1",
       "--dropout: is not drawn per shard under tensor parallelism yet; train with --dropout 0"},
      {"--nproc 2 --sequence-parallel",
       "--sequence-parallel: splits the sequence between tensor ranks: give --tp 2 or more"},
      {"--nproc 2 --tp 2 --sequence-parallel --seq-len 15",
       "--tp: 2 tensor ranks cannot split the sequence length 15"},
      // A mixture's experts split by width.
      {"--nproc 2 --tp 2 --arch llama --experts 4 --expert-hidden 99",
       "--tp: 2 tensor ranks cannot split the experts' width 99"},
      {"--nproc 2 --tp 2 --arch llama --experts 4 --shared-expert-hidden 33",
       "--tp: 2 tensor ranks cannot split the shared expert's width 33"},
      {"--nproc 4 --tp 2 --arch llama --experts 4 --ep 2",
       "--tp: does not combine with expert parallelism"},
      // A dense model: what is wrong is --ep, as estimate and layout say.
      {"--nproc 4 --tp 2 --ep 2",
       "--ep: splits a mixture of experts' experts; this model has none"},
  };
  for (const auto& [flags, message] : refused) {
    const testing::CliResult result = testing::cli(
        "run --preset tiny --layers 2 --batch 2 --threads 1 --steps 1 "
        "--db " +
        db + " " + flags);
    EXPECT_EQ(result.exit_code, 2) << flags << ": " << result.err;
    EXPECT_NE(result.err.find(message), std::string::npos) << flags << ": " << result.err;
    EXPECT_EQ(testing::count_lines(result.err), 1) << flags << ": " << result.err;
    EXPECT_FALSE(files::exists(db)) << flags;
  }
}

}  // namespace tensor_parallel_suite
}  // namespace rematlab
