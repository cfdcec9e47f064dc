// The estimator: counts against the engine and published sizes, the article's arithmetic, the
// activation model against measured peaks, the U over every:K, and the CLI's contract.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli_runner.h"
#include "common/errors.h"
#include "common/posix_files.h"
#include "estimate/estimate.h"
#include "estimate/sharded_states.h"
#include "estimate/sharded_units.h"
#include "model/transformer.h"
#include "run/run_summary.h"
#include "tiny_variants.h"
#include "train/trainer.h"

namespace rematlab {
namespace {

using estimate::Architecture;

Architecture preset(const std::string& name) { return estimate::architecture_preset(name); }

TEST(Estimate, PresetCountsEqualTheEngineModel) {
  for (const auto& name : preset_names()) {
    const ModelConfig config = model_preset(name);
    // Built and counted up to GPT-2 350M; the billions are checked against their published
    // counts in test_model.cpp.
    if (config.parameter_count() > 400'000'000) continue;
    Transformer model(config);
    int64_t engine = 0;
    for (const auto& p : model->parameters()) engine += p.numel();
    EXPECT_EQ(estimate::parameter_count(preset(name)), engine) << name;
  }
}

TEST(Estimate, PublishedSizesWithinOnePercent) {
  const std::vector<std::pair<std::string, double>> published = {
      {"llama2-7b", 6.74e9}, {"llama2-70b", 68.98e9}, {"gpt3-175b", 175e9}};
  for (const auto& [name, size] : published) {
    const double count = static_cast<double>(estimate::parameter_count(preset(name)));
    EXPECT_NEAR(count / size, 1.0, 0.01) << name << ": " << count;
  }
}

TEST(Estimate, ArticleArithmeticFromNominal70B) {
  estimate::EstimateRequest request;
  request.nominal_params = 70'000'000'000;
  const estimate::Estimate result = estimate::make_estimate(request);
  EXPECT_EQ(result.states.weights, 280'000'000'000);
  EXPECT_EQ(result.states.optimizer, 560'000'000'000);
  EXPECT_EQ(result.states.gradients, 280'000'000'000);
  EXPECT_EQ(result.states.master, 0);
  EXPECT_EQ(result.states.total(), 1'120'000'000'000);
  EXPECT_FALSE(result.activations.has_value());
  for (const auto& fit : result.fits) EXPECT_FALSE(fit.fits);
}

TEST(Estimate, Llama70BStatesAreProportionalToItsExactCount) {
  estimate::EstimateRequest request;
  request.arch = preset("llama2-70b");
  const estimate::Estimate result = estimate::make_estimate(request);
  const int64_t n = *result.architecture_params;
  EXPECT_EQ(result.params, n);
  EXPECT_EQ(result.states.weights, 4 * n);
  EXPECT_EQ(result.states.optimizer, 8 * n);
  EXPECT_EQ(result.states.gradients, 4 * n);
  EXPECT_EQ(result.states.total(), 16 * n);
}

TEST(Estimate, MixedPrecisionKeepsAnFp32MasterAndSgdNoMoments) {
  const auto bf16 =
      estimate::model_state_bytes(1000, Precision::kBf16, estimate::Optimizer::kAdamW);
  EXPECT_EQ(bf16.weights, 2000);
  EXPECT_EQ(bf16.gradients, 2000);
  EXPECT_EQ(bf16.master, 4000);
  EXPECT_EQ(bf16.total(), 16000);
  const auto sgd = estimate::model_state_bytes(1000, Precision::kFp32, estimate::Optimizer::kSgd);
  EXPECT_EQ(sgd.total(), 8000);
}

int64_t every_k_peak(const Architecture& arch, int64_t k, int64_t batch) {
  return estimate::estimate_policy_activations(arch, batch, Precision::kFp32,
                                               "every:" + std::to_string(k), false)
      .peak_bytes;
}

TEST(Estimate, BestIntervalMinimisesTheEveryKCurve) {
  for (const char* name : {"small", "gpt2-350m", "llama2-7b", "llama2-70b", "gpt3-175b"}) {
    estimate::ActivationInput input;
    input.arch = preset(name);
    input.batch = 4;
    int64_t best_peak = 0;
    const int64_t best = estimate::best_interval(input, &best_peak);
    for (int64_t k = 1; k <= input.arch.layers; ++k) {
      EXPECT_LE(best_peak, every_k_peak(input.arch, k, 4)) << name << " K=" << k;
    }
    EXPECT_EQ(best_peak, every_k_peak(input.arch, best, 4));
  }
  // Deep models show the U: kept inputs fall as 1/K while one segment's interior grows with K.
  // A block keeps ~16 residual-sized tensors, so the bottom sits near √(L/16), not √L.
  for (const char* name : {"llama2-70b", "gpt3-175b"}) {
    const Architecture arch = preset(name);
    estimate::ActivationInput input;
    input.arch = arch;
    const int64_t best = estimate::best_interval(input);
    EXPECT_GT(best, 1) << name;
    EXPECT_LT(every_k_peak(arch, best, 1), every_k_peak(arch, 1, 1)) << name;
    EXPECT_LT(every_k_peak(arch, best, 1), every_k_peak(arch, 2 * best + 2, 1)) << name;
    EXPECT_LT(every_k_peak(arch, 2 * best + 2, 1), every_k_peak(arch, arch.layers, 1)) << name;
  }
}

TEST(Estimate, BadShapesNameTheField) {
  Architecture arch = preset("tiny");
  arch.heads = 5;
  try {
    estimate::validate(arch);
    FAIL() << "5 heads accepted for d 64";
  } catch (const InvalidInput& error) {
    EXPECT_EQ(error.field(), "--heads");
  }
  arch = preset("tiny");
  arch.layers = 0;
  EXPECT_THROW(estimate::validate(arch), InvalidInput);
}

TEST(Estimate, RecomputationAddsHardwareFlopsOnly) {
  const Architecture arch = preset("small");
  const auto none = estimate::step_flops(arch, 2048, CheckpointPolicy::none().plan_for(12, 0.0));
  const auto every =
      estimate::step_flops(arch, 2048, CheckpointPolicy::parse("every:1").plan_for(12, 0.0));
  EXPECT_DOUBLE_EQ(none.model, every.model);
  EXPECT_DOUBLE_EQ(none.hardware, none.model);
  // Recomputing every block is one more forward of the blocks, less each block's MLP down
  // projection (d × 4d, 2 FLOPs per weight and token), where the recomputation stops.
  const double blocks = 12.0 * estimate::block_forward_flops_per_token(arch) * 2048;
  const double d = static_cast<double>(arch.d_model);
  ASSERT_EQ(arch.mlp_hidden, 4 * arch.d_model);
  const double down = 12.0 * 2.0 * d * 4.0 * d * 2048;
  EXPECT_NEAR(every.hardware - every.model, blocks - down, blocks * 1e-9);
  // sublayer:1,1 stops before every projection that ends a sublayer: the attention's too.
  const auto each =
      estimate::step_flops(arch, 2048, CheckpointPolicy::parse("sublayer:1,1").plan_for(12, 0.0));
  const double out = 12.0 * 2.0 * d * d * 2048;
  EXPECT_NEAR(each.hardware - each.model, blocks - down - out, blocks * 1e-9);
  // keep:matmul runs no projection again: only the attention cores (4·s·d per token) remain.
  const auto kept =
      estimate::step_flops(arch, 2048, CheckpointPolicy::parse("keep:matmul").plan_for(12, 0.0));
  const double cores = 12.0 * 4.0 * static_cast<double>(arch.seq_len) * d * 2048;
  EXPECT_NEAR(kept.hardware - kept.model, cores, blocks * 1e-9);
}

// Under a sliding window the cores count the keys each block computes: mistral-7b's 8192 tokens
// in blocks of 4096, the first against its own 4096 keys, the second against 8192: 3/4 of the
// full rows, and the model FLOPs fall by exactly the cores' quarter.
TEST(Estimate, ASlidingWindowCountsTheCoresKeysOnly) {
  Architecture arch = estimate::from_model_config(model_preset("mistral-7b"));
  ASSERT_EQ(arch.sliding_window, 4096);
  ASSERT_EQ(arch.seq_len, 8192);
  const double windowed = estimate::attention_core_flops_per_token(arch);
  const auto plan = CheckpointPolicy::none().plan_for(arch.layers, 0.0);
  const double windowed_model = estimate::step_flops(arch, 8192, plan).model;
  arch.sliding_window = 0;
  const double full = estimate::attention_core_flops_per_token(arch);
  EXPECT_DOUBLE_EQ(full, 4.0 * 8192 * 4096);
  EXPECT_DOUBLE_EQ(windowed, full * 3 / 4);
  EXPECT_NEAR(estimate::step_flops(arch, 8192, plan).model - windowed_model,
              3.0 * 32 * (full - windowed) * 8192, 1.0);
}

// The activation model against the engine's measured peak (docs/estimates.md has the full
// table). `small` at batch 2, two steps (the first is warm-up), fp32 on the CPU.
struct Calibration {
  std::string checkpoint;
  AttentionKind attention;
  std::string preset = "small";
  int64_t batch = 2;
  int64_t loss_chunks = 1;
  // Every row is within ±4 % (docs/estimates.md): 5 % catches a lost or doubled term of one
  // B·T·d tensor (early stop's saving is 3 % of `small`'s every:1 peak).
  double tolerance = 0.05;
  int64_t window = 0;  // a sliding window; 0: none
};

// gtest prints parameters in test listings (and ctest's names); bytes would be unreadable.
void PrintTo(const Calibration& c, std::ostream* out) {
  *out << c.preset << " " << c.checkpoint << " with " << to_string(c.attention) << " attention, "
       << c.loss_chunks << " loss slices";
  if (c.window > 0) *out << ", window " << c.window;
}

std::string describe_shape(const RunConfig& config) {
  return std::to_string(config.model.layers) + "×" + std::to_string(config.model.d_model) + ", " +
         std::to_string(config.model.heads) + "/" + std::to_string(config.model.key_value_heads()) +
         " heads, seq " + std::to_string(config.model.seq_len) + ", vocab " +
         std::to_string(config.model.vocab) + (config.model.tie_head ? " (tied)" : "") + ", " +
         std::to_string(config.model.loss_chunks) + " loss slices, batch " +
         std::to_string(config.batch) + (config.model.qk_norm ? ", q/k norms" : "") +
         (config.model.qkv_bias ? ", q/k/v biases" : "") +
         (config.model.head_width > 0 ? ", head width " + std::to_string(config.model.head_width)
                                      : "") +
         (config.model.sliding_window > 0
              ? ", window " + std::to_string(config.model.sliding_window)
              : "");
}

// The measured peak of `config` against the prediction, within `tolerance`.
void expect_predicted_peak(const RunConfig& config, const std::string& context,
                           double tolerance = 0.05) {
  const RunSummary summary = Trainer(config).run();
  const int64_t predicted =
      estimate::estimate_policy_activations(estimate::from_model_config(config.model), config.batch,
                                            Precision::kFp32, config.checkpoint, false)
          .peak_bytes;
  const double ratio =
      static_cast<double>(predicted) / static_cast<double>(summary.peak_activation_bytes);
  EXPECT_NEAR(ratio, 1.0, tolerance)
      << context << ": " << config.checkpoint << " on " << describe_shape(config) << ": predicted "
      << predicted << ", measured " << summary.peak_activation_bytes;
}

class EstimateCalibration : public ::testing::TestWithParam<Calibration> {};

TEST_P(EstimateCalibration, PredictsMeasuredPeakWithinTheStatedError) {
  const Calibration& c = GetParam();
  RunConfig config;
  config.preset = c.preset;
  config.model = testing::tiny_variant(c.preset);  // a preset, or qwen2-moe-tiny
  config.model.attention = c.attention;
  config.model.loss_chunks = c.loss_chunks;
  config.model.sliding_window = c.window;
  config.batch = c.batch;
  config.steps = 2;
  config.checkpoint = c.checkpoint;
  config.peak_flops = 1e9;  // not measured here
  expect_predicted_peak(config, to_string(config.model.attention) + " attention", c.tolerance);
}

INSTANTIATE_TEST_SUITE_P(Small, EstimateCalibration,
                         ::testing::Values(Calibration{"none", AttentionKind::kSdpa},
                                           Calibration{"every:1", AttentionKind::kSdpa},
                                           Calibration{"every:3", AttentionKind::kSdpa},
                                           Calibration{"sublayer:1,2", AttentionKind::kSdpa},
                                           Calibration{"keep:matmul", AttentionKind::kSdpa},
                                           Calibration{"keep:qkv", AttentionKind::kMath},
                                           Calibration{"none", AttentionKind::kMath},
                                           Calibration{"selective", AttentionKind::kMath}),
                         [](const ::testing::TestParamInfo<Calibration>& param) {
                           std::string name =
                               param.param.checkpoint + "_" + to_string(param.param.attention);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// Wide experts (moe-tiny's 4 experts at 1024, 16 times d): an expert's backward holds its
// [gate; up] output's gradient for its rows, more than the slot-wide gradients beside it; at the
// busiest expert's load the run recorded the peak is within 5 % (1.063 of the estimate without
// that term when written; 1.009 with it).
TEST(EstimateExperts, AWideExpertsBackwardIsCountedAtTheBusiestExpertsLoad) {
  RunConfig config;
  config.preset = "moe-tiny";
  config.model = testing::tiny_variant("moe-tiny");
  config.model.moe.expert_hidden = 1024;
  config.model.seq_len = 128;
  config.batch = 4;
  config.steps = 2;
  config.checkpoint = "every:1";
  config.peak_flops = 1e9;  // not measured here
  const RunSummary summary = Trainer(config).run();
  estimate::Architecture arch = estimate::from_model_config(config.model);
  arch.expert_load = recorded_expert_loads(config, summary.steps).expert;
  EXPECT_GT(arch.expert_load, 1.0);
  const int64_t predicted =
      estimate::estimate_policy_activations(arch, config.batch, Precision::kFp32, "every:1", false)
          .peak_bytes;
  EXPECT_NEAR(static_cast<double>(predicted) / static_cast<double>(summary.peak_activation_bytes),
              1.0, 0.05)
      << "predicted " << predicted << ", measured " << summary.peak_activation_bytes
      << " at expert load " << arch.expert_load;
}

// An expert-parallel layout the advice offers needs what `estimate` says of it: a larger --ep
// gives each expert more rows (its share comes from more ranks), which the advice must count.
TEST(EstimateExperts, AdvisedExpertRanksNeedWhatTheEstimateOfThemSays) {
  estimate::EstimateRequest request;
  request.arch = estimate::architecture_preset("mixtral-8x7b");
  request.arch->seq_len = 4096;
  request.world_size = 8;
  request.expert_ranks = 2;
  request.device_memories = {113LL << 30};
  const estimate::Estimate asked = estimate::make_estimate(request);
  ASSERT_TRUE(asked.fits.front().advice.has_value());
  const estimate::FitAdvice& advice = *asked.fits.front().advice;
  ASSERT_GT(advice.expert_ranks, 2);  // else this tests nothing
  estimate::EstimateRequest advised = request;
  advised.world_size = advice.world_size;
  advised.expert_ranks = advice.expert_ranks;
  advised.shard = advice.shard;
  advised.checkpoint = advice.checkpoint;
  advised.offload = advice.offload;
  advised.arch->loss_chunks = advice.loss_chunks;
  EXPECT_EQ(estimate::make_estimate(advised).fits.front().needed_bytes, advice.needed_bytes);
}

// Llama at the batch docs/estimates.md's table uses, within the ±5 % it states.
INSTANTIATE_TEST_SUITE_P(
    LlamaTiny, EstimateCalibration,
    ::testing::Values(Calibration{"none", AttentionKind::kSdpa, "llama-tiny", 8, 1, 0.05},
                      Calibration{"every:1", AttentionKind::kSdpa, "llama-tiny", 8, 1, 0.05},
                      Calibration{"sublayer:1,2", AttentionKind::kSdpa, "llama-tiny", 8, 1, 0.05},
                      Calibration{"selective", AttentionKind::kSdpa, "llama-tiny", 8, 1, 0.05},
                      Calibration{"every:2", AttentionKind::kSdpa, "llama-tiny", 8, 1, 0.05},
                      Calibration{"keep:matmul", AttentionKind::kSdpa, "llama-tiny", 8, 1, 0.05},
                      Calibration{"every:1", AttentionKind::kMath, "llama-tiny", 8, 1, 0.05},
                      Calibration{"none", AttentionKind::kSdpa, "llama-tiny", 8, 4, 0.05},
                      Calibration{"every:1", AttentionKind::kMath, "llama-tiny", 8, 4, 0.05}),
    [](const ::testing::TestParamInfo<Calibration>& param) {
      std::string name = param.param.checkpoint + "_" + to_string(param.param.attention) +
                         "_slices" + std::to_string(param.param.loss_chunks);
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// A mixture of experts (moe-tiny: 4 experts of 96, 2 a token) at the batch docs/estimates.md's
// table uses, within the ±5 % it states.
INSTANTIATE_TEST_SUITE_P(
    Experts, EstimateCalibration,
    ::testing::Values(Calibration{"none", AttentionKind::kSdpa, "moe-tiny", 8, 1, 0.05},
                      Calibration{"every:1", AttentionKind::kSdpa, "moe-tiny", 8, 1, 0.05},
                      Calibration{"every:2", AttentionKind::kSdpa, "moe-tiny", 8, 1, 0.05},
                      Calibration{"sublayer:1,2", AttentionKind::kSdpa, "moe-tiny", 8, 1, 0.05},
                      Calibration{"selective", AttentionKind::kSdpa, "moe-tiny", 8, 1, 0.05},
                      Calibration{"keep:matmul", AttentionKind::kSdpa, "moe-tiny", 8, 1, 0.05},
                      Calibration{"keep:router", AttentionKind::kSdpa, "moe-tiny", 8, 1, 0.05},
                      // Qwen 2 MoE's shared expert, unnormalised weights.
                      Calibration{"every:1", AttentionKind::kSdpa, "qwen2-moe-tiny", 8, 1, 0.05},
                      Calibration{"keep:matmul", AttentionKind::kSdpa, "qwen2-moe-tiny", 8, 1,
                                  0.05}),
    [](const ::testing::TestParamInfo<Calibration>& param) {
      std::string name = param.param.preset + "_" + param.param.checkpoint;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// A sliding window (Mistral's): llama-tiny's 64 tokens in blocks of 16, and in blocks of 24 that
// leave a short last one; both cores, the policies that keep or recompute the core.
INSTANTIATE_TEST_SUITE_P(
    SlidingWindow, EstimateCalibration,
    ::testing::Values(Calibration{"none", AttentionKind::kSdpa, "llama-tiny", 8, 1, 0.05, 16},
                      Calibration{"every:1", AttentionKind::kSdpa, "llama-tiny", 8, 1, 0.05, 16},
                      Calibration{"selective", AttentionKind::kSdpa, "llama-tiny", 8, 1, 0.05, 24},
                      Calibration{"none", AttentionKind::kMath, "llama-tiny", 8, 1, 0.05, 16},
                      Calibration{"none", AttentionKind::kMath, "llama-tiny", 8, 1, 0.05, 24},
                      Calibration{"every:1", AttentionKind::kMath, "llama-tiny", 8, 1, 0.05, 16},
                      Calibration{"selective", AttentionKind::kMath, "llama-tiny", 8, 1, 0.05, 24}),
    [](const ::testing::TestParamInfo<Calibration>& param) {
      std::string name = param.param.checkpoint + "_" + to_string(param.param.attention) +
                         "_window" + std::to_string(param.param.window);
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// Where the scores dominate (256 tokens, 4 heads of 16): a window of 32 cuts the measured peak
// of the explicit core's, and the estimate follows it within ±2 %, with and without the window,
// for both cores, in blocks that divide the sequence and in ones that leave a short last block.
TEST(SlidingWindowEstimate, FollowsTheMeasuredPeakAsTheWindowCutsIt) {
  for (const AttentionKind kind : {AttentionKind::kMath, AttentionKind::kSdpa}) {
    for (const std::string policy : {"none", "every:1", "selective"}) {
      std::map<int64_t, int64_t> measured;
      for (const int64_t window : {int64_t{0}, int64_t{32}, int64_t{48}}) {
        RunConfig config;
        config.model = model_preset("llama-tiny");
        config.model.seq_len = 256;
        config.model.attention = kind;
        config.model.sliding_window = window;
        config.batch = 2;
        config.steps = 2;
        config.threads = 1;
        config.checkpoint = policy;
        config.peak_flops = 1e9;  // not measured here
        measured[window] = Trainer(config).run().peak_activation_bytes;
        expect_predicted_peak(config, to_string(kind) + " attention", 0.02);
      }
      // The explicit core keeps each head's scores: a window of 32 keeps at most 64 of 256 a
      // row. The fused core never keeps them, and keeps its blocks' outputs joined once more.
      if (kind == AttentionKind::kMath && policy != "selective") {
        EXPECT_LT(measured[32], measured[0] * 3 / 4) << policy;
        EXPECT_LT(measured[32], measured[48]) << policy;
      }
    }
  }
}

// A quantised base's down projection: its dequantised weight sits beside its input (not kept
// for a frozen projection without an adapter) and then beside its product, while nf4's index
// is gone before the input's gradient is formed. Counting the index beside that gradient and
// not the input beside the weight once cancelled out under none and over-counted a recomputed
// block by the down projection's input (7.8 % at this shape under every:1); now within 0.5 %.
TEST(QuantisedBaseEstimate, TheDownProjectionsDequantisedWeightIsCountedWhereItIsHeld) {
  for (const ModelFamily family : {ModelFamily::kGpt, ModelFamily::kLlama}) {
    for (const BasePrecision base : {BasePrecision::kInt8, BasePrecision::kNf4}) {
      for (const std::string policy : {"none", "every:1", "selective", "keep:matmul"}) {
        RunConfig config;
        config.model.family = family;
        config.model.layers = 4;
        config.model.d_model = 384;
        config.model.heads = 8;
        config.model.kv_heads = family == ModelFamily::kLlama ? 8 : 0;
        config.model.seq_len = 32;
        config.model.vocab = 384;
        config.model.loss_chunks = 1;
        config.model.tie_head = false;
        config.model.lora.rank = 16;
        config.model.lora.alpha = 32.0;
        config.model.lora.targets = parse_lora_targets("q,k,v,o");
        config.model.lora.base = base;
        config.batch = 2;
        config.steps = 2;
        config.threads = 1;
        config.checkpoint = policy;
        config.peak_flops = 1e9;  // not measured here
        // keep:matmul stays over by up to 1.2 % at this shape (not traced yet).
        expect_predicted_peak(config, to_string(family) + " " + to_string(base) + " base",
                              policy == "keep:matmul" ? 0.015 : 0.005);
      }
    }
  }
}

// Shapes nobody calibrated: drawn at random (seeded and printed, so a failure can be rerun) per
// family and attention core, wide and short ones among them, trained two steps here under every
// policy, and the prediction held to ±5 % of the measured activation peak. Dropout is 0 (its
// masks are not modelled).
struct GeneratedShapes {
  ModelFamily family;
  AttentionKind attention;
  // Llama shapes as Qwen's configurations make them: q/k norms (Qwen 3), q/k/v biases (Qwen 2)
  // drawn, and heads as wide as d_model / heads or wider.
  bool qwen = false;
  // Mistral's sliding window, drawn so that it cuts the sequence into blocks (evenly or not).
  bool window = false;
};

unsigned shapes_seed(unsigned base, const GeneratedShapes& which) {
  return base + 2u * static_cast<unsigned>(which.family) + static_cast<unsigned>(which.attention) +
         (which.qwen ? 16u : 0u) + (which.window ? 32u : 0u);
}

class EstimateOnGeneratedShapes : public ::testing::TestWithParam<GeneratedShapes> {};

// A shape drawn for `which` (dropout 0), trained two steps, one thread.
RunConfig draw_any_shape(std::mt19937& random, const GeneratedShapes& which) {
  auto pick = [&](std::vector<int64_t> choices) {
    return choices[std::uniform_int_distribution<std::size_t>(0, choices.size() - 1)(random)];
  };
  RunConfig config;
  config.model.family = which.family;
  config.model.attention = which.attention;
  config.model.heads = pick({2, 3, 4, 6, 8});
  config.model.d_model = config.model.heads * pick({16, 32, 48, 64, 96});
  std::vector<int64_t> divisors;
  for (int64_t k = 1; k <= config.model.heads; ++k) {
    if (config.model.heads % k == 0) divisors.push_back(k);
  }
  config.model.kv_heads = which.family == ModelFamily::kLlama ? pick(divisors) : 0;
  config.model.tie_head = pick({0, 1}) == 1;
  config.model.layers = pick({2, 3, 4});
  config.model.seq_len = pick({32, 64, 96, 128, 160, 192, 256});
  config.model.vocab = pick({128, 256, 384, 512});
  config.model.loss_chunks = pick({1, 1, 4});
  config.batch = pick({1, 2, 3, 4});
  if (which.qwen) {
    config.model.qk_norm = pick({0, 1, 1}) == 1;
    config.model.qkv_bias = !config.model.qk_norm || pick({0, 1}) == 1;
    config.model.head_width = config.model.d_model / config.model.heads * pick({1, 1, 2});
  }
  if (which.window) {
    config.model.sliding_window = config.model.seq_len / pick({2, 3, 4, 5}) + pick({0, 1});
  }
  config.steps = 2;
  config.threads = 1;
  config.peak_flops = 1e9;  // not measured here
  return config;
}

// A drawn shape whose step is at most about 12 GFLOP (a third of a second on one core), drawn
// again while it is not: wide and short shapes and narrow and long ones both stay in the draw,
// but not the few wide and long ones that made each of these tests take close to a minute.
RunConfig draw_shape(std::mt19937& random, const GeneratedShapes& which) {
  constexpr double kMostBlockWork = 1.7e8;  // tokens × blocks × d², about 72 FLOP each a step
  while (true) {
    RunConfig config = draw_any_shape(random, which);
    const double d = static_cast<double>(config.model.d_model);
    const double work = static_cast<double>(config.batch * config.model.seq_len) *
                        static_cast<double>(config.model.layers) * d * d;
    if (work <= kMostBlockWork) return config;
  }
}

const std::vector<std::string>& every_policy() {
  static const std::vector<std::string> kPolicies = {
      "none",      "every:1",     "every:2",  "sublayer:1,2",
      "selective", "keep:matmul", "keep:qkv", "schedule:0=1,0.5=2"};
  return kPolicies;
}

TEST_P(EstimateOnGeneratedShapes, PredictsEveryPolicysPeakWithinFivePercent) {
  const GeneratedShapes& which = GetParam();
  const unsigned seed = shapes_seed(20261201u, which);
  std::mt19937 random(seed);
  for (int shape = 0; shape < 6; ++shape) {
    RunConfig config = draw_shape(random, which);
    for (const std::string& policy : every_policy()) {
      config.checkpoint = policy;
      expect_predicted_peak(config,
                            "seed " + std::to_string(seed) + ", shape " + std::to_string(shape));
    }
  }
}

// Fine-tuning: the same, with adapters of a drawn rank on a drawn set of projections (PEFT's
// usual q and v, the attention's or the MLP's only, every one) over a frozen base.
TEST_P(EstimateOnGeneratedShapes, PredictsEveryPolicysPeakUnderLoraWithinFivePercent) {
  const GeneratedShapes& which = GetParam();
  const unsigned seed = shapes_seed(20261203u, which);
  std::mt19937 random(seed);
  const std::vector<std::string> target_sets = {"all", "q,v", "o,down", "gate,up,down", "q,k,v,o"};
  for (int shape = 0; shape < 4; ++shape) {
    RunConfig config = draw_shape(random, which);
    const std::string targets = target_sets[static_cast<std::size_t>(shape + 1) % 5];
    const bool mlp_only = targets == "gate,up,down";
    config.model.lora.rank = std::vector<int64_t>{2, 4, 8, 16}[static_cast<std::size_t>(shape)];
    config.model.lora.alpha = 2.0 * static_cast<double>(config.model.lora.rank);
    // Two of the shapes on a quantised base (its dequantised weights are transient).
    config.model.lora.base =
        std::vector<BasePrecision>{BasePrecision::kFp32, BasePrecision::kInt8, BasePrecision::kFp32,
                                   BasePrecision::kNf4}[static_cast<std::size_t>(shape)];
    const bool gpt = which.family == ModelFamily::kGpt;  // no gate
    config.model.lora.targets = targets == "all"  ? default_lora_options(which.family).targets
                                : gpt && mlp_only ? parse_lora_targets("up,down")
                                                  : parse_lora_targets(targets);
    for (const std::string& policy : every_policy()) {
      config.checkpoint = policy;
      expect_predicted_peak(config, "seed " + std::to_string(seed) + ", shape " +
                                        std::to_string(shape) + ", LoRA rank " +
                                        std::to_string(config.model.lora.rank) + " on " +
                                        lora_targets_text(config.model.lora.targets) + ", " +
                                        to_string(config.model.lora.base) + " base");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    FamiliesAndCores, EstimateOnGeneratedShapes,
    ::testing::Values(GeneratedShapes{ModelFamily::kGpt, AttentionKind::kSdpa},
                      GeneratedShapes{ModelFamily::kGpt, AttentionKind::kMath},
                      GeneratedShapes{ModelFamily::kLlama, AttentionKind::kSdpa},
                      GeneratedShapes{ModelFamily::kLlama, AttentionKind::kMath},
                      GeneratedShapes{ModelFamily::kLlama, AttentionKind::kSdpa, true},
                      GeneratedShapes{ModelFamily::kLlama, AttentionKind::kMath, true},
                      GeneratedShapes{ModelFamily::kLlama, AttentionKind::kSdpa, false, true},
                      GeneratedShapes{ModelFamily::kLlama, AttentionKind::kMath, false, true}),
    [](const ::testing::TestParamInfo<GeneratedShapes>& param) {
      return (param.param.qwen ? "qwen" : to_string(param.param.family)) +
             (param.param.window ? "_windowed_" : "_") + to_string(param.param.attention);
    });

// What the advice must say it needs: `states` plus the estimator's peak for its policy, offload
// and loss slices; and on half its ranks nothing fits.
void expect_advised_need(const estimate::FitQuestion& question, const estimate::FitAdvice& advice,
                         int64_t states, int64_t memory) {
  estimate::Architecture arch = question.arch;
  arch.loss_chunks = advice.loss_chunks;
  EXPECT_LE(advice.needed_bytes, memory);
  EXPECT_EQ(advice.needed_bytes,
            states + estimate::estimate_policy_activations(arch, 1, question.precision,
                                                           advice.checkpoint, advice.offload)
                         .peak_bytes);
  estimate::FitQuestion fewer = question;
  fewer.max_world_size = advice.world_size / 2;
  EXPECT_FALSE(estimate::advise_fit(fewer, memory).has_value());
}

// The advice is the first rung that fits: the one before it must not, and what it says it needs
// is what the estimator predicts for those flags.
TEST(FitAdvice, TakesTheLeastRecomputationThatFits) {
  estimate::FitQuestion question;
  question.arch = estimate::architecture_preset("llama3-8b");
  question.arch.seq_len = 8192;
  question.params = estimate::parameter_count(question.arch);
  const int64_t memory = int64_t{80} << 30;
  const auto advice = estimate::advise_fit(question, memory);
  ASSERT_TRUE(advice.has_value());
  // 8 B parameters in fp32 with AdamW are 128 GB of states: more than one 80 GiB device.
  EXPECT_GT(advice->world_size, 1);
  EXPECT_EQ(advice->shard, "gradients");
  const int64_t states =
      estimate::per_rank_model_states(
          estimate::model_state_bytes(question.params, question.precision, question.optimizer),
          advice->world_size, advice->shard)
          .total();
  expect_advised_need(question, *advice, states, memory);
  // On those ranks, every rung that recomputes less (no blocks: none or the attention cores, the
  // loss whole or in slices) does not fit.
  for (const char* policy : {"none", "selective"}) {
    for (bool sliced : {false, true}) {
      estimate::Architecture shaped = question.arch;
      if (sliced) {
        shaped.loss_chunks = resolve_loss_chunks(kAutoLossChunks, shaped.vocab, shaped.d_model);
      }
      EXPECT_GT(states + estimate::estimate_policy_activations(shaped, 1, question.precision,
                                                               policy, false)
                             .peak_bytes,
                memory)
          << policy << (sliced ? " with the loss in slices" : "");
    }
  }
}

// With a large vocabulary the logits are the problem: slicing the loss (one more head forward)
// is cheaper than recomputing any block, and is what the advice takes.
TEST(FitAdvice, SlicesTheLossBeforeRecomputingBlocks) {
  estimate::FitQuestion question;
  question.arch = estimate::architecture_preset("llama-tiny");
  question.arch.vocab = 128256;
  question.arch.seq_len = 2048;
  question.batch = 8;
  question.params = estimate::parameter_count(question.arch);
  const int64_t memory = int64_t{12} << 30;
  const auto advice = estimate::advise_fit(question, memory);
  ASSERT_TRUE(advice.has_value());
  EXPECT_EQ(advice->checkpoint, "none");
  EXPECT_GT(advice->loss_chunks, 1);
  // Whole, it does not fit: the slices are needed, not a free extra.
  EXPECT_GT(
      estimate::estimate_policy_activations(question.arch, 8, question.precision, "none", false)
          .peak_bytes,
      memory);
}

// Each slice's head runs again in backward: hardware FLOPs count it, model FLOPs do not.
TEST(Estimate, SlicedLossAddsOneHeadForwardToHardwareFlops) {
  estimate::Architecture arch = estimate::architecture_preset("llama-tiny");
  const auto plan = CheckpointPolicy::parse("none").plan_for(arch.layers, 0.0);
  const auto whole = estimate::step_flops(arch, 512, plan);
  arch.loss_chunks = 4;
  const auto sliced = estimate::step_flops(arch, 512, plan);
  EXPECT_EQ(sliced.model, whole.model);
  EXPECT_DOUBLE_EQ(sliced.hardware - whole.hardware,
                   2.0 * static_cast<double>(arch.vocab * arch.d_model) * 512);
}

// Under expert parallelism nothing is sharded (as `run` trains it): more expert ranks split the
// experts, any count that divides them, on the fewest ranks that fit; the advice says so with
// --ep.
TEST(FitAdvice, ExpertRanksGrowWithTheRanksAndShardNothing) {
  estimate::FitQuestion question;
  question.arch = estimate::architecture_preset("mixtral-8x7b");
  question.arch.seq_len = 1024;
  question.precision = Precision::kBf16;
  question.world_size = 2;
  question.expert_ranks = 2;
  question.params = estimate::expert_rank_parameter_count(question.arch, 2);
  const int64_t memory = int64_t{141} << 30;  // an H200
  const auto advice = estimate::advise_fit(question, memory);
  ASSERT_TRUE(advice.has_value());
  EXPECT_EQ(advice->shard, "none");
  EXPECT_GT(advice->world_size, 2);
  EXPECT_EQ(advice->expert_ranks, std::min<int64_t>(advice->world_size, 8));
  const int64_t states = estimate::model_state_bytes(estimate::expert_rank_parameter_count(
                                                         question.arch, advice->expert_ranks),
                                                     question.precision, question.optimizer)
                             .total();
  expect_advised_need(question, *advice, states, memory);  // half the expert ranks too

  // On as many ranks as that, more expert ranks are the advice, not more ranks.
  question.world_size = advice->world_size;
  const auto same_ranks = estimate::advise_fit(question, memory);
  ASSERT_TRUE(same_ranks.has_value());
  EXPECT_EQ(same_ranks->world_size, advice->world_size);
  EXPECT_EQ(same_ranks->expert_ranks, advice->expert_ranks);

  // 60 experts (Qwen's count) split over counts that are no power of two: the fewest ranks
  // that fit, each count dividing the experts and the ranks.
  question.arch.moe.experts = 60;
  question.arch.expert_hidden = 2048;
  question.world_size = 4;
  question.expert_ranks = 4;
  question.params = estimate::expert_rank_parameter_count(question.arch, 4);
  const int64_t smaller = int64_t{80} << 30;
  const auto sixty = estimate::advise_fit(question, smaller);
  ASSERT_TRUE(sixty.has_value()) << "60 experts over 15 ranks fit 80 GiB";
  EXPECT_EQ(60 % sixty->expert_ranks, 0);
  EXPECT_EQ(sixty->world_size % sixty->expert_ranks, 0);
  EXPECT_NE(sixty->expert_ranks & (sixty->expert_ranks - 1), 0) << sixty->expert_ranks;
  expect_advised_need(question, *sixty,
                      estimate::model_state_bytes(
                          estimate::expert_rank_parameter_count(question.arch, sixty->expert_ranks),
                          question.precision, question.optimizer)
                          .total(),
                      smaller);
}

// On the ranks asked for, gradients and then parameters are sharded before more ranks are added;
// parameters only where `run` shards them (fp32).
TEST(FitAdvice, ShardsMoreOnTheRanksAskedForBeforeAddingRanks) {
  estimate::FitQuestion question;
  question.arch = estimate::architecture_preset("llama3-8b");
  question.params = estimate::parameter_count(question.arch);
  question.world_size = 2;
  const int64_t memory = int64_t{80} << 30;
  question.arch.seq_len = 2048;
  const auto short_sequence = estimate::advise_fit(question, memory);
  ASSERT_TRUE(short_sequence.has_value());
  EXPECT_EQ(short_sequence->world_size, 2);
  EXPECT_EQ(short_sequence->shard, "gradients");
  question.arch.seq_len = 4096;
  const auto longer = estimate::advise_fit(question, memory);
  ASSERT_TRUE(longer.has_value());
  EXPECT_EQ(longer->world_size, 2);
  EXPECT_EQ(longer->shard, "parameters");
  const int64_t states =
      estimate::per_rank_model_states(
          estimate::model_state_bytes(question.params, question.precision, question.optimizer), 2,
          "parameters")
          .total();
  EXPECT_EQ(longer->needed_bytes,
            states + estimate::gathered_unit_bytes(question.arch, question.precision) +
                estimate::estimate_policy_activations(question.arch, 1, question.precision,
                                                      longer->checkpoint, longer->offload)
                    .peak_bytes);
  estimate::FitQuestion bf16 = question;
  bf16.precision = Precision::kBf16;
  const auto mixed = estimate::advise_fit(bf16, memory);
  ASSERT_TRUE(mixed.has_value());
  EXPECT_NE(mixed->shard, "parameters");
  // fp16's loss scaling needs whole gradients: only the optimizer state is sharded, as `run`
  // takes it, on the ranks asked for and on more.
  estimate::FitQuestion half = question;
  half.precision = Precision::kFp16;
  for (const int64_t gib : {40, 80}) {
    const auto scaled = estimate::advise_fit(half, int64_t{gib} << 30);
    ASSERT_TRUE(scaled.has_value()) << gib;
    EXPECT_EQ(scaled->shard, "optimizer") << gib << " GiB";
  }
}

TEST(FitAdvice, AskedLayoutFirstAndNothingWhenNothingFits) {
  estimate::FitQuestion question;
  question.arch = estimate::architecture_preset("small");
  question.params = estimate::parameter_count(question.arch);
  question.batch = 8;
  const auto roomy = estimate::advise_fit(question, int64_t{80} << 30);
  ASSERT_TRUE(roomy.has_value());
  EXPECT_EQ(roomy->checkpoint, "none");
  EXPECT_EQ(roomy->world_size, 1);
  estimate::FitQuestion huge;
  huge.arch = estimate::architecture_preset("llama2-70b");
  huge.params = estimate::parameter_count(huge.arch);
  huge.max_world_size = 4;
  EXPECT_FALSE(estimate::advise_fit(huge, int64_t{24} << 30).has_value());
}

TEST(Estimate, RunSummaryRecordsFlopsAndUtilisation) {
  RunConfig config;
  config.batch = 2;
  config.steps = 2;
  config.checkpoint = "every:1";
  config.peak_flops = 1e12;
  const RunSummary summary = Trainer(config).run();
  const auto flops =
      estimate::step_flops(estimate::from_model_config(config.model), config.tokens_per_step(),
                           CheckpointPolicy::parse("every:1").plan_for(2, 0.0));
  EXPECT_DOUBLE_EQ(summary.model_flops, flops.model);
  EXPECT_DOUBLE_EQ(summary.hardware_flops, flops.hardware);
  EXPECT_DOUBLE_EQ(summary.peak_flops, 1e12);
  EXPECT_NEAR(summary.achieved_flops, flops.model / (summary.step_ms / 1e3),
              summary.achieved_flops * 1e-9);
  EXPECT_DOUBLE_EQ(summary.mfu, summary.achieved_flops / 1e12);
  EXPECT_GT(summary.hfu, summary.mfu);
  const nlohmann::json json = to_json(summary);
  for (const char* key : {"model_flops", "achieved_flops", "peak_flops", "mfu", "hfu"}) {
    EXPECT_TRUE(json.contains(key)) << key;
  }
}

// The CLI: `estimate` and `peak` on the real binary.
using testing::cli;
using testing::CliResult;
using testing::last_line_json;

TEST(EstimateCli, NominalSeventyBillionGivesTheArticlesFigures) {
  const CliResult result = cli("estimate --params 70e9 --precision fp32 --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  EXPECT_EQ(json["weights_bytes"], 280'000'000'000);
  EXPECT_EQ(json["optimizer_bytes"], 560'000'000'000);
  EXPECT_EQ(json["gradients_bytes"], 280'000'000'000);
  EXPECT_EQ(json["model_state_bytes"], 1'120'000'000'000);
  const CliResult text = cli("estimate --params 70e9 --precision fp32");
  EXPECT_NE(text.out.find("1120.00"), std::string::npos) << text.out;
}

TEST(EstimateCli, Llama70BGivesEveryFigure) {
  const CliResult result = cli("estimate --model llama2-70b --checkpoint every:8 --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  const int64_t n = json["params"];
  EXPECT_EQ(json["model_state_bytes"], 16 * n);
  for (const char* key : {"activation_peak_bytes", "literature_activation_bytes", "best_interval",
                          "model_flops", "hardware_flops", "devices", "total_bytes"}) {
    EXPECT_FALSE(json[key].is_null()) << key;
  }
  EXPECT_EQ(json["devices"].size(), 4u);
}

// The advice a script reads names the expert ranks the text does.
TEST(EstimateCli, AdviceUnderExpertParallelismNamesItsExpertRanks) {
  const CliResult result =
      cli("estimate --model mixtral-8x7b --nproc 8 --ep 2 --precision bf16 --seq-len 1024 "
          "--device-memory 141GiB --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json advice = last_line_json(result.out)["devices"][0]["advice"];
  ASSERT_TRUE(advice.is_object()) << result.out;
  EXPECT_EQ(advice["world_size"], 8);  // more expert ranks on the ranks asked for
  EXPECT_EQ(advice["expert_ranks"], 8);
  EXPECT_EQ(advice["shard"], "none");
}

TEST(EstimateCli, DeviceMemoryGivesTheLargestBatch) {
  const CliResult result =
      cli("estimate --model small --checkpoint every:3 --device-memory 1GiB --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  ASSERT_EQ(json["devices"].size(), 1u);
  const int64_t batch = json["devices"][0]["max_batch"];
  EXPECT_GT(batch, 1);
  const auto arch = preset("small");
  const int64_t states = json["model_state_bytes"];
  auto needed = [&](int64_t b) {
    return states +
           estimate::estimate_policy_activations(arch, b, Precision::kFp32, "every:3", false)
               .peak_bytes;
  };
  EXPECT_LE(needed(batch), int64_t{1} << 30);
  EXPECT_GT(needed(batch + 1), int64_t{1} << 30);
}

TEST(EstimateCli, BadShapesExit2WithOneLineNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"estimate --d-model 64 --heads 5", "--heads"},
      {"estimate --layers 0", "--layers"},
      {"estimate --model small --d-model -8", "--d-model"},
      {"estimate --params -5", "--params"},
      {"estimate --params 9e18", "--params"},  // its bytes past int64
      {"estimate --params 1.01e15", "--params"},
      // Experts split by width over tensor ranks or over expert ranks, not both: named as what is
      // wrong, not as the data ranks the tensor ranks leave.
      {"estimate --model moe-tiny --nproc 2 --tp 2 --ep 2", "--tp: does not combine"},
      {"estimate --model small --nproc 4 --tp 2 --ep 2", "--ep: splits a mixture"},
      {"estimate --model gpt5", "--model"},
      {"estimate --model tiny --checkpoint every:0", "--checkpoint"},
      {"estimate", "--model"},
      {"estimate --model small --tp 3", "--tp"},
      {"estimate --model small --tp 2 --nproc 3", "--tp"},
      {"estimate --model small --sequence-parallel", "--sequence-parallel"},
      {"estimate --params 70e9 --tp 8", "--tp"},
      {"estimate --model small --tp 2 --sequence-parallel --seq-len 15", "--tp"},
      {"estimate --model small --nproc 2 --shard parameters --precision bf16", "--shard"},
      {"estimate --model small --nproc 2 --shard gradients --precision fp16", "--shard"},
      {"estimate --params 1e9 --nproc 2 --shard parameters", "--shard"},
      {"estimate --model small --tp 0", "--tp"},
      {"estimate --params 1e9 --tp 0", "--tp"},
      {"estimate --params 1e9 --tp -1", "--tp"},
      {"estimate --params 1e9 --sequence-parallel", "--sequence-parallel"},
      {"estimate --model small --tp 2 --nproc 1", "--tp"},
      {"estimate --model small --tp 2 --params 1e9", "--params"},
      {"estimate --model moe-tiny --nproc 2 --ep 2 --expert-rank-load 2.5", "--expert-rank-load"},
      // One expert a rank of 4, 2 a token: a token sends a rank one row of its 2 at most.
      {"estimate --model moe-tiny --nproc 4 --ep 4 --expert-rank-load 2.5", "--expert-rank-load"},
      {"estimate --model moe-tiny --nproc 2 --ep 2 --expert-rank-load 0.5", "--expert-rank-load"},
      {"estimate --model moe-tiny --nproc 2 --ep 2 --expert-rank-load nan", "--expert-rank-load"},
      {"estimate --model moe-tiny --nproc 2 --expert-rank-load 1.5", "--expert-rank-load"},
      {"estimate --params 1e9 --expert-rank-load 1.5", "--expert-rank-load"},
      {"estimate --model moe-tiny --nproc 2 --ep 2 --expert-rank-load 1.5 --expert-block-load 1.2",
       "--expert-block-load"},  // a block's load below the step's mean
      {"estimate --model moe-tiny --nproc 2 --expert-block-load 1.5", "--expert-block-load"},
      {"estimate --model moe-tiny --nproc 2 --ep 2 --expert-block-load inf", "--expert-block-load"},
      // Given as 1 (balanced) below a given rank load: not taken as absent.
      {"estimate --model moe-tiny --nproc 2 --ep 2 --expert-rank-load 1.5 --expert-block-load 1",
       "--expert-block-load"},
      // 4 experts, 2 a token: one expert takes at most twice its share.
      {"estimate --model moe-tiny --expert-load 2.5", "--expert-load"},
      {"estimate --model moe-tiny --expert-load 0.9", "--expert-load"},
      {"estimate --model small --expert-load 1.5", "--expert-load"},
      {"estimate --params 1e9 --expert-load 1.5", "--expert-load"},
      // Every real-number option is one decimal number: CLI11 alone took these.
      {"estimate --model moe-tiny --expert-load ''", "--expert-load"},
      {"estimate --model moe-tiny --expert-load 0x1p1", "--expert-load"},
      {"estimate --model moe-tiny --expert-load ' 1.5'", "--expert-load"},
      {"estimate --model moe-tiny --expert-load 1e400", "--expert-load"},
  };
  for (const auto& [arguments, flag] : cases) {
    const CliResult result = cli(arguments);
    EXPECT_EQ(result.exit_code, 2) << arguments << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_NE(result.err.find(flag), std::string::npos) << arguments << ": " << result.err;
  }
}

// `estimate` reads a shape's flags as `run` does: a custom Llama (its family, grouped K/V heads,
// SwiGLU width, untied head) is counted as the engine builds it, not as a GPT block.
TEST(EstimateCli, ShapeFlagsMeanWhatTheyMeanToRun) {
  for (const std::string& shape :
       {std::string("--arch llama --layers 3 --d-model 96 --heads 6 --kv-heads 2 --mlp-hidden 160"),
        std::string("--preset llama-tiny --arch gpt --heads 2"),
        std::string("--arch llama --tie-head false --vocab 300 --seq-len 32"),
        std::string("--preset small --attention math --dropout 0.1 --loss-chunks 4")}) {
    const CliResult estimated = cli("estimate " + shape + " --json");
    ASSERT_EQ(estimated.exit_code, 0) << shape << ": " << estimated.err;
    const CliResult trained = cli("run " + shape + " --steps 1 --batch 1 --threads 1 --json");
    ASSERT_EQ(trained.exit_code, 0) << shape << ": " << trained.err;
    EXPECT_EQ(last_line_json(estimated.out)["params"], last_line_json(trained.out)["params"])
        << shape;
  }
}

// Split over tensor ranks every figure is one rank's: its parameters (exact against the split
// model in test_tensor_parallel.cpp), its model states (the same with several groups), FLOPs
// divided with what a rank repeats on top, and activations that do not all divide (without
// sequence parallelism the residual stream stays whole).
TEST(EstimateCli, TensorRanksGiveOneRanksFigures) {
  auto estimate = [](const std::string& flags) {
    const CliResult result = cli("estimate --model llama-small --batch 4 --json " + flags);
    EXPECT_EQ(result.exit_code, 0) << flags << ": " << result.err;
    return last_line_json(result.out);
  };
  const nlohmann::json alone = estimate("");
  const nlohmann::json split = estimate("--tp 4");
  const nlohmann::json sequence = estimate("--tp 4 --sequence-parallel");
  EXPECT_EQ(split.at("tp"), 4);
  EXPECT_EQ(split.at("world_size"), 4);  // --nproc defaults to the tensor ranks
  EXPECT_EQ(split.at("params"), alone.at("params"));
  const auto arch = estimate::architecture_preset("llama-small");
  EXPECT_EQ(split.at("rank_params"), estimate::rank_parameter_count(arch, 4));
  EXPECT_EQ(split.at("model_state_bytes"), 16 * estimate::rank_parameter_count(arch, 4));
  const double activations = alone.at("activation_peak_bytes").get<double>();
  EXPECT_LT(split.at("activation_peak_bytes").get<double>(), activations / 1.5);
  EXPECT_GT(split.at("activation_peak_bytes").get<double>(), activations / 4);
  EXPECT_LT(sequence.at("activation_peak_bytes").get<double>(),
            split.at("activation_peak_bytes").get<double>());
  EXPECT_GE(split.at("rank_hardware_flops").get<double>(),
            alone.at("hardware_flops").get<double>() / 4);
  EXPECT_DOUBLE_EQ(split.at("rank_model_flops").get<double>(),
                   alone.at("model_flops").get<double>() / 4);
  // Two groups of 4 ranks: the same figures per rank.
  EXPECT_EQ(estimate("--tp 4 --nproc 8").at("model_state_bytes"), split.at("model_state_bytes"));
  const CliResult text = cli("estimate --model llama-small --tp 4 --sequence-parallel");
  EXPECT_NE(text.out.find("4 tensor ranks with sequence parallelism × 1 data-parallel"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("per tensor rank"), std::string::npos) << text.out;
}

TEST(EstimateCli, PeakMeasuresAMatmulRate) {
  const CliResult result = cli("peak --threads 1 --repeats 3 --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_GT(last_line_json(result.out)["peak_flops"].get<double>(), 1e8);
}

}  // namespace
}  // namespace rematlab
