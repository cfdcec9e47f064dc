// The layout planner's expert parallelism: a mixture of experts' states split over expert ranks
// and sharded over the ranks that hold the same experts, its all-to-all timed, its activations
// the estimator's at a run's rank load, and a planned layout run here measuring what was
// predicted.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cli_runner.h"
#include "estimate/estimate.h"
#include "layout/collective_time.h"
#include "layout/layout_evaluator.h"
#include "layout/layout_export.h"
#include "layout/layout_search.h"
#include "planned_run.h"

namespace rematlab::layout {
namespace {

using testing::cli;
using testing::last_line_json;

LayoutRequest experts_request(const std::string& model, int64_t gpus, int64_t seq_len,
                              int64_t global_batch) {
  LayoutRequest request;
  request.arch = estimate::architecture_preset(model);
  request.arch.seq_len = seq_len;
  request.cluster.gpu = gpu_kind("h100-sxm");
  request.cluster.gpus = gpus;
  request.cluster.gpus_per_node = std::min<int64_t>(8, gpus);
  request.cluster.host_memory_bytes = request.cluster.gpu.host_memory_bytes;
  request.global_batch = global_batch;
  request.fragmentation = 0.0;
  return request;
}

Layout data_layout(int64_t dp, int64_t ep, int zero, int64_t accum, const char* checkpoint) {
  Layout layout;
  layout.dp = dp;
  layout.ep = ep;
  layout.zero = zero;
  layout.accum = accum;
  layout.stage_checkpoints = {checkpoint};
  return layout;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(LayoutExperts, ExpertStatesAreSplitOverEpAndShardedOverTheRanksHoldingTheSameExperts) {
  // Mixtral 8×7B on 64 GPUs, EP 8, ZeRO 1: each GPU holds the dense part and an eighth of the
  // experts; AdamW's states of the dense part are sharded over all 64 data ranks, those of its
  // experts over the 8 ranks that hold the same ones.
  const LayoutRequest request = experts_request("mixtral-8x7b", 64, 4096, 512);
  LayoutEvaluator evaluator(request);
  const int64_t all = estimate::parameter_count(request.arch);
  const int64_t experts = estimate::expert_parameter_count(request.arch);
  ASSERT_GT(experts, all / 2);
  const int64_t dense = all - experts;
  const int64_t held = dense + experts / 8;
  const LayoutEvaluation split = evaluator.evaluate(data_layout(64, 8, 1, 8, "every:1"));
  EXPECT_EQ(split.memory.weights, 2 * held);
  EXPECT_EQ(split.memory.gradients, 2 * held);
  EXPECT_EQ(split.memory.master, ceil_div(4 * dense, 64) + ceil_div(4 * (experts / 8), 8));
  EXPECT_EQ(split.memory.optimizer, ceil_div(8 * dense, 64) + ceil_div(8 * (experts / 8), 8));
  // ZeRO 2 shards the gradients the same two ways, ZeRO 3 the weights too; without EP every
  // state is sharded over 64.
  const LayoutEvaluation reduced = evaluator.evaluate(data_layout(64, 8, 2, 8, "every:1"));
  EXPECT_EQ(reduced.memory.gradients, ceil_div(2 * dense, 64) + ceil_div(2 * (experts / 8), 8));
  EXPECT_EQ(reduced.memory.weights, 2 * held);
  const LayoutEvaluation sharded = evaluator.evaluate(data_layout(64, 8, 3, 8, "every:1"));
  EXPECT_EQ(sharded.memory.weights, ceil_div(2 * dense, 64) + ceil_div(2 * (experts / 8), 8));
  const LayoutEvaluation whole = evaluator.evaluate(data_layout(64, 1, 1, 8, "every:1"));
  EXPECT_EQ(whole.memory.weights, 2 * all);
  EXPECT_EQ(whole.memory.optimizer, ceil_div(8 * all, 64));
  // Balanced, one expert a rank holds its backward's gradients for every row the rank took,
  // where eight experts a rank hold an eighth each (the rest as the estimator counts it, below).
  EXPECT_GT(split.memory.activations, whole.memory.activations);
}

// At each load a run records (the fullest rank's, its busiest block's, the busiest expert's),
// with wide experts so that the busiest expert's term counts.
TEST(LayoutExperts, OneRanksFiguresAreTheEstimatorsAtItsRankLoad) {
  for (const auto& [load, block_load, expert_load] :
       std::vector<std::tuple<double, std::optional<double>, double>>{
           {1.0, std::nullopt, 1.0}, {1.5, std::nullopt, 1.0}, {1.25, 1.75, 1.5}}) {
    SCOPED_TRACE(::testing::Message()
                 << load << " " << block_load.value_or(0.0) << " " << expert_load);
    LayoutRequest request = experts_request("moe-tiny", 4, 128, 16);
    request.precision = Precision::kFp32;
    request.arch.expert_hidden = 1024;
    request.arch.expert_rank_load = load;
    request.arch.expert_block_load = block_load;
    request.arch.expert_load = expert_load;
    LayoutEvaluator evaluator(request);
    Layout layout = data_layout(4, 2, 0, 1, "every:1");
    layout.micro_batch = 4;
    const LayoutEvaluation evaluation = evaluator.evaluate(layout);

    estimate::EstimateRequest asked;
    asked.arch = request.arch;
    asked.checkpoint = "every:1";
    asked.batch = 4;
    asked.world_size = 4;
    asked.expert_ranks = 2;
    const estimate::Estimate estimate = estimate::make_estimate(asked);
    EXPECT_EQ(evaluation.memory.activations, estimate.activations->peak_bytes);
    const MemoryParts& m = evaluation.memory;
    EXPECT_EQ(m.weights + m.gradients + m.master + m.optimizer, estimate.states.total());
  }
}

TEST(LayoutExperts, AnAllToAllIsBoundByTheSlowerOfItsNodesLinksAndTheNetwork) {
  Cluster cluster;
  cluster.gpu = gpu_kind("h100-sxm");
  cluster.gpus = 16;
  cluster.gpus_per_node = 8;
  const GpuKind& gpu = cluster.gpu;
  const double bytes = 64e6;
  EXPECT_EQ(all_to_all_seconds(cluster, 1, 1, bytes), 0.0);
  // Inside a node: 7 peers over NVLink, an eighth of the bytes to each.
  EXPECT_DOUBLE_EQ(all_to_all_seconds(cluster, 8, 8, bytes),
                   gpu.collective_latency + 7 * gpu.intra_node_step_latency +
                       7 * bytes / 8 / gpu.intra_node_bandwidth);
  // Over two nodes: 7 peers at home, 8 over the network, which bounds it.
  const double across = all_to_all_seconds(cluster, 16, 16, bytes);
  EXPECT_DOUBLE_EQ(across, gpu.collective_latency + 7 * gpu.intra_node_step_latency +
                               8 * gpu.inter_node_step_latency +
                               std::max(7 * bytes / 16 / gpu.intra_node_bandwidth,
                                        8 * bytes / 16 / gpu.inter_node_bandwidth));
  // Two ranks a node apart (EP 2 over data ranks of TP 8) exchange over the network only.
  EXPECT_DOUBLE_EQ(
      all_to_all_seconds(cluster, 2, 16, bytes),
      gpu.collective_latency + gpu.inter_node_step_latency + bytes / 2 / gpu.inter_node_bandwidth);
  EXPECT_GT(across, all_to_all_seconds(cluster, 8, 8, bytes));
  // Four ranks on nodes of six, back to back: the group on GPUs 4-7 has two in each node.
  cluster.gpus = 12;
  cluster.gpus_per_node = 6;
  EXPECT_DOUBLE_EQ(
      all_to_all_seconds(cluster, 4, 4, bytes),
      gpu.collective_latency + gpu.intra_node_step_latency + 2 * gpu.inter_node_step_latency +
          std::max(bytes / 4 / gpu.intra_node_bandwidth, 2 * bytes / 4 / gpu.inter_node_bandwidth));
  // Seven on nodes of four: the group on GPUs 14-20 has one rank alone in GPUs 20-23.
  cluster.gpus = 28;
  cluster.gpus_per_node = 4;
  EXPECT_DOUBLE_EQ(all_to_all_seconds(cluster, 7, 7, bytes),
                   gpu.collective_latency + 6 * gpu.inter_node_step_latency +
                       6 * bytes / 7 / gpu.inter_node_bandwidth);
  // Eight ranks on nodes of six: the two in the second node each have six peers beyond it.
  cluster.gpus = 48;
  cluster.gpus_per_node = 6;
  EXPECT_DOUBLE_EQ(
      all_to_all_seconds(cluster, 8, 8, bytes),
      gpu.collective_latency + gpu.intra_node_step_latency + 6 * gpu.inter_node_step_latency +
          std::max(bytes / 8 / gpu.intra_node_bandwidth, 6 * bytes / 8 / gpu.inter_node_bandwidth));
}

TEST(LayoutExperts, TheExpertsGradientsAreReducedApartAndTheDenseLastBucketStaysExposed) {
  // EP 8 over all 8 data ranks of 8 stages: each expert is on one data rank, so only the dense
  // part's gradients are reduced, and its last bucket is never hidden behind backward.
  const LayoutRequest request = experts_request("mixtral-8x7b", 64, 4096, 64);
  LayoutEvaluator evaluator(request);
  Layout layout = data_layout(8, 8, 0, 8, "every:1");
  layout.pp = 8;
  layout.stage_checkpoints.assign(8, "every:1");
  const LayoutEvaluation split = evaluator.evaluate(layout);
  EXPECT_GT(split.time.data, 0.0);
  // The experts' gradients reduced over the 4 ranks that share them at EP 2 take longer than
  // nothing at EP 8, and all of them over 8 ranks without EP longer still.
  layout.ep = 2;
  const LayoutEvaluation half = evaluator.evaluate(layout);
  layout.ep = 1;
  const LayoutEvaluation whole = evaluator.evaluate(layout);
  EXPECT_GT(half.time.data + half.time.optimizer, split.time.data + split.time.optimizer);
  EXPECT_GT(whole.time.optimizer, half.time.optimizer);
}

TEST(LayoutExperts, EachBlockDispatchesAndCombinesTwiceAndAgainWhenRecomputedAtTheRankLoad) {
  for (double load : {1.0, 1.25}) {
    SCOPED_TRACE(load);
    LayoutRequest request = experts_request("mixtral-8x7b", 16, 4096, 64);
    request.arch.expert_rank_load = load;
    LayoutEvaluator evaluator(request);
    const estimate::Architecture& arch = request.arch;
    const double rows = 4096.0 * static_cast<double>(arch.moe.experts_per_token);
    const double bytes = rows * static_cast<double>(arch.d_model) * 2.0 * load;
    const double exchange = all_to_all_seconds(request.cluster, 8, 8, bytes);
    const double blocks = static_cast<double>(arch.layers);
    // 4 micro-batches a step and data rank.
    const LayoutEvaluation kept = evaluator.evaluate(data_layout(16, 8, 0, 4, "none"));
    EXPECT_DOUBLE_EQ(kept.time.experts, 4 * blocks * 4 * exchange);
    const LayoutEvaluation recomputed = evaluator.evaluate(data_layout(16, 8, 0, 4, "every:1"));
    EXPECT_DOUBLE_EQ(recomputed.time.experts, 4 * blocks * 6 * exchange);
    EXPECT_GT(recomputed.step_s, kept.step_s);
    // RematLab's engine exchanges the rows' counts before each forward dispatch, and copies the
    // rows each held expert receives together before it runs (and their gradients after):
    // forward, backward, and a recomputation again; 2 bytes a value read and written.
    LayoutRequest engine = request;
    engine.engine_only = true;
    LayoutEvaluator engine_evaluator(engine);
    const double counts = all_to_all_seconds(request.cluster, 8, 8, arch.moe.experts * 8.0);
    const double copy_s = 4096.0 * arch.moe.experts_per_token * load * 2.0 *
                          static_cast<double>(arch.d_model) * 2.0 /
                          request.cluster.gpu.memory_bandwidth;
    for (const auto& [policy, passes] : {std::pair{"none", 1.0}, std::pair{"every:1", 2.0}}) {
      const LayoutEvaluation planned = evaluator.evaluate(data_layout(16, 8, 0, 4, policy));
      const LayoutEvaluation engine_run =
          engine_evaluator.evaluate(data_layout(16, 8, 0, 4, policy));
      EXPECT_NEAR(engine_run.time.experts - planned.time.experts, 4 * blocks * passes * counts,
                  1e-12)
          << policy;
      const double elementwise = engine_run.time.elementwise + engine_run.time.recompute -
                                 planned.time.elementwise - planned.time.recompute;
      EXPECT_NEAR(elementwise, 4 * blocks * (1.0 + passes) * copy_s, 1e-9) << policy;
    }
  }
  // Without expert ranks nothing is exchanged; with a load the fullest rank's experts run longer.
  const LayoutRequest even = experts_request("mixtral-8x7b", 16, 4096, 64);
  LayoutEvaluator balanced(even);
  EXPECT_EQ(balanced.evaluate(data_layout(16, 1, 0, 4, "none")).time.experts, 0.0);
  LayoutRequest uneven = even;  // an evaluator keeps its request by reference
  uneven.arch.expert_rank_load = 1.25;
  LayoutEvaluator loaded(uneven);
  EXPECT_GT(loaded.evaluate(data_layout(16, 8, 0, 4, "none")).time.compute,
            balanced.evaluate(data_layout(16, 8, 0, 4, "none")).time.compute);
  EXPECT_GT(loaded.evaluate(data_layout(16, 8, 0, 4, "none")).memory.activations,
            balanced.evaluate(data_layout(16, 8, 0, 4, "none")).memory.activations);
}

TEST(LayoutExperts, TheSearchWeighsExpertRanksDividingTheDataRanksAndTheExperts) {
  // Mixtral 8×7B on 64 H100s at 2M tokens a step: what the issue asks of the planner.
  const LayoutRequest request = experts_request("mixtral-8x7b", 64, 4096, 512);
  const LayoutAnswer answer = search_layouts(request);
  ASSERT_FALSE(answer.best.empty());
  std::set<int64_t> weighed;
  bool tensor_split = false;
  for (const LayoutPoint& point : answer.points) {
    const Layout& layout = point.layout;
    // Experts split over tensor ranks (by width) or expert ranks, not both.
    EXPECT_TRUE(layout.tp == 1 || layout.ep == 1);
    tensor_split = tensor_split || layout.tp > 1;
    EXPECT_EQ((layout.dp * layout.cp) % layout.ep, 0);
    EXPECT_EQ(8 % layout.ep, 0);
    weighed.insert(layout.ep);
  }
  EXPECT_EQ(weighed, (std::set<int64_t>{1, 2, 4, 8}));
  EXPECT_TRUE(tensor_split);
  // The fastest that fits splits the experts: their states whole on every rank cost more memory
  // than the all-to-all costs time.
  const LayoutEvaluation& best = answer.best.front();
  EXPECT_TRUE(best.fits);
  EXPECT_GT(best.layout.ep, 1);
  EXPECT_GT(best.time.experts, 0.0);
  const std::string megatron = megatron_arguments(request, best).text;
  const std::string expert_ranks = "--expert-model-parallel-size " + std::to_string(best.layout.ep);
  for (const std::string& flag : std::vector<std::string>{
           "--num-experts 8", "--moe-router-topk 2", "--moe-ffn-hidden-size 14336",
           "--moe-token-dispatcher-type alltoall", expert_ranks}) {
    EXPECT_NE(megatron.find(flag), std::string::npos) << flag << " in " << megatron;
  }
  // torchtitan takes its expert ranks from its FSDP shards: below ZeRO 3 EP is not said to it.
  ASSERT_LT(best.layout.zero, 3);
  const LayoutExport titan = torchtitan_toml(request, best);
  EXPECT_EQ(titan.text.find("expert_parallel_degree"), std::string::npos) << titan.text;
  EXPECT_TRUE(std::any_of(titan.unsaid.begin(), titan.unsaid.end(), [](const std::string& said) {
    return said.find("beyond its fully sharded and context ranks") != std::string::npos;
  }));
  LayoutRequest sharded = request;
  sharded.fixed.zero = 3;
  const LayoutAnswer fsdp = search_layouts(sharded);
  ASSERT_FALSE(fsdp.best.empty());
  const Layout& fully = fsdp.best.front().layout;
  ASSERT_GT(fully.ep, 1);
  EXPECT_NE(torchtitan_toml(sharded, fsdp.best.front())
                .text.find("expert_parallel_degree = " + std::to_string(fully.ep)),
            std::string::npos);

  // Searching what the engine runs: no expert ranks beside sharded states, no pipeline.
  LayoutRequest here = request;
  here.engine_only = true;
  for (const LayoutPoint& point : search_layouts(here).points) {
    EXPECT_EQ(point.layout.pp, 1);
    if (point.layout.ep > 1) {
      EXPECT_EQ(point.layout.zero, 0);
    }
  }
}

TEST(LayoutCli, APlannedExpertParallelLayoutRunsAndMeasuresWhatItPredicted) {
  // A reshaped mixture (4 experts of 48) so the command carries its expert flags.
  const std::string shape = "--model moe-tiny --experts 4 --expert-hidden 48 --seq-len 64";
  const auto planned =
      cli("layout " + shape +
          " --gpu rtx4090 --gpus 2 --global-batch 4 --ep 2 --zero 0 --micro-batch 2 "
          "--offload none --precision fp32 --checkpoint none --runnable-here --json");
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json json = last_line_json(planned.out);
  ASSERT_FALSE(json["layouts"].empty());
  EXPECT_EQ(json["layouts"][0]["ep"], 2);
  EXPECT_GT(json["layouts"][0]["time_s"]["experts"].get<double>(), 0.0);
  const std::string command = json["exports"]["rematlab"]["text"];
  ASSERT_EQ(command.rfind("rematlab-cli run ", 0), 0u) << command;
  for (const char* flag : {"--experts 4", "--expert-hidden 48", "--ep 2"}) {
    EXPECT_NE(command.find(flag), std::string::npos) << flag << " in " << command;
  }
  const nlohmann::json run = testing::run_planned_layout(json, 2);
  EXPECT_EQ(run["ep"], 2);
}

TEST(LayoutCli, EveryRoutingOptionOfTheMixturePlannedReachesItsRunCommand) {
  // Options that leave the parameter count alone still make another model than the preset's.
  const auto planned =
      cli("layout --model moe-tiny --experts-per-token 1 --capacity-factor 1.25 --expert-weights "
          "softmax --balance-coefficient 0.5 --seq-len 64 --gpu rtx4090 --gpus 2 --global-batch 4 "
          "--ep 2 --zero 0 --micro-batch 2 --offload none --precision fp32 --checkpoint none "
          "--expert-rank-load 1.5 --json");
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json json = last_line_json(planned.out);
  EXPECT_EQ(json["model"], "moe-tiny*");
  EXPECT_EQ(json["experts_per_token"], 1);
  EXPECT_EQ(json["expert_rank_load"], 1.5);
  const std::string command = json["exports"]["rematlab"]["text"];
  for (const char* flag : {"--experts-per-token 1", "--capacity-factor 1.25",
                           "--expert-weights softmax", "--balance-coefficient 0.5", "--ep 2"}) {
    EXPECT_NE(command.find(flag), std::string::npos) << flag << " in " << command;
  }
  const std::string megatron = json["exports"]["megatron"]["text"];
  for (const char* flag : {"--moe-router-topk 1", "--moe-router-pre-softmax",
                           "--moe-expert-capacity-factor 1.25", "--moe-aux-loss-coeff 0.5"}) {
    EXPECT_NE(megatron.find(flag), std::string::npos) << flag << " in " << megatron;
  }
  // Top-1 with its weight normalised to 1: Megatron-LM starts only pre-softmax, which weights
  // the expert by its probability; the difference is said.
  const auto normalised =
      cli("layout --model moe-tiny --experts-per-token 1 --seq-len 64 --gpu rtx4090 --gpus 2 "
          "--global-batch 4 --ep 2 --json");
  ASSERT_EQ(normalised.exit_code, 0) << normalised.err;
  const nlohmann::json top1 = last_line_json(normalised.out)["exports"]["megatron"];
  EXPECT_NE(top1["text"].get<std::string>().find("--moe-router-pre-softmax"), std::string::npos);
  EXPECT_NE(top1["unsaid"].dump().find("top-1 routing weighted 1"), std::string::npos);
}

TEST(LayoutCli, ExpertFlagsAreRefusedInOneLineWhereTheyCannotApply) {
  const char* bad[][2] = {
      {"--model llama2-70b --ep 2", "--ep: expert parallelism needs a mixture of experts"},
      {"--model llama2-70b --expert-rank-load 1.2", "--expert-rank-load: sizes a mixture's"},
      {"--model mixtral-8x7b --ep 3", "--ep: EP 3 does not divide 8 experts"},
      {"--model mixtral-8x7b --ep 0", "--ep: must be between 1"},
      {"--model mixtral-8x7b --ep 8 --pp 16", "--ep: EP 8 does not divide the 4 data × context"},
      {"--model mixtral-8x7b --ep 8 --pp 3", "--pp: 3 does not divide 64 GPUs"},
      {"--model mixtral-8x7b --ep 8 --dp 2 --cp 2", "--ep: EP 8 does not divide the 4 data"},
      {"--model llama-small --ep 1 --tp 4294967296 --pp 4294967296", "--tp"},
      {"--model mixtral-8x7b --ep 8 --tp 2",
       "--tp: experts split over tensor and expert ranks at once are not modelled"},
      {"--model mixtral-8x7b --activation-model megatron", "--activation-model"},
      {"--model mixtral-8x7b --expert-rank-load 1.2", "--expert-rank-load: is a load over"},
      {"--model mixtral-8x7b --ep 8 --expert-rank-load 9", "--expert-rank-load: must be between"},
      {"--model mixtral-8x7b --ep 8 --expert-rank-load nan", "--expert-rank-load: must be between"},
      {"--model mixtral-8x7b --expert-block-load 1.2", "--expert-block-load: is a load over"},
      {"--model mixtral-8x7b --ep 8 --expert-rank-load 1.5 --expert-block-load 1.2",
       "--expert-block-load: is the busiest block's load"},
      {"--model llama2-70b --expert-load 1.2", "--expert-load: sizes a mixture's"},
      {"--model mixtral-8x7b --expert-load 5", "--expert-load: must be between"},
      {"--model mixtral-8x7b --ep 8 --sequence-parallel",
       "--sequence-parallel: needs tensor ranks"},
  };
  for (const auto& [flags, named] : bad) {
    const auto result = cli(std::string("layout --gpu h100-sxm --gpus 64 --seq-len 4096 "
                                        "--global-batch 512 ") +
                            flags);
    EXPECT_EQ(result.exit_code, 2) << flags << ": " << result.err;
    EXPECT_EQ(testing::count_lines(result.err), 1) << result.err;
    EXPECT_NE(result.err.find(named), std::string::npos) << result.err;
  }
}

// Tensor degrees that cannot split the experts' (or a shared expert's) width are impossible
// layouts, not a failed search naming a flag nobody gave.
TEST(LayoutCli, ExpertWidthsATensorDegreeCannotSplitLeaveThatDegreeOut) {
  auto evaluated = [](const std::string& width) -> int64_t {
    const auto result =
        cli("layout --model mixtral-8x7b --gpu h100-sxm --gpus 64 --seq-len 4096 "
            "--global-batch 512 --json " +
            width);
    EXPECT_EQ(result.exit_code, 0) << width << ": " << result.err;
    if (result.exit_code != 0) return -1;
    const nlohmann::json answer = last_line_json(result.out);
    for (const char* list : {"layouts", "frontier"}) {
      for (const auto& layout : answer.at(list)) {
        if (width != "--expert-hidden 14336") {
          EXPECT_EQ(layout.at("tp"), 1) << width;
        }
      }
    }
    return answer.at("evaluated").get<int64_t>();
  };
  const int64_t splittable = evaluated("--expert-hidden 14336");
  EXPECT_LT(evaluated("--expert-hidden 14337"), splittable);  // its TP degrees left out
  EXPECT_LT(evaluated("--shared-expert-hidden 1001"), splittable);
  const auto fixed =
      cli("layout --model mixtral-8x7b --gpu h100-sxm --gpus 64 --seq-len 4096 --global-batch 512 "
          "--expert-hidden 14337 --tp 2");
  EXPECT_EQ(fixed.exit_code, 2);
  EXPECT_NE(fixed.err.find("TP 2 does not divide the experts' width 14337"), std::string::npos)
      << fixed.err;
}

}  // namespace
}  // namespace rematlab::layout
