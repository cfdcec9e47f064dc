// The layout planner under the policies its search does not weigh but the engine runs (sublayer
// strides, segment lists, one per model chunk: what plan:BUDGET chooses for each stage): every:K
// spelled as segments is evaluated as every:K; a stage's segment list is its chunk's estimate
// held as its schedule holds it; a rank's chunks under their own policies each cost their share;
// what the exported run measures is what was predicted; what cannot be evaluated is one line,
// exit 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_policy.h"
#include "cli_runner.h"
#include "common/errors.h"
#include "estimate/activation_memory.h"
#include "estimate/architecture.h"
#include "layout/layout_export.h"
#include "layout/run_layout.h"
#include "model/model_config.h"
#include "planned_run.h"
#include "run/run_config.h"

namespace rematlab::layout {
namespace {

using testing::cli;
using testing::last_line_json;

RunConfig pipeline_run(const std::string& preset, int64_t pp, int64_t vp) {
  RunConfig config;
  config.preset = preset;
  config.model = model_preset(preset);
  config.batch = 2;
  config.accum = 4;
  config.world_size = config.pp = pp;
  config.virtual_stages = vp;
  return config;
}

void expect_same_figures(const LayoutEvaluation& a, const LayoutEvaluation& b) {
  ASSERT_EQ(a.stages.size(), b.stages.size());
  for (size_t stage = 0; stage < a.stages.size(); ++stage) {
    EXPECT_EQ(a.stages[stage].memory.total(), b.stages[stage].memory.total()) << stage;
    EXPECT_EQ(a.stages[stage].microbatch_s, b.stages[stage].microbatch_s) << stage;
  }
  EXPECT_EQ(a.time.recompute, b.time.recompute);
  EXPECT_EQ(a.time.bubble, b.time.bubble);
  EXPECT_EQ(a.step_s, b.step_s);
  EXPECT_EQ(a.recomputes, b.recomputes);
}

TEST(LayoutSegments, EveryKSpelledAsSegmentsIsEvaluatedAsEveryK) {
  RunConfig config = pipeline_run("small", 2, 1);  // 6 blocks a stage
  const LayoutEvaluation every = evaluate_run(config, "every:1");
  EXPECT_TRUE(every.recomputes);
  const std::string six = "segments:a0-m0,a1-m1,a2-m2,a3-m3,a4-m4,a5-m5";
  expect_same_figures(every, evaluate_run(config, "stages:" + six + "/" + six));
  // every:2 on llama-small's 3-block stages: a0-m1 and a2-m2, the same on each stage.
  config = pipeline_run("llama-small", 4, 1);
  const std::string three = "segments:a0-m1,a2-m2";
  expect_same_figures(evaluate_run(config, "every:2"),
                      evaluate_run(config, "stages:every:2/" + three + "/every:2/every:2"));
}

// A segment list given for all is the engine's: planned over the whole chain and cut at the
// stages' edges, a segment across an edge recomputed on each side.
TEST(LayoutSegments, ASegmentListForAllIsCutAtTheStagesEdges) {
  const RunConfig config = pipeline_run("small", 2, 1);  // blocks 0-5 and 6-11
  const LayoutEvaluation whole = evaluate_run(config, "segments:a0-m0,m5-a6,m11");
  EXPECT_EQ(whole.stages[0].checkpoint, "segments:a0-m0,m5");
  EXPECT_EQ(whole.stages[1].checkpoint, "segments:a0,m5");
  expect_same_figures(whole, evaluate_run(config, "stages:segments:a0-m0,m5/segments:a0,m5"));
  std::vector<std::string> unsaid;
  EXPECT_EQ(rematlab_policy(whole.layout, unsaid), "stages:segments:a0-m0,m5/segments:a0,m5");
  // The first half of the chain one recomputed segment: the first stage's six blocks as one
  // (its every:6), the second stage nothing.
  expect_same_figures(evaluate_run(config, "segments:a0-m5"),
                      evaluate_run(config, "stages:segments:a0-m5/none"));
  EXPECT_EQ(evaluate_run(config, "segments:a0-m5").stages[1].checkpoint, "none");
}

// 1F1B's first stage of two holds two micro-batches: one at its peak, the other's saved bytes,
// each its chunk's estimate under the stage's own plan (6 blocks and the embedding).
TEST(LayoutSegments, AStagesSegmentListIsItsChunksEstimateHeldInFlight) {
  const RunConfig config = pipeline_run("small", 2, 1);
  const LayoutEvaluation planned = evaluate_run(config, "stages:segments:a0,m0,m1,m2,m4/none");
  ASSERT_EQ(planned.stages.size(), 2u);
  EXPECT_EQ(planned.stages[0].checkpoint, "segments:a0,m0,m1,m2,m4");
  EXPECT_EQ(planned.stages[0].in_flight, 2);
  estimate::ActivationInput input;
  input.arch = estimate::from_model_config(config.model);
  input.arch.layers = 6;
  input.arch.input_trains = false;
  input.batch = config.batch;
  input.precision = config.precision;
  input.plan = CheckpointPolicy::parse("segments:a0,m0,m1,m2,m4").plan_for(6, 0.0);
  input.embedding = true;
  input.head = false;
  const estimate::ActivationEstimate chunk = estimate::estimate_activations(input);
  EXPECT_EQ(planned.stages[0].memory.activations, chunk.peak_bytes + chunk.saved_bytes);
  // The last stage under none is none's; the first between none's and every:1's, in memory
  // and in time (it recomputes five of its twelve sublayers).
  const LayoutEvaluation none = evaluate_run(config, "none");
  const LayoutEvaluation every = evaluate_run(config, "every:1");
  EXPECT_EQ(planned.stages[1].memory.total(), none.stages[1].memory.total());
  EXPECT_EQ(planned.stages[1].microbatch_s, none.stages[1].microbatch_s);
  EXPECT_LT(planned.stages[0].memory.activations, none.stages[0].memory.activations);
  EXPECT_GT(planned.stages[0].memory.activations, every.stages[0].memory.activations);
  EXPECT_GT(planned.stages[0].microbatch_s, none.stages[0].microbatch_s);
  EXPECT_LT(planned.stages[0].microbatch_s, every.stages[0].microbatch_s);
  EXPECT_TRUE(planned.recomputes);
  // The first stage sets the pace: it idles the pipeline's bubble, the faster last stage more.
  EXPECT_DOUBLE_EQ(planned.stages[0].idle_s, planned.time.bubble);
  EXPECT_NEAR(planned.stages[1].idle_s - planned.stages[0].idle_s,
              static_cast<double>(config.accum) *
                  (planned.stages[0].microbatch_s - planned.stages[1].microbatch_s),
              1e-12);
}

// Interleaved: rank 0 holds chunks 0 and 2, rank 1 chunks 1 and 3, 3 blocks each. Recomputing
// one chunk of each rank's two costs half of recomputing both; each rank holds more than under
// every:1 and rank 0 less than under none. Rank 1's order (4 micro-batches) holds two passes of
// its first chunk and one of its second (with the head) as the second's backward starts, and
// three of its first as the first's does: the higher of the two, from each chunk's estimate.
// The RematLab export gives back the same list.
TEST(LayoutSegments, ARanksChunksUnderTheirOwnPoliciesCostTheirShare) {
  const RunConfig config = pipeline_run("small", 2, 2);
  const std::string policy = "stages:every:1/none/none/every:1";
  const LayoutEvaluation mixed = evaluate_run(config, policy);
  const LayoutEvaluation every = evaluate_run(config, "every:1");
  const LayoutEvaluation none = evaluate_run(config, "none");
  ASSERT_EQ(mixed.stages.size(), 2u);
  EXPECT_EQ(mixed.stages[0].checkpoint, "every:1/none");
  EXPECT_EQ(mixed.stages[1].checkpoint, "none/every:1");
  EXPECT_NEAR(mixed.time.recompute / every.time.recompute, 0.5, 1e-12);
  for (size_t stage = 0; stage < 2; ++stage) {
    EXPECT_GT(mixed.stages[stage].memory.activations, every.stages[stage].memory.activations);
  }
  EXPECT_LT(mixed.stages[0].memory.activations, none.stages[0].memory.activations);
  auto chunk = [&config](const std::string& chunk_policy, bool head) {
    estimate::ActivationInput input;
    input.arch = estimate::from_model_config(config.model);
    input.arch.layers = 3;
    input.batch = config.batch;
    input.precision = config.precision;
    input.plan = CheckpointPolicy::parse(chunk_policy).plan_for(3, 0.0);
    input.embedding = false;
    input.head = head;
    return estimate::estimate_activations(input);
  };
  const estimate::ActivationEstimate first = chunk("none", false);
  const estimate::ActivationEstimate second = chunk("every:1", true);
  EXPECT_EQ(mixed.stages[1].memory.activations,
            std::max(2 * first.saved_bytes + second.peak_bytes,
                     3 * first.saved_bytes + first.peak_bytes - first.saved_bytes));
  std::vector<std::string> unsaid;
  EXPECT_EQ(rematlab_policy(mixed.layout, unsaid), policy);
  EXPECT_TRUE(unsaid.empty());
}

// Each rank of the exported run measures its stage (states to the byte, activations within
// 5 %): chunks of one block, one recomputing its MLP, one all of itself, two nothing.
TEST(LayoutSegments, EachRankOfTheExportedRunMeasuresWhatWasPredicted) {
  const auto planned =
      cli("layout --model tiny --layers 4 --seq-len 64 --gpu rtx4090 --gpus 2 --global-batch 8 "
          "--pp 2 --virtual-stages 2 --micro-batch 2 --zero 0 --offload none --precision fp32 "
          "--checkpoint stages:segments:m0/none/none/segments:a0-m0 --json");
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const nlohmann::json plan = last_line_json(planned.out);
  const nlohmann::json& best = plan["layouts"][0];
  EXPECT_EQ(best["stages"][0]["checkpoint"], "segments:m0/none");
  EXPECT_EQ(best["stages"][1]["checkpoint"], "none/segments:a0-m0");
  const std::string command = plan["exports"]["rematlab"]["text"];
  ASSERT_NE(command.find("--checkpoint stages:segments:m0/none/none/segments:a0-m0"),
            std::string::npos)
      << command;
  testing::run_planned_stages(plan, 2);
}

TEST(LayoutSegments, WhatCannotBeEvaluatedIsOneLineExitTwo) {
  const std::string base =
      "layout --model small --seq-len 256 --gpu rtx4090 --gpus 4 --global-batch 16 "
      "--micro-batch 4 --offload none ";
  const std::pair<std::string, std::string> cases[] = {
      {"--checkpoint segments:m0", "give --pp and --virtual-stages with it"},
      {"--pp 2 --checkpoint segments:m0", "give --pp and --virtual-stages with it"},
      {"--pp 2 --virtual-stages 1 --checkpoint plan:100MiB", "give the policy the plan chose"},
      {"--pp 2 --virtual-stages 1 --checkpoint schedule:0=1,0.5=2", "sublayer: and segments:"},
      {"--pp 2 --virtual-stages 2 --checkpoint stages:segments:m0,m1/none/none/segments:m4",
       "pipeline rank 1's chunk 1 (3 blocks, named from a0)"},
      {"--pp 2 --virtual-stages 2 --checkpoint stages:none/none", "2 policies for 4 model chunks"},
      {"--pp 2 --virtual-stages 1 --dp 2 --zero 3 --checkpoint segments:m0",
       "--zero: ZeRO 3's gathers are timed"},
      {"--pp 2 --virtual-stages 1 --pp-split balanced --checkpoint segments:m0",
       "--pp-split balanced has not split yet"},
      {"--pp 2 --virtual-stages 1 --activation-model megatron --checkpoint segments:m0",
       "use --activation-model engine"},
  };
  for (const auto& [flags, said] : cases) {
    const auto result = cli(base + flags);
    EXPECT_EQ(result.exit_code, 2) << flags << "\n" << result.out;
    EXPECT_NE(result.err.find(said), std::string::npos) << flags << "\n" << result.err;
    EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << result.err;  // one line
    EXPECT_TRUE(result.out.empty()) << result.out;
  }
  // With ZeRO open the search leaves ZeRO 3 out rather than timing it wrongly.
  const auto searched =
      cli(base + "--pp 2 --virtual-stages 1 --checkpoint segments:m0 --top 50 --json");
  ASSERT_EQ(searched.exit_code, 0) << searched.err;
  const nlohmann::json answer = last_line_json(searched.out);
  ASSERT_FALSE(answer["layouts"].empty());
  for (const auto& layout : answer["layouts"]) EXPECT_NE(layout["zero"], 3);
}

}  // namespace
}  // namespace rematlab::layout
