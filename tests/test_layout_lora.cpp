// The layout planner under LoRA fine-tuning: the model states it places on each GPU are the
// estimator's (which tests/test_dist_cli.cpp holds equal to what the engine's ranks measure),
// adapters train on data ranks and pipeline stages only, a later stage forms its input's
// gradient, and the exports say what the other tools cannot express.
#include <gtest/gtest.h>

#include <string>

#include "common/errors.h"
#include "estimate/activation_memory.h"
#include "estimate/estimate.h"
#include "estimate/fine_tuning.h"
#include "estimate/flops.h"
#include "layout/layout_evaluator.h"
#include "layout/layout_export.h"
#include "layout/layout_rules.h"
#include "layout/layout_search.h"
#include "model/lora_options.h"

namespace rematlab::layout {
namespace {

LayoutRequest lora_request(const std::string& model, BasePrecision base, Precision precision,
                           const std::string& gpu, int64_t gpus, int64_t seq_len,
                           int64_t global_batch) {
  LayoutRequest request;
  request.arch = estimate::architecture_preset(model);
  request.arch.seq_len = seq_len;
  request.arch.lora.rank = 4;
  request.arch.lora.alpha = 8.0;
  request.arch.lora.targets = parse_lora_targets("q,k,v,o,gate,up,down");
  request.arch.lora.base = base;
  request.precision = precision;
  request.cluster.gpu = gpu_kind(gpu);
  request.cluster.gpus = gpus;
  request.cluster.gpus_per_node = gpus;
  request.cluster.host_memory_bytes = request.cluster.gpu.host_memory_bytes;
  request.global_batch = global_batch;
  return request;
}

int64_t states_of(const MemoryParts& memory) {
  return memory.weights + memory.gradients + memory.master + memory.optimizer;
}

// One GPU holds the frozen base as stored plus the adapters' weights, gradients and moments,
// byte for byte the estimator's fine-tuning states, for a quantised and a 16-bit base.
TEST(LayoutLora, OneGpuHoldsTheEstimatorsFineTuningStates) {
  for (const auto& [model, base, precision] :
       {std::tuple{"llama3-8b", BasePrecision::kNf4, Precision::kBf16},
        std::tuple{"llama3-8b", BasePrecision::kBf16, Precision::kBf16},
        std::tuple{"llama-tiny", BasePrecision::kInt8, Precision::kFp32}}) {
    SCOPED_TRACE(std::string(model) + " " + to_string(base));
    const LayoutRequest request = lora_request(model, base, precision, "rtx4090", 1, 256, 1);
    Layout layout;
    layout.stage_checkpoints = {"every:1"};
    const LayoutEvaluation evaluation = LayoutEvaluator(request).evaluate(layout);
    const estimate::ModelStateBytes expected =
        estimate::fine_tuning_state_bytes(request.arch, precision, estimate::Optimizer::kAdamW);
    EXPECT_EQ(evaluation.memory.weights, expected.weights);
    EXPECT_EQ(states_of(evaluation.memory), expected.total());
  }
}

// Split over pipeline stages, each block's frozen weights sit on its stage, the embedding (fp32)
// on the first and the final norm and head on the last: a bf16 base stores an untied head in 16
// bits, so the first stage holds more than the last. Over the stages the weights add up to the
// whole model's, byte for byte.
TEST(LayoutLora, StagesHoldTheirOwnPartOfTheFrozenBase) {
  for (const BasePrecision base : {BasePrecision::kBf16, BasePrecision::kNf4}) {
    SCOPED_TRACE(to_string(base));
    const LayoutRequest request =
        lora_request("llama3-8b", base, Precision::kBf16, "a100-80gb", 2, 256, 1);
    ASSERT_FALSE(request.arch.tied_head);
    Layout layout;
    layout.pp = 2;
    layout.stage_checkpoints = {"every:1", "every:1"};
    const LayoutEvaluation evaluation = LayoutEvaluator(request).evaluate(layout, true);
    ASSERT_EQ(evaluation.stages.size(), 2u);
    const estimate::ModelStateBytes whole = estimate::fine_tuning_state_bytes(
        request.arch, Precision::kBf16, estimate::Optimizer::kAdamW);
    EXPECT_EQ(evaluation.stages[0].memory.weights + evaluation.stages[1].memory.weights,
              whole.weights);
    EXPECT_EQ(evaluation.stages[0].layers, evaluation.stages[1].layers);
    const int64_t vocab_d = request.arch.vocab * request.arch.d_model;
    const int64_t head_bytes = base == BasePrecision::kBf16 ? 2 : 4;
    // The embedding at 4 bytes a value against the head at its own, less the final norm.
    EXPECT_EQ(evaluation.stages[0].memory.weights - evaluation.stages[1].memory.weights,
              (4 - head_bytes) * vocab_d - 4 * request.arch.d_model);
  }
}

// A stage after the first forms its input's gradient (adapters lie before it): with adapters
// only on the output and down projections, a middle stage's blocks cost more than the first
// stage's same number of blocks, in time and in what they keep.
TEST(LayoutLora, AMiddleStageFormsItsInputsGradient) {
  LayoutRequest request =
      lora_request("llama-small", BasePrecision::kFp32, Precision::kFp32, "a100-80gb", 3, 256, 1);
  request.arch.lora.targets = parse_lora_targets("o,down");
  Layout layout;
  layout.pp = 3;
  layout.stage_checkpoints = {"none", "none", "none"};
  const LayoutEvaluation evaluation = LayoutEvaluator(request).evaluate(layout, true);
  ASSERT_EQ(evaluation.stages.size(), 3u);
  const StageFigures& first = evaluation.stages[0];
  const StageFigures& middle = evaluation.stages[1];
  ASSERT_EQ(first.layers, middle.layers);
  EXPECT_GT(middle.microbatch_s, first.microbatch_s);
  // Both hold one micro-batch's chain here; the middle one keeps more of it.
  EXPECT_GT(middle.memory.activations / middle.in_flight,
            first.memory.activations / first.in_flight);
}

// Over data ranks ZeRO 1 and 2 shard what trains and leave the base whole on every rank, as the
// engine's --shard optimizer|gradients does: the estimator's per-rank figure.
TEST(LayoutLora, DataRanksShardOnlyWhatTrains) {
  for (const auto& [zero, shard] : {std::pair{1, "optimizer"}, std::pair{2, "gradients"}}) {
    const LayoutRequest request =
        lora_request("llama-tiny", BasePrecision::kNf4, Precision::kFp32, "rtx4090", 2, 64, 2);
    Layout layout;
    layout.dp = 2;
    layout.zero = zero;
    layout.stage_checkpoints = {"every:1"};
    const LayoutEvaluation evaluation = LayoutEvaluator(request).evaluate(layout);
    estimate::EstimateRequest asked;
    asked.arch = request.arch;
    asked.precision = Precision::kFp32;
    asked.world_size = 2;
    asked.shard = shard;
    EXPECT_EQ(states_of(evaluation.memory), estimate::make_estimate(asked).states.total())
        << "ZeRO " << zero;
  }
}

// Llama 2 70B on eight 24 GiB cards with an nf4 base: the search keeps to one tensor rank, no
// context split and no sharded base, and finds layouts that fit; a fixed degree beyond that
// is one line naming its flag.
TEST(LayoutLora, SearchesDataRanksAndStagesAndRefusesTheRest) {
  LayoutRequest request =
      lora_request("llama2-70b", BasePrecision::kNf4, Precision::kBf16, "rtx4090", 8, 4096, 16);
  const LayoutAnswer answer = search_layouts(request);
  ASSERT_FALSE(answer.best.empty());
  for (const LayoutEvaluation& best : answer.best) {
    EXPECT_EQ(best.layout.tp, 1);
    EXPECT_EQ(best.layout.cp, 1);
    EXPECT_LE(best.layout.zero, 2);
    EXPECT_TRUE(best.fits);
  }
  EXPECT_GT(answer.best.front().layout.pp, 1);  // 35 GiB of base do not sit on one card
  auto refused_flag = [&](FixedDimensions fixed) {
    LayoutRequest asked = request;
    asked.fixed = fixed;
    try {
      validate(asked);
    } catch (const InvalidInput& error) {
      return error.field();
    }
    return std::string("accepted");
  };
  FixedDimensions tensor;
  tensor.tp = 2;
  EXPECT_EQ(refused_flag(tensor), "--tp");
  FixedDimensions sharded;
  sharded.zero = 3;
  EXPECT_EQ(refused_flag(sharded), "--zero");
  FixedDimensions context;
  context.cp = 2;
  EXPECT_EQ(refused_flag(context), "--cp");
  FixedDimensions offloaded;
  offloaded.offload = Offload::kParameters;
  EXPECT_EQ(refused_flag(offloaded), "--offload");
  FixedDimensions sequence;
  sequence.sp = true;
  EXPECT_EQ(refused_flag(sequence), "--sequence-parallel");
  LayoutRequest literature = request;
  literature.activation_model = ActivationModel::kMegatron;
  EXPECT_THROW(validate(literature), InvalidInput);
  request.arch.lora.base = BasePrecision::kBf16;
  request.precision = Precision::kFp32;
  EXPECT_EQ(refused_flag({}), "--base-precision");
}

// A pipeline stage after the first sends its input's gradient back: with adapters only on the
// output and down projections, its first block still forms q, k and v's input gradient and
// keeps what that needs, where the model's own first block forms and keeps none.
TEST(LayoutLora, ALaterStageFormsItsInputsGradient) {
  estimate::Architecture arch = estimate::architecture_preset("llama-tiny");
  arch.lora.rank = 4;
  arch.lora.alpha = 8.0;
  arch.lora.targets = parse_lora_targets("o,down");
  const CheckpointPlan none = CheckpointPolicy::none().plan_for(arch.layers, 0.0);
  estimate::Architecture later = arch;
  later.input_trains = true;
  const double first = estimate::step_flops(arch, 128, none).hardware;
  const double after = estimate::step_flops(later, 128, none).hardware;
  // The first block's q, k and v input gradient (2 FLOPs a weight and token) and its attention
  // core's backward.
  const double d = static_cast<double>(arch.d_model);
  const double qkv = d * static_cast<double>(arch.q_dim() + 2 * arch.kv_dim());
  EXPECT_GT(after - first, 2.0 * qkv * 128);
  estimate::ActivationInput input;
  input.arch = arch;
  input.batch = 2;
  input.plan = none;
  input.embedding = false;
  const int64_t first_kept = estimate::estimate_activations(input).saved_bytes;
  input.arch = later;
  EXPECT_GT(estimate::estimate_activations(input).saved_bytes, first_kept);
}

// Megatron-LM, torchtitan and DeepSpeed name no adapters: each export says so; RematLab's own
// command carries them.
TEST(LayoutLora, ExportsCarryTheAdaptersOrSayTheyCannot) {
  const LayoutRequest request =
      lora_request("llama-tiny", BasePrecision::kNf4, Precision::kFp32, "rtx4090", 2, 64, 2);
  Layout layout;
  layout.dp = 2;
  layout.zero = 2;
  layout.stage_checkpoints = {"every:1"};
  const LayoutEvaluation evaluation = LayoutEvaluator(request).evaluate(layout);
  const std::string run = rematlab_run(request, evaluation).text;
  EXPECT_NE(run.find("--finetune lora --lora-rank 4 --lora-alpha 8 --lora-targets "
                     "q,k,v,o,gate,up,down --base-precision nf4"),
            std::string::npos)
      << run;
  EXPECT_NE(run.find("--shard gradients"), std::string::npos) << run;
  for (const LayoutExport& other :
       {megatron_arguments(request, evaluation), torchtitan_toml(request, evaluation),
        deepspeed_json(request, evaluation)}) {
    bool said = false;
    for (const std::string& unsaid : other.unsaid) said = said || unsaid.find("LoRA") == 0;
    EXPECT_TRUE(said) << other.text;
  }
}

}  // namespace
}  // namespace rematlab::layout
