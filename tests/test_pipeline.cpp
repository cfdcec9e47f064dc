// Pipeline parallelism (--pp): the 1F1B order and the blocks' split as plain functions; P stages
// as real processes over Gloo on 127.0.0.1 against one process training the same micro-batches,
// for both families and a tied and an untied head; every checkpoint policy against `none` under
// the same split, bit for bit; what is refused before anything starts. The ranks are this test
// binary again (dist_workers.h); run_pipeline_case is one rank's side.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "dist_workers.h"
#include "parallel/pipeline_exchange.h"
#include "parallel/pipeline_schedule.h"
#include "train/trainer.h"

namespace rematlab {

// The parameters this stage holds (the others are released: empty), each after its index in
// the whole model's parameters, so that the test can pair them with one process's.
std::vector<torch::Tensor> testing::dist::run_pipeline_case(
    const std::shared_ptr<parallel::DistContext>& context, const nlohmann::json& item) {
  RunConfig config = config_from(item.at("run"));
  config.world_size = context->world_size();
  Trainer trainer(config, std::make_shared<parallel::PipelineExchange>(context));
  std::vector<torch::Tensor> result;
  if (item.at("mode") == "pipeline_gradients") {
    const std::optional<double> loss =
        trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0));
    result.push_back(torch::tensor({loss.value()}, torch::kFloat64));
  } else {
    std::vector<double> losses;
    const RunSummary summary = trainer.run();
    for (const StepMetrics& step : summary.steps) losses.push_back(step.loss);
    for (const StepMetrics& step : summary.steps) losses.push_back(step.grad_norm);
    result.push_back(torch::tensor(losses, torch::kFloat64));
  }
  const bool gradients = item.at("mode") == "pipeline_gradients";
  const auto params = trainer.model()->parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (params[i].numel() == 0) continue;  // another stage's
    result.push_back(torch::tensor({static_cast<int64_t>(i)}));
    result.push_back(gradients ? params[i].grad().clone() : params[i].detach().clone());
  }
  return result;
}

namespace pipeline_suite {

using namespace testing::dist;

TEST(PipelineSchedule, OneForwardOneBackwardRunsEveryMicroBatchOnceInOrderWithPMinusSInFlight) {
  for (int64_t stages : {1, 2, 3, 4}) {
    for (int64_t micro : {stages, stages + 1, 2 * stages + 3}) {
      for (int64_t stage = 0; stage < stages; ++stage) {
        const auto actions = parallel::one_forward_one_backward(stage, stages, micro);
        ASSERT_EQ(actions.size(), static_cast<std::size_t>(2 * micro));
        int64_t forwards = 0;
        int64_t backwards = 0;
        int64_t most = 0;
        for (const parallel::PipelineAction& action : actions) {
          // Each kind in micro-batch order, a backward only after its forward.
          if (action.forward) {
            EXPECT_EQ(action.micro_batch, forwards++);
          } else {
            EXPECT_EQ(action.micro_batch, backwards++);
            EXPECT_LT(action.micro_batch, forwards);
          }
          most = std::max(most, forwards - backwards);
        }
        EXPECT_EQ(most, parallel::micro_batches_in_flight(stage, stages, micro))
            << stage << " of " << stages << ", " << micro << " micro-batches";
        EXPECT_EQ(most, std::min(stages - stage, micro));
        // The last stage alternates from the start; the first runs P − 1 forwards first.
        const int64_t leading =
            std::find_if(actions.begin(), actions.end(),
                         [](const parallel::PipelineAction& a) { return !a.forward; }) -
            actions.begin();
        EXPECT_EQ(leading, std::min(stages - stage, micro));
      }
    }
  }
}

// The first stage keeps the most micro-batches' activations, the last the head's states: each
// figure's maximum apart would pair one stage's peak with another's activations.
TEST(PipelineFigures, TheRunsMemoryIsTheFullestStagesWhole) {
  RunResult result;
  RankResult first;
  first.rank = 0, first.peak_bytes = 100, first.peak_activation_bytes = 90,
  first.baseline_bytes = 10;
  RankResult last;
  last.rank = 1, last.peak_bytes = 120, last.peak_activation_bytes = 60, last.baseline_bytes = 60;
  result.ranks = {first, last};
  result.take_memory_of_fullest_rank();
  EXPECT_EQ(result.peak_bytes, 120);
  EXPECT_EQ(result.peak_activation_bytes, 60);
  EXPECT_EQ(result.baseline_bytes, 60);
  result.ranks[0].peak_bytes = 130;
  result.take_memory_of_fullest_rank();
  EXPECT_EQ(result.peak_bytes, 130);
  EXPECT_EQ(result.peak_activation_bytes, 90);
  EXPECT_EQ(result.baseline_bytes, 10);
}

// A stored record's degrees may be anything: 2^32 tensor ranks times 2^32 stages wraps to 0 in
// 64 bits, which read as one split would make every rank a data rank.
TEST(PipelineFigures, DataRanksOfHostileDegreesDoNotOverflow) {
  RunConfig config;
  config.world_size = 8;
  config.tp = 2;
  config.pp = 2;
  EXPECT_EQ(config.data_ranks(), 2);
  config.tp = config.pp = int64_t{1} << 32;
  EXPECT_EQ(config.data_ranks(), 1);
  config.tp = config.pp = -3;  // read as one each
  EXPECT_EQ(config.data_ranks(), 8);
}

TEST(PipelineSchedule, BlocksSplitIntoEqualMiddleStagesWithTheRestAtTheEnds) {
  EXPECT_EQ(stage_block_bounds(4, 1), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(stage_block_bounds(4, 2), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(stage_block_bounds(5, 2), (std::vector<int64_t>{0, 2, 5}));
  EXPECT_EQ(stage_block_bounds(5, 3), (std::vector<int64_t>{0, 1, 3, 5}));
  EXPECT_EQ(stage_block_bounds(12, 4), (std::vector<int64_t>{0, 3, 6, 9, 12}));
  EXPECT_EQ(stage_block_bounds(10, 4), (std::vector<int64_t>{0, 2, 5, 8, 10}));
  EXPECT_EQ(stage_block_bounds(3, 3), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(stage_block_bounds(80, 6), (std::vector<int64_t>{0, 12, 26, 40, 54, 68, 80}));
  EXPECT_THROW(stage_block_bounds(2, 3), std::invalid_argument);
}

// tiny with enough blocks for three stages; heads 4 as the other multi-rank suites have them.
nlohmann::json stage_fields(const std::string& arch, int stages) {
  return with(tiny_fields(),
              {{"arch", arch}, {"layers", 3}, {"heads", 4}, {"pp", stages}, {"accum", 4}});
}

nlohmann::json case_of(const std::string& name, const std::string& mode,
                       const nlohmann::json& fields) {
  return {{"name", name}, {"mode", mode}, {"run", fields}};
}

// One process training what the pipeline trains: the same micro-batches, accumulated.
struct Reference {
  std::vector<double> values;  // the steps' losses, then their gradient norms; or the one loss
  std::vector<torch::Tensor> tensors;
};

Reference one_process(const nlohmann::json& fields, bool steps) {
  RunConfig config = config_from(fields);
  config.pp = 1;
  Trainer trainer(config);
  Reference reference;
  if (steps) {
    const RunSummary summary = trainer.run();
    for (const StepMetrics& step : summary.steps) reference.values.push_back(step.loss);
    for (const StepMetrics& step : summary.steps) reference.values.push_back(step.grad_norm);
  } else {
    reference.values.push_back(
        trainer.accumulate_gradients(trainer.policy().plan_for(config.model.layers, 0.0)).value());
  }
  for (const auto& param : trainer.model()->parameters()) {
    reference.tensors.push_back(steps ? param.detach().clone() : param.grad().clone());
  }
  return reference;
}

// Every rank's values and tensors against `reference`, each within `tolerance` of its tensor's
// largest element (0: bit for bit); every parameter must be held by some stage. After steps, the
// key part of a qkv bias only within 2·lr·steps (is_qkv_bias). Returns the largest relative
// difference seen.
double expect_stages_match(const ScratchDir& dir, const std::string& name,
                           const nlohmann::json& fields, int stages, const Reference& reference,
                           double tolerance) {
  const RunConfig config = config_from(fields);
  std::vector<bool> held(reference.tensors.size(), false);
  double largest = 0.0;
  for (int rank = 0; rank < stages; ++rank) {
    const std::vector<torch::Tensor> got = load(result_file(dir.path(), name, rank));
    EXPECT_FALSE(got.empty()) << name;
    if (got.empty()) return INFINITY;
    EXPECT_EQ(got[0].numel(), static_cast<int64_t>(reference.values.size())) << name;
    for (int64_t i = 0; i < std::min<int64_t>(got[0].numel(), reference.values.size()); ++i) {
      const double expected = reference.values[static_cast<std::size_t>(i)];
      // Losses and norms: the norm's squares are added in double per stage, where one process
      // lets clip_grad_norm_ add them, so its figure (not the clipping: none, or the same
      // coefficient) agrees to 1e-6 even where the parameters agree bit for bit.
      EXPECT_NEAR(got[0][i].item<double>(), expected, std::max(tolerance, 1e-6) * expected)
          << name << ", rank " << rank << ", value " << i;
    }
    for (std::size_t at = 1; at + 1 < got.size(); at += 2) {
      const auto index = static_cast<std::size_t>(got[at].item<int64_t>());
      EXPECT_LT(index, reference.tensors.size()) << name;
      if (index >= reference.tensors.size()) return INFINITY;
      held[index] = true;
      torch::Tensor mine = got[at + 1];
      torch::Tensor expected = reference.tensors[index];
      if (tolerance > 0.0 && is_qkv_bias(fields, index)) {
        const int64_t first = config.model.d_model;  // [query; key; value]
        const int64_t width = config.model.head_dim() * config.model.key_value_heads();
        EXPECT_LE(
            max_abs_difference(mine.narrow(0, first, width), expected.narrow(0, first, width)),
            2 * config.lr * static_cast<double>(config.steps))
            << name << ", rank " << rank << ", the key bias";
        mine = torch::cat({mine.narrow(0, 0, first),
                           mine.narrow(0, first + width, mine.size(0) - first - width)});
        expected =
            torch::cat({expected.narrow(0, 0, first),
                        expected.narrow(0, first + width, expected.size(0) - first - width)});
      }
      const double scale = std::max(expected.abs().max().item<double>(), 1e-30);
      const double difference = max_abs_difference(mine, expected) / scale;
      if (tolerance == 0.0) {
        EXPECT_TRUE(torch::equal(mine, expected))
            << name << ", rank " << rank << ", parameter " << index;
      } else {
        EXPECT_LE(difference, tolerance) << name << ", rank " << rank << ", parameter " << index;
      }
      largest = std::max(largest, difference);
    }
  }
  for (std::size_t index = 0; index < held.size(); ++index) {
    EXPECT_TRUE(held[index]) << name << ": no stage holds parameter " << index;
  }
  std::cout << name << " over " << stages << " stages: largest relative difference " << largest
            << std::endl;
  return largest;
}

// Ten AdamW steps. Each stage forms its own parameters' gradients exactly as one process does
// (the same operations on the same values, accumulated over the micro-batches in the same
// order); what differs is the gradient norm (squares added per stage, then over stages) and,
// with a tied head, its weight's gradient (the head's and the embedding's parts summed apart,
// then together). Clipping carries the first into every parameter's last bits, and AdamW
// amplifies those in elements of small gradient. Measured: 6e-7 of a tensor's largest element
// (llama unclipped and untied: bit for bit); the tolerance leaves a factor 15.
constexpr double kStepsTolerance = 1e-5;

TEST(Pipeline, TwoThreeAndFourStagesTrainTenStepsLikeOneProcessForBothFamilies) {
  std::map<std::string, std::pair<nlohmann::json, int>> cases;
  for (int stages : {2, 3}) {
    const std::string p = "pp" + std::to_string(stages);
    cases[p + "_gpt"] = {with(stage_fields("gpt", stages), {{"steps", 10}}), stages};
    cases[p + "_llama"] = {
        with(stage_fields("llama", stages), {{"kv_heads", 2}, {"steps", 10}, {"grad_clip", 0}}),
        stages};
  }
  // More micro-batches than stages, and a head of its own (not tied to the embedding).
  cases["pp2_gpt_untied_accum5"] = {
      with(stage_fields("gpt", 2), {{"steps", 10}, {"accum", 5}, {"tie_head", false}}), 2};
  // bf16 autocast: the stages send what one process passes between blocks.
  cases["pp2_llama_bf16"] = {
      with(stage_fields("llama", 2),
           {{"kv_heads", 2}, {"steps", 10}, {"grad_clip", 0}, {"precision", "bf16"}}),
      2};
  // Four stages of one block each, the two in the middle passing both ways.
  cases["pp4_llama"] = {with(stage_fields("llama", 4),
                             {{"layers", 4}, {"kv_heads", 2}, {"steps", 10}, {"grad_clip", 0}}),
                        4};
  for (int stages : {2, 3, 4}) {
    ScratchDir dir("pp-steps-" + std::to_string(stages));
    nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
    for (const auto& [name, item] : cases) {
      if (item.second == stages)
        spec["cases"].push_back(case_of(name, "pipeline_steps", item.first));
    }
    run_workers(spec, stages, dir);
    if (HasFatalFailure()) return;
    for (const auto& [name, item] : cases) {
      if (item.second != stages) continue;
      // Llama here is unclipped with a head of its own: nothing is summed apart, bit for bit.
      const bool exact = name.find("llama") != std::string::npos;
      expect_stages_match(dir, name, item.first, stages, one_process(item.first, true),
                          exact ? 0.0 : kStepsTolerance);
    }
  }
}

// A case's name, which names its result files: a policy's slashes (stages:) are no folders.
std::string case_name(const std::string& arch, std::string policy) {
  std::replace(policy.begin(), policy.end(), '/', '|');
  return arch + "_" + policy;
}

// One step's gradients, without a tied head (whose two parts would be added in another order):
// bit for bit what one process forms, under every policy; and each policy's the same as none's.
TEST(Pipeline, EveryPolicyGivesOneProcesssGradientsBitForBitUnderTwoStages) {
  ScratchDir dir("pp-policies");
  const std::vector<std::string> policies = {
      "none", "every:1", "every:2", "every:3", "selective", "keep:qkv,mlp-in", "sublayer:1,1",
      "segments:a0-m1,m2",
      // Each stage its own: the first (two micro-batches in flight) recomputing, the last not.
      "stages:every:1/none", "stages:none/sublayer:1,1"};
  std::map<std::string, nlohmann::json> cases;
  for (const char* arch : {"gpt", "llama"}) {
    for (const std::string& policy : policies) {
      cases[case_name(arch, policy)] =
          with(stage_fields(arch, 2), {{"checkpoint", policy}, {"tie_head", false}});
    }
  }
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : cases) {
    spec["cases"].push_back(case_of(name, "pipeline_gradients", fields));
  }
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (const char* arch : {"gpt", "llama"}) {
    const Reference none = one_process(cases.at(case_name(arch, "none")), false);
    for (const std::string& policy : policies) {
      const std::string name = case_name(arch, policy);
      expect_stages_match(dir, name, cases.at(name), 2, none, 0.0);
    }
  }
}

TEST(Pipeline, LayoutsThatCannotRunAreRefusedBeforeAnythingStarts) {
  ScratchDir dir("pp-refused");
  const std::string db = dir.file("runs.sqlite");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--nproc 5 --pp 5 --accum 5",
       "--pp: 5 stages for 4 blocks: every stage needs one block at least"},
      {"--nproc 2 --pp 2",
       "--accum: 1 micro-batch(es) for 2 stages: a pipeline needs at least "
       "as many micro-batches as stages (--accum 2 or more)"},
      {"--nproc 4 --pp 2 --accum 2",
       "--pp: a pipeline with tensor or data parallelism is not built yet: give --nproc 2"},
      {"--nproc 2 --tp 2 --pp 2 --accum 2",
       "--pp: a pipeline with tensor or data parallelism is not built yet: give --nproc 2 for 2 "
       "stages and --tp 1"},
      {"--pp 2 --accum 2", "--pp: 2 stages need --nproc 2 (one rank a stage)"},
      {"--nproc 2 --pp 0", "--pp: must be between 1 and 4096, got 0"},
      {"--nproc 2 --pp 2 --accum 2 --shard optimizer",
       "--shard: sharding is not built for pipeline stages yet"},
      {"--nproc 2 --pp 2 --accum 2 --checkpoint plan:1MiB",
       "--checkpoint: plan: is not built for pipeline stages yet"},
      {"--nproc 2 --pp 2 --accum 2 --checkpoint stages:none/none/every:1",
       "--checkpoint: 'stages:none/none/every:1' gives 3 stages' policies for 2 pipeline stages"},
  };
  for (const auto& [flags, message] : refused) {
    const testing::CliResult result = testing::cli(
        "run --preset tiny --layers 4 --batch 2 --threads 1 --steps 1 --db " + db + " " + flags);
    EXPECT_EQ(result.exit_code, 2) << flags << ": " << result.err;
    EXPECT_NE(result.err.find(message), std::string::npos) << flags << ": " << result.err;
    EXPECT_EQ(testing::count_lines(result.err), 1) << flags << ": " << result.err;
    EXPECT_FALSE(files::exists(db)) << flags;
  }
}

// Dropout in stages: each stage past the first draws from its own stream, so a pipeline matches
// no one process, but it repeats itself bit for bit, and its masks do drop (other losses than
// without dropout).
TEST(Pipeline, DropoutInStagesRepeatsBitForBitAndDrops) {
  const auto final_loss = [](const std::string& dropout) {
    const testing::CliResult result = testing::cli(
        "run --preset tiny --layers 4 --batch 2 --threads 1 --steps 3 --nproc 2 --pp 2 --accum 2 "
        "--dropout " +
        dropout + " --json");
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return result.exit_code == 0
               ? testing::last_line_json(result.out).at("final_loss").get<double>()
               : -1.0;
  };
  const double first = final_loss("0.1");
  EXPECT_EQ(final_loss("0.1"), first);  // bit for bit
  EXPECT_NE(final_loss("0"), first);
}

}  // namespace pipeline_suite
}  // namespace rematlab
