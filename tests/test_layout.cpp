// The layout planner against what is published (Korthikanti et al.'s activation forms and
// totals, ZeRO's model-state table, Meta's Llama 3 layouts), against the estimator it builds on,
// and through rematlab-cli layout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <optional>
#include <sstream>
#include <thread>

#include "child_process.h"
#include "cli_runner.h"
#include "common/posix_files.h"
#include "estimate/activation_memory.h"
#include "estimate/estimate.h"
#include "estimate/sharded_units.h"
#include "estimate/tensor_layout.h"
#include "layout/layout_evaluator.h"
#include "layout/layout_export.h"
#include "layout/layout_rules.h"
#include "layout/layout_search.h"
#include "layout/layout_states.h"
#include "layout/sharded_transfers.h"
#include "planned_run.h"
#include "scratch_dir.h"
#include "store/run_store.h"

namespace rematlab::layout {
namespace {

using testing::cli;
using testing::last_line_json;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

// A GPT-3-style block as the paper counts it: explicit attention, dropout, 4h MLP.
estimate::Architecture korthikanti_model(int64_t layers, int64_t hidden, int64_t heads) {
  estimate::Architecture arch = estimate::architecture_preset("gpt3-175b");
  arch.name = "korthikanti";
  arch.layers = layers;
  arch.d_model = hidden;
  arch.heads = heads;
  arch.kv_heads = heads;
  arch.mlp_hidden = 4 * hidden;
  arch.seq_len = 2048;
  arch.vocab = 51200;
  arch.attention = AttentionKind::kMath;
  arch.dropout = 0.1;
  return arch;
}

struct PaperConfiguration {
  const char* name;
  int64_t layers, hidden, heads, pp, vp, global_batch, micro_batch;
  double layer_mib, layer_sp_selective_mib;              // per layer, t = 8 (Table 2's forms)
  double first_stage_gib, first_stage_sp_selective_gib;  // Figure 1's totals
};

// Table 3's configurations (s = 2048, t = 8); the 175B and 530B totals use 3 model chunks per
// pipeline rank (the interleaved schedule).
const PaperConfiguration kPaper[] = {
    {"22B", 48, 6144, 64, 1, 1, 4, 4, 1264, 204, 59.25, 9.56},
    {"175B", 96, 12288, 96, 8, 3, 64, 1, 552, 102, 66.84, 12.35},
    {"530B", 105, 20480, 128, 35, 3, 280, 1, 840, 170, 114.02, 23.08},
    {"1T", 128, 25600, 160, 64, 1, 512, 1, 1050, 212.5, 131.25, 26.56},
};

TEST(LayoutConformance, KorthikantiPerLayerFormsOfEachConfiguration) {
  using estimate::LiteratureRecompute;
  for (const auto& paper : kPaper) {
    SCOPED_TRACE(paper.name);
    const estimate::Architecture arch = korthikanti_model(paper.layers, paper.hidden, paper.heads);
    const double sbh = 2048.0 * paper.micro_batch * paper.hidden;
    const double as_h = 5.0 * paper.heads * 2048.0 / paper.hidden;
    auto bytes = [&](bool sp, LiteratureRecompute recompute) {
      return static_cast<double>(estimate::literature_layer_bytes(
          arch, paper.micro_batch, Precision::kBf16, {8, sp}, recompute));
    };
    EXPECT_EQ(bytes(false, LiteratureRecompute::kNone), paper.layer_mib * kMiB);
    EXPECT_EQ(bytes(true, LiteratureRecompute::kSelective), paper.layer_sp_selective_mib * kMiB);
    // The table's other rows: sequence parallel alone, selective alone, full recomputation.
    EXPECT_NEAR(bytes(true, LiteratureRecompute::kNone), sbh * (34.0 / 8 + as_h / 8), 1.0);
    EXPECT_NEAR(bytes(false, LiteratureRecompute::kSelective), sbh * (10.0 + 24.0 / 8), 1.0);
    EXPECT_NEAR(bytes(false, LiteratureRecompute::kFull), 2.0 * sbh, 1.0);
    EXPECT_NEAR(bytes(true, LiteratureRecompute::kFull), 2.0 * sbh / 8, 1.0);
  }
}

LayoutRequest paper_request(const PaperConfiguration& paper) {
  LayoutRequest request;
  request.arch = korthikanti_model(paper.layers, paper.hidden, paper.heads);
  request.cluster.gpu = gpu_kind("a100-80gb");
  request.cluster.gpu.memory_bytes = int64_t{1} << 40;  // the figures, not whether they fit
  request.cluster.gpus = 8 * paper.pp;
  request.cluster.gpus_per_node = 8;
  request.cluster.host_memory_bytes = int64_t{1} << 40;
  request.global_batch = paper.global_batch;
  request.activation_model = ActivationModel::kMegatron;
  return request;
}

Layout paper_layout(const PaperConfiguration& paper, bool sp, const std::string& policy) {
  Layout layout;
  layout.tp = 8;
  layout.sp = sp;
  layout.pp = paper.pp;
  layout.vp = paper.vp;
  layout.micro_batch = paper.micro_batch;
  layout.accum = paper.global_batch / paper.micro_batch;
  layout.stage_checkpoints.assign(static_cast<size_t>(paper.pp), policy);
  return layout;
}

TEST(LayoutConformance, KorthikantiFirstStageTotalsOfFigure1) {
  for (const auto& paper : kPaper) {
    SCOPED_TRACE(paper.name);
    const LayoutRequest request = paper_request(paper);
    LayoutEvaluator evaluator(request);
    ASSERT_EQ(structural_problem(request, paper_layout(paper, false, "none")), "");
    const LayoutEvaluation plain = evaluator.evaluate(paper_layout(paper, false, "none"));
    const LayoutEvaluation lean = evaluator.evaluate(paper_layout(paper, true, "selective"));
    // The paper prints two decimals.
    EXPECT_NEAR(plain.stages.front().memory.activations / kGiB, paper.first_stage_gib, 0.005);
    EXPECT_NEAR(lean.stages.front().memory.activations / kGiB, paper.first_stage_sp_selective_gib,
                0.005);
    // The first stage holds the most; the last one micro-batch's chunks, and under the
    // interleaved schedule those of its warm-up, (v − 1)·p more.
    EXPECT_EQ(plain.memory.activations, plain.stages.front().memory.activations);
    EXPECT_EQ(plain.stages.back().in_flight, (paper.vp - 1) * paper.pp + 1);
  }
}

TEST(LayoutConformance, KorthikantiModelStatesOf22B) {
  // 18 bytes per parameter (16-bit weight, fp32 gradient, master copy and two moments) of the
  // 12·L·h² block weights a tensor rank holds: 45.56 GiB.
  const double parameters = 12.0 * 48 * 6144.0 * 6144.0 / 8;
  Layout layout;
  layout.tp = 8;
  const ModelStates states =
      model_states(static_cast<int64_t>(parameters), layout, Precision::kBf16, true);
  EXPECT_EQ(states.device.total(), static_cast<int64_t>(18 * parameters));
  EXPECT_NEAR(states.device.total() / kGiB, 45.56, 0.005);
  EXPECT_EQ(states.host_bytes, 0);
}

TEST(LayoutConformance, ZeroModelStatesPerGpuOfTable1) {
  struct Row {
    double params;
    int64_t ranks;
    double gb[3];  // stages 1, 2 and 3 (the paper's P_os, P_os+g, P_os+g+p), GB
  };
  // Rajbhandari et al., Table 1 (mixed-precision Adam, K = 12), as printed.
  const Row rows[] = {
      {7.5e9, 4, {52.5, 41.3, 30}},      {7.5e9, 64, {31.4, 16.6, 1.88}},
      {7.5e9, 1024, {30.1, 15.1, 0.12}}, {128e9, 64, {536, 284, 32}},
      {128e9, 1024, {513, 257, 2}},      {1e12, 1024, {4011, 2013, 15.6}},
  };
  for (const Row& row : rows) {
    for (int stage = 0; stage <= 3; ++stage) {
      Layout layout;
      layout.dp = row.ranks;
      layout.zero = stage;
      const double gb =
          model_states(static_cast<int64_t>(row.params), layout, Precision::kFp16, false)
              .device.total() /
          1e9;
      const double expected = stage == 0 ? 16.0 * row.params / 1e9 : row.gb[stage - 1];
      SCOPED_TRACE(std::to_string(row.params) + " at " + std::to_string(row.ranks) + ", stage " +
                   std::to_string(stage));
      // Printed to three significant figures (1% where the table rounds to whole GB).
      EXPECT_NEAR(gb, expected, std::max(0.006 * expected, 0.005));
    }
  }
}

LayoutRequest request_for(const std::string& model, const std::string& gpu, int64_t gpus,
                          int64_t seq_len, int64_t global_batch) {
  LayoutRequest request;
  request.arch = estimate::architecture_preset(model);
  request.arch.seq_len = seq_len;
  request.cluster.gpu = gpu_kind(gpu);
  request.cluster.gpus = gpus;
  request.cluster.gpus_per_node = std::min<int64_t>(8, gpus);
  request.cluster.host_memory_bytes = request.cluster.gpu.host_memory_bytes;
  request.global_batch = global_batch;
  return request;
}

TEST(LayoutSearch, ACancelledSearchStopsAtItsNextLayoutAndAnswersNothing) {
  const LayoutRequest request = request_for("llama2-70b", "a100-80gb", 64, 4096, 1024);
  std::atomic<bool> cancel{true};
  EXPECT_THROW(search_layouts(request, &cancel), SearchCancelled);
  cancel = false;
  EXPECT_FALSE(search_layouts(request, &cancel).best.empty());
}

TEST(LayoutSearch, FindsMetasLlama3LayoutsFeasible) {
  // TP 8 × PP 16 × DP 128 at 8K tokens and 16M tokens a step; at 128K, CP 16 and DP 8.
  LayoutRequest request = request_for("llama3-405b", "h100-sxm", 16384, 8192, 2048);
  request.fixed = {8, 16,           std::nullopt,   1, 128, 1,    true,
                   1, std::nullopt, Offload::kNone, 1, {},  false};
  LayoutAnswer answer = search_layouts(request);
  ASSERT_FALSE(answer.best.empty()) << answer.nearest.front().reason;
  EXPECT_TRUE(answer.best.front().fits);
  // The first and last stages hold one layer less (126 blocks on 16 stages of 8).
  const auto& stages = answer.best.front().stages;
  EXPECT_EQ(stages.front().layers + 1, stages[1].layers);
  EXPECT_EQ(stages.back().layers + 1, stages[1].layers);

  request = request_for("llama3-405b", "h100-sxm", 16384, 131072, 128);
  request.fixed = {8, 16, 1, 16, 8, 1, true, 1, std::nullopt, Offload::kNone, 1, {}, false};
  answer = search_layouts(request);
  ASSERT_FALSE(answer.best.empty()) << answer.nearest.front().reason;
  EXPECT_EQ(answer.best.front().engine_lacks, std::vector<std::string>{"context parallelism"});
}

TEST(LayoutSearch, Gpt3OnEightA100sFitsOnlyWithItsStatesInMoreHostMemory) {
  LayoutRequest request = request_for("gpt3-175b", "a100-40gb", 8, 2048, 8);
  const LayoutAnswer answer = search_layouts(request);
  EXPECT_TRUE(answer.best.empty());
  ASSERT_FALSE(answer.nearest_without_offload.empty());
  for (const auto& nearest : answer.nearest_without_offload) {
    EXPECT_FALSE(nearest.device_fits);
    EXPECT_NE(nearest.reason.find("per GPU at TP"), std::string::npos) << nearest.reason;
  }
  ASSERT_EQ(answer.with_more_host.size(), 1u);
  const LayoutEvaluation& more = answer.with_more_host.front();
  EXPECT_TRUE(more.device_fits);
  EXPECT_GT(more.host_bytes * 8, request.cluster.host_memory_bytes);
  EXPECT_NE(more.reason.find("host memory"), std::string::npos) << more.reason;

  // Given that host memory, the same layout is the answer.
  request.cluster.host_memory_bytes = more.host_bytes * 8;
  const LayoutAnswer roomier = search_layouts(request);
  ASSERT_FALSE(roomier.best.empty());
  EXPECT_EQ(roomier.best.front().step_s, more.step_s);
  for (const auto& layout : roomier.best) EXPECT_NE(layout.layout.offload, Offload::kNone);
}

TEST(LayoutSearch, OneGpuFitsA7BModelWithItsOptimizerInHostMemory) {
  // 16 bytes per parameter of llama2-7b cannot sit on 24 GiB; ZeRO-Offload's single-GPU form
  // (ZeRO 1 over one rank, optimizer in host memory) is searched and fits.
  const LayoutAnswer answer = search_layouts(request_for("llama2-7b", "rtx4090", 1, 2048, 8));
  ASSERT_FALSE(answer.best.empty());
  bool zero_offload = false;
  for (const auto& best : answer.best) {
    EXPECT_TRUE(best.layout.offload == Offload::kOptimizer ||
                best.layout.offload == Offload::kParameters);
    EXPECT_GT(best.host_bytes, 0);
    zero_offload =
        zero_offload || (best.layout.offload == Offload::kOptimizer && best.layout.zero == 1);
  }
  EXPECT_TRUE(zero_offload);
}

TEST(LayoutSearch, BestComesFirstAndTheFrontierTradesMemoryForTime) {
  const LayoutAnswer answer =
      search_layouts(request_for("llama2-70b", "a100-80gb", 64, 4096, 1024));
  ASSERT_GE(answer.best.size(), 2u);
  for (size_t i = 1; i < answer.best.size(); ++i) {
    EXPECT_LE(answer.best[i - 1].step_s, answer.best[i].step_s);
  }
  ASSERT_GE(answer.frontier.size(), 2u);
  for (size_t i = 1; i < answer.frontier.size(); ++i) {
    EXPECT_LT(answer.frontier[i - 1].memory.total(), answer.frontier[i].memory.total());
    EXPECT_GT(answer.frontier[i - 1].step_s, answer.frontier[i].step_s);
  }
  EXPECT_EQ(answer.frontier.back().step_s, answer.best.front().step_s);
  // No fitting point is both smaller and faster than a frontier point.
  for (const LayoutPoint& point : answer.points) {
    if (!point.fits) continue;
    for (const auto& edge : answer.frontier) {
      EXPECT_FALSE(point.memory_bytes < edge.memory.total() && point.step_s < edge.step_s);
    }
  }
}

TEST(LayoutRules, ChunksTakeTheRemainderFromTheEndsAndRulesNameWhatBreaks) {
  const auto llama = chunks_by_rank(rule_split(126, 16, 1), 16);
  EXPECT_EQ(llama.front(), std::vector<int64_t>{7});
  EXPECT_EQ(llama.back(), std::vector<int64_t>{7});
  for (size_t rank = 1; rank + 1 < llama.size(); ++rank) EXPECT_EQ(llama[rank][0], 8);
  // Megatron-LM splits the middle stages evenly and takes the ends as given: 96 on 11 stages.
  const auto eleven = chunks_by_rank(rule_split(96, 11, 1), 11);
  EXPECT_EQ(eleven.front()[0] + eleven.back()[0], 96 - 9 * 9);
  for (size_t rank = 1; rank + 1 < eleven.size(); ++rank) EXPECT_EQ(eleven[rank][0], 9);
  // Interleaved: rank r holds chunks r and r + p.
  EXPECT_EQ(chunks_by_rank(rule_split(10, 2, 2), 2),
            (std::vector<std::vector<int64_t>>{{2, 3}, {3, 2}}));

  LayoutRequest request = request_for("llama2-70b", "a100-80gb", 64, 4096, 1024);
  Layout layout;
  layout.tp = 3;
  layout.dp = 64 / 3;
  EXPECT_NE(structural_problem(request, layout).find("is not 64 GPUs"), std::string::npos);
  layout.tp = 16;
  layout.dp = 4;
  EXPECT_NE(structural_problem(request, layout).find("inside a node"), std::string::npos);
  layout.tp = 8;
  layout.dp = 8;
  layout.micro_batch = 3;
  EXPECT_NE(structural_problem(request, layout).find("global batch 1024"), std::string::npos);
  layout.micro_batch = 1;
  layout.offload = Offload::kParameters;
  EXPECT_NE(structural_problem(request, layout).find("ZeRO 3"), std::string::npos);
}

TEST(LayoutRules, EveryFigureStaysCountableAtTheLargestShapesAccepted) {
  // A million tokens of Llama 3 405B at the largest micro-batch the planner counts: every part
  // positive, nothing that overflowed into "fits".
  LayoutRequest request = request_for("llama3-405b", "h100-sxm", 8, int64_t{1} << 20, 1 << 16);
  const int64_t most = countable_micro_batch(request);
  ASSERT_GE(most, 1);
  Layout layout;
  layout.dp = 8;
  layout.micro_batch = most;
  layout.accum = std::max<int64_t>(1, request.global_batch / (most * 8));
  request.global_batch = layout.micro_batch * layout.dp * layout.accum;
  for (const char* policy : {"none", "every:1"}) {
    layout.stage_checkpoints = {policy};
    const LayoutEvaluation evaluation = LayoutEvaluator(request).evaluate(layout);
    const MemoryParts& m = evaluation.memory;
    for (int64_t part :
         {m.weights, m.gradients, m.master, m.optimizer, m.activations, m.buffers, m.allowance}) {
      EXPECT_GE(part, 0) << policy;
    }
    EXPECT_GT(m.activations, request.cluster.gpu.memory_bytes) << policy;
    EXPECT_FALSE(evaluation.fits) << policy;
    EXPECT_TRUE(std::isfinite(evaluation.step_s) && evaluation.step_s > 0.0) << policy;
  }
  // One more sequence per micro-batch is refused up front, naming the flag.
  request.fixed.micro_batch = most + 1;
  request.global_batch = most + 1;
  try {
    validate(request);
    ADD_FAILURE() << "a micro-batch beyond what the planner counts was accepted";
  } catch (const InvalidInput& error) {
    EXPECT_NE(std::string(error.what()).find("--micro-batch"), std::string::npos) << error.what();
  }
}

TEST(LayoutEvaluator, AClusterSmallerThanItsServerNeedsHostMemoryForItsOwnGpusOnly) {
  // Two GPUs of an eight-GPU server offload llama2-7b's optimizer: the node's host memory holds
  // two GPUs' states, not eight.
  LayoutRequest request = request_for("llama2-7b", "rtx4090", 2, 2048, 8);
  request.cluster.gpus_per_node = 8;
  Layout layout;
  layout.dp = 2;
  layout.zero = 1;
  layout.micro_batch = 1;
  layout.accum = 4;
  layout.offload = Offload::kOptimizer;
  LayoutEvaluation evaluation = LayoutEvaluator(request).evaluate(layout);
  ASSERT_TRUE(evaluation.device_fits) << evaluation.reason;
  request.cluster.host_memory_bytes = 2 * evaluation.host_bytes;
  EXPECT_TRUE(LayoutEvaluator(request).evaluate(layout).fits);
  request.cluster.host_memory_bytes = 2 * evaluation.host_bytes - 1;
  evaluation = LayoutEvaluator(request).evaluate(layout);
  EXPECT_FALSE(evaluation.fits);
  EXPECT_NE(evaluation.reason.find("host memory"), std::string::npos) << evaluation.reason;
}

// ZeRO 2 keeps no whole gradients between micro-batches: when the activations peak, backward has
// begun one bucket, whole from its first gradient, and never more than the rank's gradients. The
// bucket is the request's, and every export that has one carries it.
TEST(LayoutEvaluator, ZeroTwoHoldsTheBucketBackwardBeganAtTheActivationsPeak) {
  LayoutRequest request = request_for("small", "rtx4090", 2, 256, 8);
  request.precision = Precision::kFp32;
  Layout layout;
  layout.dp = 2;
  layout.accum = 4;
  const int64_t gradients = LayoutEvaluator(request).evaluate(layout).memory.gradients;
  layout.zero = 1;
  EXPECT_EQ(LayoutEvaluator(request).evaluate(layout).memory.buffers, 0);
  layout.zero = 2;
  // Default buckets of 40M values: small's 9.6M gradients are one, held whole once.
  const LayoutEvaluation whole = LayoutEvaluator(request).evaluate(layout);
  EXPECT_EQ(whole.memory.buffers, gradients);
  EXPECT_EQ(whole.memory.gradients, gradients / 2);
  request.bucket_values = 1'000'000;
  const LayoutEvaluation bucketed = LayoutEvaluator(request).evaluate(layout);
  EXPECT_EQ(bucketed.memory.buffers, 4'000'000);
  EXPECT_NE(rematlab_run(request, bucketed).text.find("--bucket-size 4000000"), std::string::npos)
      << rematlab_run(request, bucketed).text;
  EXPECT_NE(megatron_arguments(request, bucketed).text.find("--ddp-bucket-size 1000000"),
            std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(
                deepspeed_json(request, bucketed).text)["zero_optimization"]["reduce_bucket_size"],
            1'000'000);
  // The engine's gradients are fp32 in every precision: the same values are 4 bytes each there.
  LayoutRequest bf16 = request;
  bf16.precision = Precision::kBf16;
  const LayoutEvaluation halved = LayoutEvaluator(bf16).evaluate(layout);
  EXPECT_EQ(halved.memory.buffers, 2'000'000);
  EXPECT_NE(rematlab_run(bf16, halved).text.find("--bucket-size 4000000"), std::string::npos);
  // A parameter larger than a bucket is one of its own: Llama 3 8B's untied head, whose gradient
  // backward forms first, is the bucket begun at the peak (1 GB of bf16 against 80 MB).
  LayoutRequest large = request_for("llama3-8b", "h100-sxm", 8, 4096, 16);
  Layout eight;
  eight.dp = 8;
  eight.zero = 2;
  eight.accum = 2;
  EXPECT_EQ(LayoutEvaluator(large).evaluate(eight).memory.buffers, int64_t{128256} * 4096 * 2);
  // Interleaved stages bucket each model chunk apart: the bucket begun is at most the largest
  // chunk's (here embedding or head and 3 of the stage's 6 blocks), not the stage's.
  LayoutRequest untied = request_for("llama-small", "rtx4090", 4, 256, 16);
  untied.precision = Precision::kFp32;
  Layout staged;
  staged.pp = 2;
  staged.dp = 2;
  staged.accum = 4;
  auto zero_two_part = [&untied](Layout chosen) {
    chosen.zero = 1;
    const LayoutEvaluation one = LayoutEvaluator(untied).evaluate(chosen);
    chosen.zero = 2;
    const LayoutEvaluation two = LayoutEvaluator(untied).evaluate(chosen);
    return std::pair(two.memory.buffers - one.memory.buffers, two.memory.gradients * 2);
  };
  const auto [one_chunk, stage_gradients] = zero_two_part(staged);
  EXPECT_EQ(one_chunk, stage_gradients);
  staged.vp = 2;
  const auto [two_chunks, same_gradients] = zero_two_part(staged);
  EXPECT_EQ(same_gradients, stage_gradients);
  EXPECT_LT(two_chunks, stage_gradients);
  EXPECT_GT(two_chunks, stage_gradients / 2);
  // One rank reduces nothing: no buckets to name.
  layout.dp = 1;
  layout.zero = 0;
  request.global_batch = 4;
  EXPECT_EQ(rematlab_run(request, LayoutEvaluator(request).evaluate(layout)).text.find("--bucket"),
            std::string::npos);
}

TEST(LayoutSearch, RunnableHereKeepsToWhatTheEngineTrains) {
  // The engine shards parameters in fp32 only: in bf16 no ZeRO 3 over two ranks is offered,
  // and where one is evaluated anyway it says what the engine lacks.
  LayoutRequest request = request_for("small", "rtx4090", 2, 256, 8);
  request.engine_only = true;
  request.top = 100;
  const LayoutAnswer answer = search_layouts(request);
  ASSERT_FALSE(answer.best.empty());
  for (const LayoutPoint& point : answer.points) {
    EXPECT_TRUE(engine_shard(point.layout) != ShardMode::kParameters) << layout_name(point.layout);
  }
  for (const auto& best : answer.best) EXPECT_TRUE(best.engine_lacks.empty());
  Layout layout;
  layout.dp = 2;
  layout.zero = 3;
  layout.accum = 4;
  request.engine_only = false;
  const LayoutEvaluation bf16 = LayoutEvaluator(request).evaluate(layout);
  EXPECT_EQ(bf16.engine_lacks, std::vector<std::string>{"sharded parameters in bf16"});
  EXPECT_TRUE(rematlab_run(request, bf16).text.empty());
  request.precision = Precision::kFp32;
  const LayoutEvaluation fp32 = LayoutEvaluator(request).evaluate(layout);
  EXPECT_TRUE(fp32.engine_lacks.empty());
  EXPECT_NE(rematlab_run(request, fp32).text.find("--shard parameters"), std::string::npos);
  // Qwen 3's q/k norms run on one tensor rank only: split, the layout says so and exports no run.
  LayoutRequest qwen3 = request_for("qwen3-8b", "h100-sxm", 8, 4096, 8);
  Layout split;
  split.tp = 4;
  split.dp = 2;
  const LayoutEvaluation norms = LayoutEvaluator(qwen3).evaluate(split);
  EXPECT_EQ(norms.engine_lacks, std::vector<std::string>{"q/k norms over tensor ranks"});
  EXPECT_TRUE(rematlab_run(qwen3, norms).text.empty());
}

// The engine runs pipelines (pipeline_exchange.h) of stages of tensor ranks, the pipelines data
// ranks, a micro-batch a stage at least, optimizer states and gradients sharded over a stage's
// data ranks, nothing offloaded. Those layouts are
// searched among the runnable ones and exported as a run with --pp; each other pipeline says
// what it lacks.
TEST(LayoutExport, APipelineRunsHereWithItsStagesTensorRanksAndMicroBatches) {
  LayoutRequest request = request_for("small", "rtx4090", 2, 256, 8);
  request.precision = Precision::kFp32;
  request.engine_only = true;
  request.top = 100;
  const LayoutAnswer answer = search_layouts(request);
  bool pipelined = false;
  for (const auto& best : answer.best) {
    EXPECT_TRUE(best.engine_lacks.empty()) << layout_name(best.layout);
    if (best.layout.pp != 2) continue;
    pipelined = true;
    EXPECT_EQ(best.layout.tp * best.layout.dp, 1);
    EXPECT_GE(best.layout.accum, 2);
    const std::string run = rematlab_run(request, best).text;
    EXPECT_NE(run.find("--nproc 2 --tp 1 --pp 2"), std::string::npos) << run;
    EXPECT_NE(run.find("--accum " + std::to_string(best.layout.accum)), std::string::npos) << run;
  }
  EXPECT_TRUE(pipelined) << "no two-stage layout among the runnable ones";
  request.engine_only = false;
  Layout with_tensor_ranks;
  with_tensor_ranks.tp = 2;
  with_tensor_ranks.pp = 2;
  with_tensor_ranks.sp = true;
  with_tensor_ranks.accum = 4;
  request.cluster.gpus = request.cluster.gpus_per_node = 4;
  const LayoutEvaluation stages_of_two = LayoutEvaluator(request).evaluate(with_tensor_ranks);
  EXPECT_TRUE(stages_of_two.engine_lacks.empty()) << stages_of_two.engine_lacks.front();
  const std::string stages_run = rematlab_run(request, stages_of_two).text;
  EXPECT_NE(stages_run.find("--nproc 4 --tp 2 --pp 2"), std::string::npos) << stages_run;
  EXPECT_NE(stages_run.find("--sequence-parallel"), std::string::npos) << stages_run;
  // Stages shard optimizer states over their data ranks, and gradients where the head is its
  // own; not a tied head's gradients (small ties it), nor parameters.
  Layout sharded;
  sharded.pp = 2;
  sharded.dp = 2;
  sharded.zero = 1;
  sharded.accum = 4;
  const LayoutEvaluation optimizer_sharded = LayoutEvaluator(request).evaluate(sharded);
  EXPECT_TRUE(optimizer_sharded.engine_lacks.empty()) << optimizer_sharded.engine_lacks.front();
  const std::string sharded_run = rematlab_run(request, optimizer_sharded).text;
  EXPECT_NE(sharded_run.find("--nproc 4 --tp 1 --pp 2 --shard optimizer"), std::string::npos)
      << sharded_run;
  // ZeRO 2 beside a tied head: the end stages add their shards of it.
  Layout gradients_sharded = sharded;
  gradients_sharded.zero = 2;
  const LayoutEvaluation tied_gradients = LayoutEvaluator(request).evaluate(gradients_sharded);
  EXPECT_TRUE(tied_gradients.engine_lacks.empty()) << tied_gradients.engine_lacks.front();
  EXPECT_NE(rematlab_run(request, tied_gradients).text.find("--pp 2 --shard gradients"),
            std::string::npos);
  Layout parameters_sharded = sharded;
  parameters_sharded.zero = 3;
  // ZeRO 2 reduces every backward's gradients into the shards, over data ranks alone as on
  // stages, interleaved or not.
  Layout data_ranks_only;
  data_ranks_only.dp = 2;
  data_ranks_only.zero = 2;
  data_ranks_only.accum = 4;
  EXPECT_TRUE(LayoutEvaluator(request).evaluate(data_ranks_only).engine_lacks.empty());
  LayoutRequest untied = request_for("llama-small", "rtx4090", 4, 256, 16);
  untied.precision = Precision::kFp32;
  Layout interleaved_sharded = gradients_sharded;
  interleaved_sharded.vp = 2;
  const LayoutEvaluation interleaved_gradients =
      LayoutEvaluator(untied).evaluate(interleaved_sharded);
  EXPECT_TRUE(interleaved_gradients.engine_lacks.empty())
      << interleaved_gradients.engine_lacks.front();
  const std::string interleaved_run = rematlab_run(untied, interleaved_gradients).text;
  EXPECT_NE(interleaved_run.find("--pp 2 --virtual-stages 2 --shard gradients"), std::string::npos)
      << interleaved_run;
  const std::vector<std::pair<Layout, std::vector<std::string>>> lacking = {
      {parameters_sharded, {"sharded parameters (ZeRO 3) on pipeline stages"}},
  };
  for (const auto& [layout, lacks] : lacking) {
    const LayoutEvaluation evaluation = LayoutEvaluator(request).evaluate(layout);
    EXPECT_EQ(evaluation.engine_lacks, lacks) << layout_name(layout);
    EXPECT_TRUE(rematlab_run(request, evaluation).text.empty());
  }
  // Interleaved: the engine's own schedule, with the same chunks.
  Layout interleaved;
  interleaved.pp = 2;
  interleaved.vp = 2;
  interleaved.accum = 4;
  request.cluster.gpus = request.cluster.gpus_per_node = 2;
  const LayoutEvaluation chunks = LayoutEvaluator(request).evaluate(interleaved);
  EXPECT_TRUE(chunks.engine_lacks.empty());
  const std::string run = rematlab_run(request, chunks).text;
  EXPECT_NE(run.find("--pp 2 --virtual-stages 2"), std::string::npos) << run;
  // A policy per stage is RematLab's own: stages:… where each stage's is none or every:K.
  request.cluster.gpus = request.cluster.gpus_per_node = 2;
  Layout two;
  two.pp = 2;
  two.accum = 4;
  LayoutEvaluation per_stage = LayoutEvaluator(request).evaluate(two);
  per_stage.layout.stage_checkpoints = {"every:1", "none"};
  const LayoutExport staged = rematlab_run(request, per_stage);
  EXPECT_NE(staged.text.find("--checkpoint stages:every:1/none"), std::string::npos) << staged.text;
  EXPECT_TRUE(staged.unsaid.empty());
  per_stage.layout.stage_checkpoints = {"selective", "none"};
  const LayoutExport uniform = rematlab_run(request, per_stage);
  EXPECT_NE(uniform.text.find("--checkpoint selective"), std::string::npos) << uniform.text;
  ASSERT_EQ(uniform.unsaid.size(), 1u);
  EXPECT_NE(uniform.unsaid[0].find("selective is given for all"), std::string::npos);
  Layout few;
  few.pp = 2;
  few.accum = 1;
  EXPECT_EQ(LayoutEvaluator(request).evaluate(few).engine_lacks,
            std::vector<std::string>{"fewer micro-batches than pipeline stages"});
}

// A sliding window is RematLab's own flag; the other tools set it in their model code, and say so.
TEST(LayoutExport, ASlidingWindowIsAFlagOfTheRunAndSaidForTheOtherTools) {
  LayoutRequest request = request_for("llama-small", "rtx4090", 2, 256, 8);
  request.arch.sliding_window = 64;
  request.arch.name = "llama-small*";  // reshaped, as the layout command names it
  Layout layout;
  layout.dp = 2;
  layout.accum = 4;
  const LayoutEvaluation evaluation = LayoutEvaluator(request).evaluate(layout);
  EXPECT_NE(rematlab_run(request, evaluation).text.find("--sliding-window 64"), std::string::npos)
      << rematlab_run(request, evaluation).text;
  const std::string said = "a sliding window of 64 tokens: set in the model code";
  for (const LayoutExport& other :
       {megatron_arguments(request, evaluation), torchtitan_toml(request, evaluation),
        deepspeed_json(request, evaluation)}) {
    EXPECT_NE(std::find(other.unsaid.begin(), other.unsaid.end(), said), other.unsaid.end())
        << ::testing::PrintToString(other.unsaid);
  }
  // Fewer scores: the windowed model's step is quicker than the whole sequence's.
  request.arch.sliding_window = 0;
  EXPECT_LT(evaluation.step_s, LayoutEvaluator(request).evaluate(layout).step_s);
}

TEST(LayoutEvaluator, StagesHoldTheirScheduleMicroBatchesInFlight) {
  LayoutRequest request = request_for("llama-small", "a100-80gb", 4, 256, 8);
  LayoutEvaluator evaluator(request);
  Layout layout;
  layout.pp = 4;
  layout.accum = 8;
  const LayoutEvaluation one_f_one_b = evaluator.evaluate(layout);
  ASSERT_EQ(one_f_one_b.stages.size(), 4u);
  for (int64_t rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(one_f_one_b.stages[static_cast<size_t>(rank)].in_flight, 4 - rank);
  }
  EXPECT_NEAR(one_f_one_b.time.bubble / (one_f_one_b.step_s - one_f_one_b.time.optimizer),
              3.0 / (8 + 3), 0.02);
  layout.pp = 2;
  layout.vp = 3;
  layout.dp = 2;
  layout.accum = 4;
  const LayoutEvaluation interleaved = evaluator.evaluate(layout);
  // Megatron-LM's warm-up: 2(p − r − 1) + (v − 1)p, plus the one in its steady state.
  EXPECT_EQ(interleaved.stages[0].in_flight, 2 * 1 + 2 * 2 + 1);
  EXPECT_EQ(interleaved.stages[1].in_flight, 0 + 2 * 2 + 1);
  // As many micro-batches as stages, as the engine orders them: the first stage's warm-up
  // covers every forward (all m·v chunks held); the last's, (v − 1)p, leaves it one more.
  layout.accum = 2;
  const LayoutEvaluation all_forward = evaluator.evaluate(layout);
  EXPECT_EQ(all_forward.stages[0].in_flight, 2 * 3);
  EXPECT_EQ(all_forward.stages[1].in_flight, 2 * 2 + 1);
}

TEST(LayoutEvaluator, StepTimeIsTheSumOfItsStatedParts) {
  // llama2-70b, TP 8 × DP 8 on A100s, micro-batch 1, 16 micro-batches, no recomputation.
  LayoutRequest request = request_for("llama2-70b", "a100-80gb", 64, 4096, 128);
  LayoutEvaluator evaluator(request);
  Layout layout;
  layout.tp = 8;
  layout.dp = 8;
  layout.micro_batch = 1;
  layout.accum = 16;
  layout.stage_checkpoints = {"none"};
  const LayoutEvaluation plain = evaluator.evaluate(layout);
  const GpuKind& a100 = request.cluster.gpu;
  const double m = 16;
  // Tensor parallelism: four all-reduces of the micro-batch's activations per block, each
  // sending 2(t − 1)/t of them over NVLink after NCCL's latency: 8.4 µs, then 3.4 µs for each of
  // its 2(t − 1) ring steps.
  const double activations = 4096.0 * 8192 * 2;
  const double all_reduce =
      8.4e-6 + 2 * 7 * 3.4e-6 + 2 * 7.0 / 8 * activations / a100.intra_node_bandwidth;
  EXPECT_NEAR(plain.time.tensor, m * 80 * 4 * all_reduce, 1e-9);
  // Sequence parallelism: per block six all-gathers (two again in backward for the weights'
  // gradients) and four reduce-scatters, each one ring pass.
  Layout sequence = layout;
  sequence.sp = true;
  const double pass = 8.4e-6 + 7 * 3.4e-6 + 7.0 / 8 * activations / a100.intra_node_bandwidth;
  EXPECT_NEAR(evaluator.evaluate(sequence).time.tensor, m * 80 * 10 * pass, 1e-9);
  // Latencies as given: none at all leaves the bytes.
  LayoutRequest instant = request;
  instant.cluster.gpu.collective_latency = instant.cluster.gpu.intra_node_step_latency = 0.0;
  EXPECT_NEAR(LayoutEvaluator(instant).evaluate(layout).time.tensor,
              m * 80 * 4 * 2 * 7.0 / 8 * activations / a100.intra_node_bandwidth, 1e-9);
  // Without a policy only the vocabulary-parallel loss runs the head's forward again.
  EXPECT_LT(plain.time.recompute, 0.01 * plain.time.compute);
  EXPECT_EQ(plain.time.bubble, 0.0);
  // Element-wise work by memory bandwidth: per token and block, the residual stream's two norms
  // (2h each) and two adds (3h each) whole on every tensor rank; the heads merged (2q), queries
  // and keys rotated (4(q + kv)) and SwiGLU (5f) split over them; backward twice forward.
  const double h = 8192, q = 8192, kv = 1024, f = 28672;
  const double per_rank = 10 * h + (2 * q + 4 * (q + kv) + 5 * f) / 8;
  EXPECT_NEAR(plain.time.elementwise, m * 80 * 4096 * 3 * per_rank * 2 / a100.memory_bandwidth,
              1e-9);
  // Sequence parallelism splits the residual stream's work too.
  const double split_all = (10 * h + 2 * q + 4 * (q + kv) + 5 * f) / 8;
  EXPECT_NEAR(evaluator.evaluate(sequence).time.elementwise,
              plain.time.elementwise * split_all / per_rank, 1e-9);
  // Planning for RematLab's engine: it copies each all-reduce's input (batch-major activations),
  // and under sequence parallelism concatenates each gathered sequence (2h), and reorders and
  // sums each reduce-scatter's input (3h + h/t).
  LayoutRequest engine = request;
  engine.engine_only = true;
  LayoutEvaluator engine_evaluator(engine);
  const double per_value = m * 80 * 4096 * 2 / a100.memory_bandwidth;
  EXPECT_NEAR(engine_evaluator.evaluate(layout).time.elementwise - plain.time.elementwise,
              per_value * 4 * 2 * h, 1e-9);
  EXPECT_NEAR(engine_evaluator.evaluate(sequence).time.elementwise -
                  evaluator.evaluate(sequence).time.elementwise,
              per_value * (6 * 2 * h + 4 * (3 * h + h / 8)), 1e-9);
  // The step is its parts: no pipeline, nothing offloaded.
  const TimeParts& t = plain.time;
  EXPECT_NEAR(plain.step_s,
              t.compute + t.recompute + t.elementwise + t.tensor + t.data + t.optimizer, 1e-9);
  EXPECT_GT(t.data, 0.0);  // at least the last bucket's all-reduce over the network
  EXPECT_NEAR(plain.tokens_per_s, 128 * 4096 / plain.step_s, 1e-6);

  // every:1 recomputes each block's forward and runs its all-reduces again.
  layout.stage_checkpoints = {"every:1"};
  const LayoutEvaluation again = evaluator.evaluate(layout);
  // A forward is a third of forward and backward; the last projection of each block is not run
  // again (its backward needs only its input).
  EXPECT_GT(again.time.recompute, 0.2 * again.time.compute);
  EXPECT_LT(again.time.recompute, 0.34 * again.time.compute);
  EXPECT_NEAR(again.time.tensor, plain.time.tensor * 6 / 4, 1e-9);

  // Optimizer offload: the update goes to the host and its link.
  layout.stage_checkpoints = {"none"};
  layout.zero = 1;
  layout.offload = Offload::kOptimizer;
  const LayoutEvaluation offloaded = evaluator.evaluate(layout);
  EXPECT_EQ(offloaded.time.optimizer, 0.0);
  EXPECT_GT(offloaded.time.offload, 0.0);
  EXPECT_GT(offloaded.step_s, plain.step_s);
  // ZeRO 3 over a slow network: the gathers no longer hide behind the compute.
  LayoutRequest slow = request;
  slow.cluster.gpu.inter_node_bandwidth = 1e8;
  LayoutEvaluator slow_evaluator(slow);
  layout.zero = 3;
  layout.offload = Offload::kNone;
  const LayoutEvaluation gathered = slow_evaluator.evaluate(layout);
  EXPECT_GT(gathered.time.data, 10 * plain.time.data);
  // Where the compute hides no collective (a CPU), ZeRO 3's gathers and reduce-scatters are
  // all exposed: inside one node over NVLink they were hidden but for one block's of 80.
  LayoutRequest node = request_for("llama2-70b", "a100-80gb", 8, 4096, 16);
  Layout sharded;
  sharded.dp = 8;
  sharded.zero = 3;
  sharded.micro_batch = 1;
  sharded.accum = 2;
  sharded.stage_checkpoints = {"none"};
  const LayoutEvaluation hidden = LayoutEvaluator(node).evaluate(sharded);
  node.cluster.gpu.overlaps_communication = false;
  const LayoutEvaluation exposed = LayoutEvaluator(node).evaluate(sharded);
  EXPECT_GT(hidden.time.data, 0.0);
  EXPECT_NEAR(exposed.time.data, 80 * hidden.time.data, 1e-9 * exposed.time.data);
  EXPECT_NEAR(exposed.step_s - hidden.step_s, exposed.time.data - hidden.time.data, 1e-9);
}

TEST(LayoutEvaluator, ARingBetweenNodesTakesOneNetworkStepPerNodeBoundaryAndPass) {
  // ZeRO 3 over 16 ranks on two nodes of 8, nothing hidden, links too fast to matter: each of
  // 80 blocks gathers its weights twice and reduce-scatters its gradients, one ring pass each,
  // of 15 steps: 14 inside a node and 1 between the two.
  LayoutRequest request = request_for("llama2-70b", "a100-80gb", 16, 4096, 16);
  GpuKind& gpu = request.cluster.gpu;
  gpu.overlaps_communication = false;
  gpu.intra_node_bandwidth = gpu.inter_node_bandwidth = gpu.host_link_bandwidth = 1e30;
  gpu.collective_latency = 1e-6;
  gpu.intra_node_step_latency = 1e-5;
  gpu.inter_node_step_latency = 1e-3;
  Layout sharded;
  sharded.dp = 16;
  sharded.zero = 3;
  sharded.micro_batch = 1;
  sharded.accum = 1;
  sharded.stage_checkpoints = {"none"};
  const double pass = 1e-6 + 14 * 1e-5 + 1 * 1e-3;
  EXPECT_NEAR(LayoutEvaluator(request).evaluate(sharded).time.data, 80 * 3 * pass, 1e-9);
  // Inside one node the same ring never leaves NVLink (two micro-batches, each gathering).
  request.cluster.gpus = 8;
  sharded.dp = 8;
  sharded.accum = 2;
  EXPECT_NEAR(LayoutEvaluator(request).evaluate(sharded).time.data, 2 * 80 * 3 * (1e-6 + 7 * 1e-5),
              1e-9);
}

// Planned for RematLab's engine on Gloo (the CPU: nothing hides the collectives), ZeRO's
// collectives are the engine's own: under ZeRO 3 a unit per sublayer and one for the rest, all
// gathered for forward and the sublayers again for backward and a recomputation, each unit's
// gradients all-reduced; under ZeRO 1 and 2 the gradients all-reduced too.
TEST(LayoutEvaluator, TheEngineOnGlooIsTimedByItsOwnCollectives) {
  LayoutRequest request = request_for("small", "a100-80gb", 2, 256, 8);
  request.precision = Precision::kFp32;
  GpuKind& gpu = request.cluster.gpu;
  gpu.overlaps_communication = false;
  // Latency only: each collective its ring steps, a millisecond each.
  gpu.intra_node_bandwidth = gpu.inter_node_bandwidth = 1e30;
  gpu.collective_latency = 0.0;
  gpu.intra_node_step_latency = 1e-3;
  Layout sharded;
  sharded.dp = 2;
  sharded.zero = 3;
  sharded.micro_batch = 4;
  sharded.accum = 1;
  const int64_t L = request.arch.layers;
  ASSERT_EQ(L, 12);
  auto data_ms = [&](const LayoutRequest& planned, const std::string& policy) {
    Layout layout = sharded;
    layout.stage_checkpoints = {policy};
    return 1e3 * LayoutEvaluator(planned).evaluate(layout).time.data;
  };
  // A cluster's: per block two gathers (three under every:1) and a reduce-scatter, one step each.
  EXPECT_NEAR(data_ms(request, "none"), L * 3, 1e-9);
  EXPECT_NEAR(data_ms(request, "every:1"), L * 4, 1e-9);
  LayoutRequest engine = request;
  engine.engine_only = true;
  // The engine's: 1 + 4L gathers, and 1 + 2L all-reduces of two steps each.
  EXPECT_NEAR(data_ms(engine, "none"), (1 + 4 * L) + 2 * (1 + 2 * L), 1e-9);
  // every:K gathers a segment's units again but its last: 2K − 1 more for each of L/K segments.
  EXPECT_NEAR(data_ms(engine, "every:1"), (1 + 4 * L + L) + 2 * (1 + 2 * L), 1e-9);
  EXPECT_NEAR(data_ms(engine, "every:4"), (1 + 4 * L + 3 * 7) + 2 * (1 + 2 * L), 1e-9);
  EXPECT_NEAR(data_ms(engine, "selective"), data_ms(engine, "none"), 1e-9);

  // Bytes only: the gathers bring in each unit's other half, the all-reduces send and receive
  // the gradients' half twice.
  gpu.intra_node_bandwidth = gpu.inter_node_bandwidth = 1e9;
  gpu.intra_node_step_latency = 0.0;
  engine.cluster = request.cluster;
  const estimate::UnitParameters units = estimate::unit_parameter_counts(request.arch);
  const double A = static_cast<double>(units.attention), M = static_cast<double>(units.mlp);
  const double P = static_cast<double>(units.ends) + L * (A + M);
  const double recomputed = L * (A + M) - L * M;  // every:1: each block's attention again
  EXPECT_NEAR(data_ms(engine, "every:1"),
              1e3 * (0.5 * 4 * (units.ends + 2 * L * (A + M) + recomputed) + 4 * P) / 1e9, 1e-9);
  // On NCCL the compute hides all but what prefetching cannot: the first unit's gather, the
  // embeddings' and head's, and their reduce-scatter, the last of backward.
  LayoutRequest nccl = engine;
  nccl.cluster.gpu.overlaps_communication = true;
  nccl.cluster.gpu.intra_node_bandwidth = nccl.cluster.gpu.inter_node_bandwidth = 1e12;
  EXPECT_NEAR(data_ms(nccl, "none"), 1e3 * (0.5 * 4 * units.ends * 2) / 1e12, 1e-12);
  // The reduction's passes: an all-reduce's 2 where every rank keeps the sum (ZeRO 0; the
  // engine's ZeRO 1, whose optimizer shards read it, on NCCL too; on Gloo the engine keeps its
  // shard of an all-reduce under ZeRO 2 and 3), a reduce-scatter's 1 elsewhere.
  EXPECT_EQ(reduction_phases(0, false, false), 2);
  EXPECT_EQ(reduction_phases(1, false, false), 1);
  EXPECT_EQ(reduction_phases(3, false, true), 1);
  EXPECT_EQ(reduction_phases(1, true, false), 2);
  EXPECT_EQ(reduction_phases(2, true, false), 1);
  EXPECT_EQ(reduction_phases(3, true, false), 1);
  EXPECT_EQ(reduction_phases(2, true, true), 2);
  EXPECT_EQ(reduction_phases(3, true, true), 2);
  // ZeRO 1 and 2 all-reduce the gradients in the engine (a cluster reduce-scatters them), then
  // gather the updated weights.
  for (int zero : {1, 2}) {
    Layout layout = sharded;
    layout.zero = zero;
    layout.stage_checkpoints = {"none"};
    const double cluster_ms = 1e3 * LayoutEvaluator(request).evaluate(layout).time.data;
    const double engine_ms = 1e3 * LayoutEvaluator(engine).evaluate(layout).time.data;
    EXPECT_NEAR(cluster_ms, 1e3 * (0.5 * 4 * P + 0.5 * 4 * P) / 1e9, 1e-9) << zero;
    EXPECT_NEAR(engine_ms, 1e3 * (4 * P + 0.5 * 4 * P) / 1e9, 1e-9) << zero;
  }
}

TEST(GpuCatalog, CardsWithoutNvlinkTakePciesStepLatency) {
  for (const GpuKind& kind : gpu_catalog()) {
    SCOPED_TRACE(kind.name);
    const bool pcie = kind.name == "h100-pcie" || kind.name == "l40s" || kind.name == "rtx3090" ||
                      kind.name == "rtx4090";
    EXPECT_EQ(kind.intra_node_step_latency, pcie ? kPcieStepLatency : kNvlinkStepLatency);
    EXPECT_EQ(kind.collective_latency, kRingBaseLatency);
    EXPECT_EQ(kind.inter_node_step_latency, kNetworkStepLatency);
  }
}

TEST(LayoutEvaluator, OneRanksFiguresAreTheEstimatorsOnTheEnginesShapes) {
  // Without a pipeline the planner's activations and model states are what `estimate` says for
  // the rank (which docs/parallel.md checks against measured runs).
  for (const char* model : {"small", "llama-small"}) {
    SCOPED_TRACE(model);
    LayoutRequest request = request_for(model, "a100-80gb", 4, 256, 8);
    request.precision = Precision::kFp32;
    request.fragmentation = 0.0;
    LayoutEvaluator evaluator(request);
    Layout layout;
    layout.tp = 2;
    layout.sp = true;
    layout.dp = 2;
    layout.zero = 1;
    layout.micro_batch = 2;
    layout.accum = 2;
    layout.stage_checkpoints = {"every:2"};
    const LayoutEvaluation evaluation = evaluator.evaluate(layout);

    estimate::EstimateRequest estimate_request;
    estimate_request.arch = request.arch;
    estimate_request.checkpoint = "every:2";
    estimate_request.batch = 2;
    estimate_request.world_size = 4;
    estimate_request.shard = "optimizer";
    estimate_request.layout = {2, true};
    const estimate::Estimate estimate = estimate::make_estimate(estimate_request);
    EXPECT_EQ(evaluation.memory.activations, estimate.activations->peak_bytes);
    const MemoryParts& m = evaluation.memory;
    EXPECT_EQ(m.weights + m.gradients + m.master + m.optimizer, estimate.states.total());
  }
}

TEST(LayoutExport, EachToolGetsTheLayoutInItsOwnTerms) {
  LayoutRequest request = request_for("llama2-70b", "a100-80gb", 64, 4096, 1024);
  request.fixed = {8, 2, 2, 1, 4, 1, true, 1, "selective", Offload::kNone, 1, {}, false};
  const LayoutAnswer answer = search_layouts(request);
  ASSERT_FALSE(answer.best.empty());
  const LayoutEvaluation& best = answer.best.front();
  const std::string megatron = megatron_arguments(request, best).text;
  for (const char* flag :
       {"--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 2",
        "--num-layers-per-virtual-pipeline-stage 20", "--sequence-parallel",
        "--use-distributed-optimizer", "--recompute-granularity selective", "--micro-batch-size 1",
        "--global-batch-size 1024", "--num-query-groups 8", "--swiglu"}) {
    EXPECT_NE(megatron.find(flag), std::string::npos) << flag << " in " << megatron;
  }
  const std::string toml = torchtitan_toml(request, best).text;
  EXPECT_NE(toml.find("tensor_parallel_degree = 8"), std::string::npos) << toml;
  EXPECT_NE(toml.find("pipeline_parallel_schedule = \"Interleaved1F1B\""), std::string::npos);
  EXPECT_NE(toml.find("mode = \"selective\""), std::string::npos);
  const LayoutExport deepspeed = deepspeed_json(request, best);
  const nlohmann::json config = nlohmann::json::parse(deepspeed.text);
  EXPECT_EQ(config["train_batch_size"], 1024);
  EXPECT_EQ(config["train_micro_batch_size_per_gpu"], 1);
  EXPECT_EQ(config["gradient_accumulation_steps"], 1024 / 4);
  EXPECT_EQ(config["zero_optimization"]["stage"], 1);
  EXPECT_FALSE(deepspeed.unsaid.empty());  // the degrees live in the model code
  const LayoutExport rematlab = rematlab_run(request, best);
  EXPECT_TRUE(rematlab.unsaid.empty()) << rematlab.unsaid.front();
  EXPECT_NE(rematlab.text.find("--nproc 64 --tp 8 --pp 2 --virtual-stages 2 --sequence-parallel "
                               "--shard optimizer --batch 1 --accum 256"),
            std::string::npos)
      << rematlab.text;

  // Stages that chose every:2 and every:16 are given every:16 (compared as numbers), and said.
  LayoutEvaluation mixed = best;
  mixed.layout.stage_checkpoints = {"every:16", "every:2"};
  const LayoutExport one_policy = megatron_arguments(request, mixed);
  EXPECT_NE(one_policy.text.find("--recompute-num-layers 16"), std::string::npos)
      << one_policy.text;
  ASSERT_FALSE(one_policy.unsaid.empty());
  EXPECT_NE(one_policy.unsaid.back().find("every:16 is given for all"), std::string::npos)
      << one_policy.unsaid.back();
  mixed.layout.stage_checkpoints = {"every:2", "every:16"};
  EXPECT_NE(megatron_arguments(request, mixed).text.find("--recompute-num-layers 16"),
            std::string::npos);
}

// A stop signal ends a long search at its next layout: exit 130 and one line, no answer (the
// search itself takes seconds here, its whole answer printed with exit 0 when not stopped).
TEST(LayoutCli, AStopSignalEndsALongSearchWithNoAnswer) {
  testing::ScratchDir dir("layout-stop");
  testing::ChildProcess search(
      {REMATLAB_CLI_PATH, "layout", "--model", "llama3-405b", "--gpu", "h100-sxm", "--gpus",
       "983040", "--gpus-per-node", "8", "--seq-len", "8192", "--global-batch", "3932160"},
      {}, dir.file("out"), dir.file("err"));
  // Signalled once its handler is installed (SIGTERM's bit in /proc's SigCgt), not after a
  // guessed delay: a slow start would otherwise die of the signal, a fast search end first.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool caught = false;
  while (!caught && std::chrono::steady_clock::now() < deadline) {
    std::istringstream status(testing::slurp("/proc/" + std::to_string(search.pid()) + "/status"));
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigCgt:", 0) == 0) {
        caught = (std::stoull(line.substr(7), nullptr, 16) >> (SIGTERM - 1)) & 1;
      }
    }
    if (!caught) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(caught) << "the search never installed its SIGTERM handler";
  ::kill(search.pid(), SIGTERM);
  EXPECT_EQ(search.exit_code(std::chrono::seconds(60)), std::optional<int>(130));
  EXPECT_EQ(testing::slurp(dir.file("err")), "rematlab-cli: stopped before the search was done\n");
  EXPECT_EQ(testing::slurp(dir.file("out")), "");
}

TEST(LayoutCli, RematlabsOwnCommandForALayoutItsEngineRunsRuns) {
  const auto planned =
      cli("layout --model tiny --seq-len 64 --gpu rtx4090 --gpus 2 --global-batch 4 --tp 2 --pp 1 "
          "--cp 1 --zero 0 --micro-batch 2 --offload none --precision fp32 --checkpoint every:1 "
          "--attention math --loss-chunks 2 --tie-head false --json");
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json json = last_line_json(planned.out);
  ASSERT_FALSE(json["layouts"].empty());  // with and without sequence parallelism
  EXPECT_TRUE(json["layouts"][0]["fits"].get<bool>());
  const std::string command = json["exports"]["rematlab"]["text"];
  ASSERT_EQ(command.rfind("rematlab-cli run ", 0), 0u) << command;
  // The shape planned is the shape run, down to what changes only its activations.
  for (const char* flag : {"--attention math", "--loss-chunks 2", "--tie-head false"}) {
    EXPECT_NE(command.find(flag), std::string::npos) << flag << " in " << command;
  }
  // What the planner predicted for each rank is what each rank measured.
  const nlohmann::json run = testing::run_planned_layout(json, 2);
  EXPECT_EQ(run["tp"], 2);
}

TEST(LayoutCli, TheLocalDeviceIsTheGpuWithItsMemoryAndKeptPeak) {
  testing::ScratchDir dir("layout-local");
  const std::string db = dir.file("runs.sqlite");
  const std::string plan =
      "layout --model tiny --gpu local --device cpu --gpus 1 --seq-len 64 --global-batch 4 "
      "--precision fp32 --json --db " +
      db;
  // No runs database: measured now, and nothing written.
  const auto measured = cli(plan);
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  nlohmann::json json = last_line_json(measured.out);
  EXPECT_EQ(json["gpu"], "local");
  EXPECT_EQ(json["gpu_memory_bytes"].get<int64_t>(),
            int64_t{::sysconf(_SC_PHYS_PAGES)} * ::sysconf(_SC_PAGE_SIZE));
  EXPECT_GT(json["peak_flops"].get<double>(), 1e9);
  EXPECT_NE(json["gpu_description"].get<std::string>().find("not kept"), std::string::npos);
  EXPECT_FALSE(json["overlaps_communication"].get<bool>());  // the CPU's cores run Gloo too
  EXPECT_FALSE(files::exists(db));
  // Its element-wise bandwidth, and the matmul efficiency at the model's shapes, measured now.
  const std::string description = json["gpu_description"];
  EXPECT_NE(description.find("element-wise memory bandwidth measured"), std::string::npos)
      << description;
  EXPECT_NE(description.find("matmul efficiency measured"), std::string::npos) << description;
  EXPECT_GT(json["memory_bandwidth"].get<double>(), 1e8);
  EXPECT_LT(json["memory_bandwidth"].get<double>(), 1e13);
  EXPECT_GT(json["matmul_efficiency"].get<double>(), 0.01);
  // Given, they are planned with as given, and said so.
  const auto figures_given = cli(plan + " --memory-bandwidth 5e9 --efficiency 0.5");
  ASSERT_EQ(figures_given.exit_code, 0) << figures_given.err;
  const nlohmann::json as_given = last_line_json(figures_given.out);
  EXPECT_EQ(as_given["memory_bandwidth"].get<double>(), 5e9);
  EXPECT_EQ(as_given["matmul_efficiency"].get<double>(), 0.5);
  EXPECT_NE(as_given["gpu_description"].get<std::string>().find("bandwidth given"),
            std::string::npos);
  // A block too large to probe keeps the default efficiency, and says why.
  const auto large =
      cli("layout --model llama2-70b --gpu local --device cpu --gpus 8 --seq-len 4096 "
          "--global-batch 8 --precision fp32 --peak-flops 1e11 --json --db " +
          db);
  ASSERT_EQ(large.exit_code, 0) << large.err;
  const nlohmann::json unprobed = last_line_json(large.out);
  EXPECT_EQ(unprobed["matmul_efficiency"].get<double>(), 0.6);
  EXPECT_NE(unprobed["gpu_description"].get<std::string>().find("too large to probe"),
            std::string::npos)
      << unprobed["gpu_description"];
  // The peak `peak --save` kept is the one planned with.
  const auto saved = cli("peak --save --precision fp32 --repeats 2 --json --db " + db);
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  const double kept = last_line_json(saved.out)["peak_flops"].get<double>();
  const auto planned = cli(plan);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  json = last_line_json(planned.out);
  EXPECT_EQ(json["peak_flops"].get<double>(), kept);
  EXPECT_NE(json["gpu_description"].get<std::string>().find("runs database"), std::string::npos);
  ASSERT_FALSE(json["layouts"].empty());
  EXPECT_TRUE(json["layouts"][0]["fits"].get<bool>());
  // Planning read the database and wrote nothing to it.
  const std::string before = testing::slurp(db);
  ASSERT_EQ(cli(plan).exit_code, 0);
  EXPECT_EQ(testing::slurp(db), before);
  EXPECT_FALSE(files::exists(db + "-wal"));
  EXPECT_FALSE(files::exists(db + "-shm"));
  // A peak given is the one planned with: nothing measured, nothing read.
  const auto given = cli(plan + " --peak-flops 5e10");
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_EQ(last_line_json(given.out)["peak_flops"].get<double>(), 5e10);
  // The CPU's memory is the host's: offloading into it frees nothing, so nothing offloads.
  for (const auto& layout : last_line_json(given.out)["layouts"]) {
    EXPECT_EQ(layout["host_bytes"].get<int64_t>(), 0);
  }
  // A kept peak no device has is refused naming the database, not planned with.
  {
    const nlohmann::json record = last_line_json(saved.out);
    PeakFlopsRecord damaged;
    damaged.host = record["host"];
    damaged.device = record["device"];
    damaged.threads = record["threads"];
    damaged.flops = 1e5;
    damaged.measured = record["measured"];
    damaged.method = "edited";
    RunStore(db).save_peak_flops(damaged);
  }
  const auto damaged = cli(plan);
  EXPECT_EQ(damaged.exit_code, 2) << damaged.out;
  EXPECT_EQ(testing::count_lines(damaged.err), 1) << damaged.err;
  EXPECT_NE(damaged.err.find("--db"), std::string::npos) << damaged.err;
  // Every other bad flag is said before --gpu local measures anything.
  // (The damaged peak kept in --db would be named otherwise.)
  for (const char* flag : {"--top 0", "--intra-node-latency 2", "--inter-node-bandwidth 0",
                           "--gpu-memory 1XB", "--collective-latency nan"}) {
    const auto bad_first = cli(plan + " " + flag);
    EXPECT_EQ(bad_first.exit_code, 2) << flag;
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    EXPECT_NE(bad_first.err.find(name), std::string::npos) << bad_first.err;
  }

  const std::pair<std::string, const char*> misplaced[] = {
      {"--gpu a100-80gb --device cpu", "--device"},
      {"--gpu a100-80gb --db " + db, "--db"},
  };
  for (const auto& [flags, named] : misplaced) {
    const auto result = cli("layout --model tiny --gpus 1 --seq-len 64 --global-batch 4 " + flags);
    EXPECT_EQ(result.exit_code, 2) << flags;
    EXPECT_EQ(testing::count_lines(result.err), 1) << result.err;
    EXPECT_NE(result.err.find(named), std::string::npos) << result.err;
  }
}

TEST(LayoutCli, OverlapAndLatencyFlagsChangeTheStep) {
  // One fixed ZeRO 3 layout: its gathers are hidden behind the compute but for one block's, all
  // exposed with --no-overlap; a larger step latency slows every collective.
  const std::string plan =
      "layout --model llama2-7b --gpu a100-80gb --gpus 8 --seq-len 4096 --global-batch 16 "
      "--tp 1 --pp 1 --dp 8 --zero 3 --micro-batch 1 --checkpoint none --json";
  auto step = [&](const std::string& extra) {
    const auto result = cli(plan + extra);
    EXPECT_EQ(result.exit_code, 0) << extra << result.err;
    const nlohmann::json answer = last_line_json(result.out);
    return std::pair(answer["layouts"].at(0)["step_s"].get<double>(),
                     answer["overlaps_communication"].get<bool>());
  };
  const auto [plain, overlapped] = step("");
  const auto [exposed, not_overlapped] = step(" --no-overlap");
  const auto [slow, slow_overlapped] = step(" --no-overlap --intra-node-latency 1e-3");
  EXPECT_TRUE(overlapped);
  EXPECT_FALSE(not_overlapped);
  EXPECT_GT(exposed, plain);
  // 2 micro-batches x 32 blocks x 3 ring passes x 7 steps, each 1 ms instead of 3.4 µs.
  EXPECT_NEAR(slow - exposed, 2 * 32 * 3 * 7 * (1e-3 - kNvlinkStepLatency), 1e-6);
}

TEST(LayoutCli, AnswersTheIssuesQuestionsAndRefusesBadInputInOneLine) {
  const auto seventy =
      cli("layout --model llama2-70b --gpu a100-80gb --gpus 64 --gpus-per-node 8 --seq-len 4096 "
          "--global-batch 1024 --json");
  ASSERT_EQ(seventy.exit_code, 0) << seventy.err;
  const nlohmann::json answer = last_line_json(seventy.out);
  ASSERT_FALSE(answer["layouts"].empty());
  for (const char* key :
       {"tp", "pp", "vp", "cp", "dp", "sp", "zero", "micro_batch", "accum", "checkpoint", "offload",
        "memory_bytes", "host_bytes", "step_s", "tokens_per_s", "mfu", "fits"}) {
    EXPECT_TRUE(answer["layouts"][0].contains(key)) << key;
  }
  for (const char* part :
       {"weights", "gradients", "optimizer", "activations", "buffers", "total"}) {
    EXPECT_TRUE(answer["layouts"][0]["memory_bytes"].contains(part)) << part;
  }

  const auto article =
      cli("layout --model gpt3-175b --gpu a100-40gb --gpus 8 --seq-len 2048 --global-batch 8");
  ASSERT_EQ(article.exit_code, 0) << article.err;
  EXPECT_NE(article.out.find("Nothing fits."), std::string::npos) << article.out;
  EXPECT_NE(article.out.find("of host memory per node"), std::string::npos) << article.out;

  const char* bad[][2] = {
      {"--gpu a100-90gb", "--gpu"},
      {"--gpu a100-80gb --tp 3", "--tp"},
      {"--gpu a100-80gb --cp 3", "--cp"},
      {"--gpu a100-80gb --pp 100", "--pp"},
      {"--gpu a100-80gb --micro-batch 4611686018427387904", "--micro-batch"},
      {"--gpu a100-80gb --gpus 4611686018427387904", "--gpus"},
      {"--gpu a100-80gb --efficiency 0", "--efficiency"},
      {"--gpu a100-80gb --efficiency 4.9e-324", "--efficiency: must be a share of peak in"},
      {"--gpu a100-80gb --efficiency 0.0009", "--efficiency: must be a share of peak in"},
      {"--gpu a100-80gb --runnable-here --precision fp32 --pp 2 --zero 3",
       "layout: RematLab's engine does not run sharded parameters (ZeRO 3) on pipeline stages"},
      {"--gpu a100-80gb --offload optimizer --zero 0", "ZeRO 1"},
      {"--gpu a100-80gb --heads 0", "--heads"},
      {"--gpu a100-80gb --zero 4294967297", "--zero"},
      {"--gpu a100-80gb --global-batch-tokens 1000", "--global-batch-tokens"},
      {"--gpu a100-80gb --offload disk", "--offload"},
      {"--gpu a100-80gb --checkpoint keep:qkv", "--checkpoint"},
      {"--gpu a100-80gb --zero 4", "--zero"},
      {"--gpu a100-80gb --bucket-size 0", "--bucket-size"},
      {"--gpu a100-80gb --bucket-size 25MB/s", "--bucket-size"},
      {"--gpu a100-80gb --precision fp32 --bucket-size 2TiB",
       "--bucket-size: must be between one gradient (4 bytes) and 1.00 TiB of fp32 gradients"},
      {"--gpu a100-80gb --bucket-size 600GiB", "and 512.00 GiB of 16-bit gradients"},
      {"--gpu a100-80gb --bucket-size 1", "--bucket-size: must be between one gradient (2 bytes)"},
      {"--gpu a100-80gb --bucket-size 3",
       "--bucket-size: 3 bytes are not a whole number of 16-bit gradients (2 bytes each)"},
      {"--gpu a100-80gb --peak-flops 1e-300", "--peak-flops"},
      {"--gpu a100-80gb --intra-node-bandwidth 1e-300", "--intra-node-bandwidth"},
      {"--gpu a100-80gb --memory-bandwidth 100", "--memory-bandwidth: must be at least 1e6"},
      {"--gpu a100-80gb --memory-bandwidth inf", "--memory-bandwidth"},
      {"--gpu a100-80gb --collective-latency -1e-6", "--collective-latency"},
      {"--gpu a100-80gb --intra-node-latency nan", "--intra-node-latency"},
      {"--gpu a100-80gb --inter-node-latency 5", "--inter-node-latency"},
      {"--gpu a100-80gb --layers 10000 --d-model 1048576 --heads 8", "--model"},
      {"--gpu a100-80gb --global-batch-tokens 134217728 --micro-batch 32768", "--micro-batch: m"},
      {"--gpu h100-sxm --layers 10000 --gpus 720720 --gpus-per-node 720", "fix some of"},
  };
  for (const auto& [flags, named] : bad) {
    const std::string given = flags;
    const auto result =
        cli(std::string("layout --model llama2-70b --seq-len 4096 ") +
            (given.find("--gpus") == std::string::npos ? "--gpus 64 " : "") +
            (given.find("tokens") == std::string::npos ? "--global-batch 1024 " : "") + given);
    EXPECT_EQ(result.exit_code, 2) << flags << ": " << result.err;
    EXPECT_EQ(testing::count_lines(result.err), 1) << result.err;
    EXPECT_NE(result.err.find(named), std::string::npos) << result.err;
  }
  // Micro-batch × DP past 64 bits is divided, not multiplied (it was a SIGFPE).
  const auto wide =
      cli("layout --model tiny --layers 1 --d-model 8 --heads 1 --kv-heads 1 --mlp-hidden 8 "
          "--vocab 128 --seq-len 1 --gpu h100-sxm --gpus 16777216 --gpus-per-node 1024 "
          "--global-batch 1099511627776 --micro-batch 1099511627776 --tp 1 --pp 1 --cp 1");
  EXPECT_EQ(wide.exit_code, 2) << wide.err;
  EXPECT_EQ(testing::count_lines(wide.err), 1) << wide.err;
  EXPECT_NE(wide.err.find("is not a multiple"), std::string::npos) << wide.err;
}

}  // namespace
}  // namespace rematlab::layout
