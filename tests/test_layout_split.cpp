// The layout planner's pipeline split (--pp-split): a list is the stages it places and exports,
// each rank of the exported run measuring its own stage's figures; balanced gives a heavy head's
// stage fewer blocks and a faster step than the engine's rule, and the rule where the head is
// light; a split that cannot be is one line, exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "common/errors.h"
#include "estimate/architecture.h"
#include "layout/gpu_catalog.h"
#include "layout/layout_evaluator.h"
#include "layout/layout_export.h"
#include "layout/layout_rules.h"
#include "layout/layout_search.h"
#include "layout/run_layout.h"
#include "model/model_config.h"
#include "planned_run.h"

namespace rematlab::layout {
namespace {

using testing::cli;
using testing::last_line_json;

// `small` in fp32 over `pp` stages of one RTX 4090 each, micro-batch 2, no recomputation.
LayoutRequest pipeline_request(int64_t pp, int64_t vocab) {
  LayoutRequest request;
  request.arch = estimate::architecture_preset("small");
  request.arch.vocab = vocab;
  request.precision = Precision::kFp32;
  request.cluster.gpu = gpu_kind("rtx4090");
  request.cluster.gpus = request.cluster.gpus_per_node = pp;
  request.cluster.host_memory_bytes = request.cluster.gpu.host_memory_bytes;
  request.global_batch = 8;
  request.fixed.pp = pp;
  request.fixed.micro_batch = 2;
  request.fixed.checkpoint = "none";
  request.fixed.offload = Offload::kNone;
  return request;
}

LayoutEvaluation best_of(const LayoutRequest& request) {
  validate(request);
  const LayoutAnswer answer = search_layouts(request);
  EXPECT_FALSE(answer.best.empty());
  return answer.best.empty() ? LayoutEvaluation{} : answer.best.front();
}

double slowest_stage(const LayoutEvaluation& evaluation) {
  double slowest = 0.0;
  for (const StageFigures& stage : evaluation.stages) {
    slowest = std::max(slowest, stage.microbatch_s);
  }
  return slowest;
}

bool says(const std::vector<std::string>& unsaid, const std::string& part) {
  return std::any_of(unsaid.begin(), unsaid.end(),
                     [&](const std::string& line) { return line.find(part) != std::string::npos; });
}

TEST(LayoutSplit, AGivenSplitIsTheStagesPlacedAndExported) {
  LayoutRequest request = pipeline_request(2, 256);
  const LayoutEvaluation rule = best_of(request);
  EXPECT_EQ(rule.layout.split, (std::vector<int64_t>{6, 6}));
  request.fixed.pp_split = {9, 3};
  const LayoutEvaluation given = best_of(request);
  ASSERT_EQ(given.stages.size(), 2u);
  EXPECT_EQ(given.layout.split, (std::vector<int64_t>{9, 3}));
  EXPECT_EQ(given.stages[0].layers, 9);
  EXPECT_EQ(given.stages[1].layers, 3);
  // Nine blocks' activations, two micro-batches of them in flight, where the rule's first stage
  // holds six.
  EXPECT_GT(given.stages[0].memory.activations, rule.stages[0].memory.activations);
  EXPECT_NE(layout_name(given.layout).find("PP 2 split 9,3"), std::string::npos);
  EXPECT_EQ(layout_name(rule.layout).find("split"), std::string::npos);  // the rule's: unsaid
  EXPECT_NE(rematlab_run(request, given).text.find("--pp 2 --pp-split 9,3"), std::string::npos);
  EXPECT_EQ(rematlab_run(request, rule).text.find("--pp-split"), std::string::npos);
  EXPECT_NE(megatron_arguments(request, given)
                .text.find("--decoder-first-pipeline-num-layers 9 "
                           "--decoder-last-pipeline-num-layers 3"),
            std::string::npos);

  // Four stages whose middle ones differ: Megatron-LM spreads the middle evenly, so it is said.
  request = pipeline_request(4, 256);
  request.fixed.pp_split = {2, 4, 3, 3};
  const LayoutEvaluation four = best_of(request);
  ASSERT_EQ(four.stages.size(), 4u);
  EXPECT_EQ(four.stages[1].layers, 4);
  EXPECT_TRUE(says(megatron_arguments(request, four).unsaid, "middle stages differ (2,4,3,3)"));
  EXPECT_TRUE(says(torchtitan_toml(request, four).unsaid, "stages of unequal size (2,4,3,3)"));
  // Under virtual stages the list is every chunk's, in chain order: so many chunks a stage.
  request = pipeline_request(2, 256);
  request.fixed.pp_split = {1, 3, 1, 7};
  const LayoutEvaluation chunks = best_of(request);
  EXPECT_EQ(chunks.layout.vp, 2);
  ASSERT_EQ(chunks.stages.size(), 2u);
  EXPECT_EQ(chunks.stages[0].layers, 2);  // chunks 0 and 2, as the engine places them
  EXPECT_EQ(chunks.stages[1].layers, 10);
  EXPECT_TRUE(says(megatron_arguments(request, chunks).unsaid, "model chunks of unequal size"));
}

TEST(LayoutSplit, BalancedGivesAHeavyHeadsStageFewerBlocks) {
  // A vocabulary of 16,384: the head and loss cost several of small's blocks. One chunk a stage
  // (the search would otherwise weigh virtual stages too).
  LayoutRequest request = pipeline_request(2, 16384);
  request.fixed.vp = 1;
  const LayoutEvaluation rule = best_of(request);
  request.fixed.pp_split_balanced = true;
  const LayoutEvaluation balanced = best_of(request);
  ASSERT_EQ(balanced.layout.split.size(), 2u);
  EXPECT_GT(balanced.layout.split[0], balanced.layout.split[1]);
  EXPECT_LT(slowest_stage(balanced), slowest_stage(rule));
  EXPECT_LT(balanced.step_s, rule.step_s);
  EXPECT_NE(rematlab_run(request, balanced).text.find("--pp-split"), std::string::npos);
  // Balancing moves no block to make a stage slower: moving one more either way is no faster.
  for (int64_t moved : {-1, 1}) {
    LayoutRequest other = pipeline_request(2, 16384);
    other.fixed.pp_split = {balanced.layout.split[0] + moved, balanced.layout.split[1] - moved};
    EXPECT_GE(slowest_stage(best_of(other)), slowest_stage(balanced)) << moved;
  }
  // small's own 256 tokens make a light head: balanced is the rule's split.
  request = pipeline_request(2, 256);
  request.fixed.pp_split_balanced = true;
  EXPECT_EQ(best_of(request).layout.split, (std::vector<int64_t>{6, 6}));
}

// Over eight tensor ranks on PCIe a block's all-reduces weigh as much as its matmuls and the
// head has none: balancing by FLOPs alone gave the last stage a block too few and a slower step
// than the rule's; by the blocks' predicted times it is no slower.
TEST(LayoutSplit, BalancedWeighsABlocksCollectivesToo) {
  LayoutRequest request;
  request.arch = estimate::architecture_preset("llama3-8b");
  request.arch.seq_len = 4096;
  request.cluster.gpu = gpu_kind("h100-pcie");
  request.cluster.gpus = 16;
  request.cluster.gpus_per_node = 8;
  request.cluster.host_memory_bytes = request.cluster.gpu.host_memory_bytes;
  request.global_batch = 64;
  request.fixed.tp = 8;
  request.fixed.pp = 2;
  request.fixed.dp = 1;
  request.fixed.micro_batch = 1;
  request.fixed.zero = 1;
  request.fixed.checkpoint = "selective";
  request.fixed.offload = Offload::kNone;
  const LayoutEvaluation rule = best_of(request);
  request.fixed.pp_split_balanced = true;
  const LayoutEvaluation balanced = best_of(request);
  EXPECT_LE(balanced.step_s, rule.step_s) << split_text(balanced.layout.split);
  EXPECT_LE(slowest_stage(balanced), slowest_stage(rule)) << split_text(balanced.layout.split);
}

// Without --pp the search balances every pipeline it weighs, each as a fixed --pp would.
TEST(LayoutSplit, BalancedSearchesEveryPipelineBalanced) {
  LayoutRequest request = pipeline_request(4, 16384);
  request.fixed.pp.reset();
  request.engine_only = true;
  request.top = 20;
  const LayoutEvaluation rule_best = best_of(request);
  request.fixed.pp_split_balanced = true;
  const LayoutAnswer answer = search_layouts(request);
  ASSERT_FALSE(answer.best.empty());
  EXPECT_LE(answer.best.front().step_s, rule_best.step_s);
  bool pipelined = false;
  for (const LayoutEvaluation& each : answer.best) {
    if (each.layout.pp < 2) continue;
    pipelined = true;
    LayoutRequest fixed = pipeline_request(each.layout.pp, 16384);
    fixed.fixed.pp_split_balanced = true;
    fixed.fixed.vp = each.layout.vp;
    fixed.fixed.micro_batch = each.layout.micro_batch;
    EXPECT_EQ(each.layout.split, best_of(fixed).layout.split) << layout_name(each.layout);
  }
  EXPECT_TRUE(pipelined) << "no pipeline among the fastest";
}

// The exported run: each rank measures what the planner put on its stage.
TEST(LayoutSplit, EachRankOfTheExportedRunMeasuresItsStage) {
  const auto planned =
      cli("layout --model tiny --layers 4 --seq-len 64 --gpu rtx4090 --gpus 2 --global-batch 4 "
          "--pp 2 --pp-split 3,1 --micro-batch 2 --zero 0 --offload none --precision fp32 "
          "--checkpoint none --json");
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json plan = last_line_json(planned.out);
  const nlohmann::json& best = plan["layouts"][0];
  EXPECT_EQ(best["split"], (std::vector<int64_t>{3, 1}));
  const std::string command = plan["exports"]["rematlab"]["text"];
  ASSERT_NE(command.find("--pp-split 3,1"), std::string::npos) << command;
  testing::run_planned_stages(plan, 2);
}

TEST(LayoutSplit, ASplitThatCannotBeIsOneLineExitTwo) {
  const std::string base =
      "layout --model small --gpu rtx4090 --gpus 4 --seq-len 256 --global-batch 8 ";
  const std::pair<const char*, const char*> cases[] = {
      {"--pp 2 --pp-split 1,1", "--pp-split: gives 2 blocks in all; the model has 12"},
      {"--pp 2 --pp-split 4,4,4",
       "--pp-split: gives 3 block counts for 2 pipeline stages: give "
       "one for each chunk, a multiple of the stages"},
      {"--pp 2 --virtual-stages 1 --pp-split 3,3,3,3",
       "--pp-split: gives 4 block counts for 2 pipeline stages: give one for each"},
      {"--pp 2 --virtual-stages 2 --pp-split 4,4,4",
       "--pp-split: gives 3 block counts for 4 model chunks (2 stages of 2): give one for each"},
      {"--pp 2 --pp-split ''", "--pp-split: is empty: give"},
      {"--pp 2 --pp-split 13,1", "--pp-split: every chunk needs between 1 and the model's 12"},
      {"--pp 1 --pp-split balanced",
       "--pp-split: splits the blocks between pipeline stages: give --pp 2"},
      {"--pp-split 6,6", "--pp-split: splits the blocks between pipeline stages: give --pp 2"},
      {"--pp 1 --pp-split 12", "--pp-split: splits the blocks between pipeline stages"},
      {"--pp 2 --pp-split 6,x", "--pp-split: "},
  };
  for (const auto& [flags, said] : cases) {
    const auto result = cli(base + flags);
    EXPECT_EQ(result.exit_code, 2) << flags;
    EXPECT_EQ(result.err.rfind(std::string("rematlab-cli: error: ") + said, 0), 0u)
        << flags << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
}

// A run evaluated stage by stage (what the advisor checks a pipeline run with): each stage under
// the policy the run gave it, stages of one shape included, and under virtual stages each
// rank's chunks' policies from the chain-order list the engine reads.
TEST(RunLayout, EachStageIsEvaluatedUnderItsOwnPolicy) {
  RunConfig config;
  config.preset = "small";
  config.model = model_preset("small");
  config.batch = 2;
  config.accum = 4;
  config.world_size = config.pp = 4;  // 3 blocks a stage: stages 1 and 2 have one shape
  config.checkpoint = "stages:every:1/every:1/none/none";
  const LayoutEvaluation mixed = evaluate_run(config);
  ASSERT_EQ(mixed.stages.size(), 4u);
  EXPECT_EQ(mixed.stages[1].checkpoint, "every:1");
  EXPECT_EQ(mixed.stages[2].checkpoint, "none");
  EXPECT_GT(mixed.stages[2].memory.activations, mixed.stages[1].memory.activations);
  // The same stage under the same policy whichever way it is given.
  EXPECT_EQ(mixed.stages[2].memory.total(), evaluate_run(config, "none").stages[2].memory.total());

  config.world_size = config.pp = 2;
  config.virtual_stages = 2;  // chunks 0 and 2 on rank 0, 1 and 3 on rank 1
  config.checkpoint = "stages:every:1/none/every:1/none";
  const LayoutEvaluation interleaved = evaluate_run(config);
  ASSERT_EQ(interleaved.stages.size(), 2u);
  EXPECT_EQ(interleaved.stages[0].checkpoint, "every:1");
  EXPECT_EQ(interleaved.stages[1].checkpoint, "none");
  // One rank's chunks under policies of their own (a plan's segment lists), each evaluated.
  config.checkpoint = "stages:every:1/none/sublayer:1,1/none";
  EXPECT_EQ(evaluate_run(config).stages[0].checkpoint, "every:1/sublayer:1,1");
  // A list of another length, or a policy not yet resolved: refused, named.
  for (const auto& [policy, said] :
       {std::pair<std::string, std::string>{"stages:every:1/none",
                                            "gives 2 policies for 4 model chunks"},
        {"plan:100MiB", "give the policy the plan chose"}}) {
    config.checkpoint = policy;
    try {
      evaluate_run(config);
      ADD_FAILURE() << policy << " was evaluated";
    } catch (const InvalidInput& error) {
      EXPECT_NE(std::string(error.what()).find(said), std::string::npos) << error.what();
    }
  }
}

// A record no run of the engine makes (edited by hand) is refused in one line, never estimated
// as something else: sharded parameters on stages, a balanced split never chosen, a step whose
// sequences overflow, more chunks than the advisor walks in its time.
TEST(RunLayout, ARecordTheEngineWouldNotRunIsRefused) {
  RunConfig config;
  config.preset = "small";
  config.model = model_preset("small");
  config.batch = 2;
  config.accum = 4;
  config.world_size = config.pp = 2;
  config.checkpoint = "every:1";
  ASSERT_NO_THROW(evaluate_run(config));
  const RunConfig valid = config;
  std::vector<std::pair<std::function<void(RunConfig&)>, std::string>> edits = {
      {[](RunConfig& c) { c.world_size = 4, c.shard = "parameters"; },
       "RematLab's engine does not run"},
      {[](RunConfig& c) { c.pp_split_balanced = true; }, "recorded no split"},
      {[](RunConfig& c) { c.batch = int64_t{1} << 32, c.accum = (int64_t{1} << 32) + 1; },
       "beyond what the planner counts"},
      {[](RunConfig& c) {
         c.model.layers = 4096;
         c.world_size = c.pp = 2048;
         c.accum = 4096;
       },
       "more than the 1024 pipeline chunks"},
  };
  for (const auto& [edit, said] : edits) {
    config = valid;
    edit(config);
    try {
      evaluate_run(config);
      ADD_FAILURE() << said << ": evaluated";
    } catch (const InvalidInput& error) {
      EXPECT_NE(std::string(error.what()).find(said), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace rematlab::layout
