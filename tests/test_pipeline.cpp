// Pipeline parallelism (--pp): the 1F1B order and the blocks' split as plain functions; P stages
// as real processes over Gloo on 127.0.0.1 against one process training the same micro-batches,
// for both families and a tied and an untied head; every checkpoint policy against `none` under
// the same split, bit for bit; what is refused before anything starts. The ranks are this test
// binary again (dist_workers.h); run_pipeline_case is one rank's side.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/stage_blocks.h"
#include "cli_runner.h"
#include "dist_workers.h"
#include "parallel/pipeline_exchange.h"
#include "parallel/pipeline_schedule.h"
#include "run/pipeline_config.h"
#include "store/run_store.h"
#include "store/sqlite_db.h"
#include "train/trainer.h"

namespace rematlab {

namespace {

// One activation from stage 0 to stage 1, sent `delay_ms` after stage 1 began to wait for it:
// each stage's [bubble_ms, transfer_ms, comm_wait_ms].
std::vector<torch::Tensor> run_notice_case(const std::shared_ptr<parallel::DistContext>& context,
                                           const nlohmann::json& item) {
  parallel::PipelineExchange pipe(context, 2, 1,
                                  parallel::DataParallelOptions{ShardMode::kNone, 1 << 20});
  pipe.use_schedule(parallel::PipelineSchedule(2, 1, 2));
  const int64_t elements = item.at("elements").get<int64_t>();
  // Both stages past a first exchange, so that neither starts its clock before the other lives.
  pipe.any_rank(false);
  if (pipe.stage() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(item.at("delay_ms").get<int64_t>()));
    pipe.send_output(torch::ones({elements}), 0, 0);
    pipe.finish_sends();
  } else {
    const torch::Tensor got = pipe.receive_input({elements}, torch::TensorOptions(), 0, 0);
    if (!torch::equal(got, torch::ones({elements}))) throw std::runtime_error("a wrong tensor");
  }
  StepMetrics metrics;
  pipe.report(metrics);
  return {torch::tensor({metrics.bubble_ms, metrics.transfer_ms, metrics.comm_wait_ms},
                        torch::kFloat64)};
}

// The stage's chunks and its tied head given before attach, then again after it (where the
// buckets they shape are laid out already): [given before, refused after] for each, as 0 or 1.
std::vector<torch::Tensor> run_late_wiring_case(
    const std::shared_ptr<parallel::DistContext>& context) {
  parallel::PipelineExchange pipe(context, 2, 1,
                                  parallel::DataParallelOptions{ShardMode::kNone, 1 << 20});
  const torch::Tensor weight = torch::zeros({4, 4}, torch::requires_grad());
  // 1 when `give` is refused with a logic error that says why.
  auto refused = [](const auto& give, const std::string& said) {
    try {
      give();
    } catch (const std::logic_error& error) {
      return std::string(error.what()).find(said) != std::string::npos ? 1.0 : 0.0;
    }
    return 0.0;
  };
  auto chunks = [&] { pipe.use_chunk_parameters({{weight}}); };
  auto tied = [&] { pipe.share_gradient_of(weight); };
  const std::string chunks_said = "a stage's chunks are given before attach";
  const std::string tied_said = "a tied head is shared before attach";
  const double chunks_before = 1.0 - refused(chunks, chunks_said);
  const double tied_before = 1.0 - refused(tied, tied_said);
  pipe.attach({weight});
  return {torch::tensor(
      {chunks_before, refused(chunks, chunks_said), tied_before, refused(tied, tied_said)},
      torch::kFloat64)};
}

}  // namespace

// The parameters this stage holds (the others are released: empty), each after its index in
// the whole model's parameters, so that the test can pair them with one process's.
std::vector<torch::Tensor> testing::dist::run_pipeline_case(
    const std::shared_ptr<parallel::DistContext>& context, const nlohmann::json& item) {
  if (item.at("mode") == "pipeline_notice") return run_notice_case(context, item);
  if (item.at("mode") == "pipeline_late_wiring") return run_late_wiring_case(context);
  RunConfig config = config_from(item.at("run"));
  config.world_size = context->world_size();
  Trainer trainer(
      config, std::make_shared<parallel::PipelineExchange>(
                  context, config.pp, config.tp,
                  parallel::DataParallelOptions{parse_shard(config.shard), config.bucket_bytes}));
  std::vector<torch::Tensor> result;
  if (item.at("mode") == "pipeline_gradients") {
    const std::optional<double> loss = trainer.accumulate_gradients(
        trainer.policy().plan_for(config.model.layers, 0.0, config.pp_split));
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

// Every stage's order played together, sends returning at once and receives waiting: returns
// whether every action ran (no stage waited on another in a cycle). Checks on the way that each
// stage runs every chunk's forward and backward of every micro-batch once, each kind in
// micro-batch order within a chunk and a backward only after its forward, and counts the most
// chunk passes in flight on each stage into `most`.
std::vector<parallel::PipelineAction> actions_of(const parallel::PipelineSchedule& schedule,
                                                 int64_t stage) {
  std::vector<parallel::PipelineAction> actions;
  for (int64_t index = 0; index < schedule.length(); ++index) {
    actions.push_back(schedule.action(stage, index));
  }
  return actions;
}

bool plays_to_the_end(const parallel::PipelineSchedule& schedule, std::vector<int64_t>& most) {
  const int64_t stages = schedule.stages();
  const int64_t chunks = schedule.chunks();
  const int64_t micro = schedule.micro_batches();
  const int64_t chain = stages * chunks;
  // sent[(virtual stage, micro-batch, gradient)]: what a receive could take.
  std::set<std::tuple<int64_t, int64_t, bool>> sent;
  std::vector<std::size_t> next(static_cast<std::size_t>(stages), 0);
  std::vector<std::vector<int64_t>> forwards(static_cast<std::size_t>(stages),
                                             std::vector<int64_t>(chunks, 0));
  auto backwards = forwards;
  most.assign(static_cast<std::size_t>(stages), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t stage = 0; stage < stages; ++stage) {
      const auto s = static_cast<std::size_t>(stage);
      const auto& actions = actions_of(schedule, stage);
      if (next[s] == actions.size()) continue;
      const parallel::PipelineAction& action = actions[next[s]];
      const int64_t virtual_stage = action.chunk * stages + stage;
      const auto c = static_cast<std::size_t>(action.chunk);
      if (action.forward) {
        if (virtual_stage > 0 && !sent.count({virtual_stage - 1, action.micro_batch, false})) {
          continue;
        }
        EXPECT_EQ(action.micro_batch, forwards[s][c]++);
        if (virtual_stage + 1 < chain) sent.insert({virtual_stage, action.micro_batch, false});
      } else {
        if (virtual_stage + 1 < chain &&
            !sent.count({virtual_stage + 1, action.micro_batch, true})) {
          continue;
        }
        EXPECT_EQ(action.micro_batch, backwards[s][c]++);
        EXPECT_LT(action.micro_batch, forwards[s][c]);
        if (virtual_stage > 0) sent.insert({virtual_stage, action.micro_batch, true});
      }
      EXPECT_EQ(schedule.position(stage, action), static_cast<int64_t>(next[s]));
      int64_t flying = 0;
      for (std::size_t k = 0; k < forwards[s].size(); ++k) {
        flying += forwards[s][k] - backwards[s][k];
      }
      most[s] = std::max(most[s], flying);
      ++next[s];
      progress = true;
    }
  }
  for (int64_t stage = 0; stage < stages; ++stage) {
    const auto s = static_cast<std::size_t>(stage);
    if (next[s] != actions_of(schedule, stage).size()) return false;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      EXPECT_EQ(forwards[s][static_cast<std::size_t>(chunk)], micro);
      EXPECT_EQ(backwards[s][static_cast<std::size_t>(chunk)], micro);
    }
  }
  return true;
}

TEST(PipelineSchedule, OneForwardOneBackwardRunsEveryMicroBatchOnceInOrderWithPMinusSInFlight) {
  for (int64_t stages : {1, 2, 3, 4}) {
    for (int64_t micro : {stages, stages + 1, 2 * stages + 3}) {
      const parallel::PipelineSchedule schedule(stages, 1, micro);
      std::vector<int64_t> most;
      EXPECT_TRUE(plays_to_the_end(schedule, most)) << stages << " stages, " << micro;
      for (int64_t stage = 0; stage < stages; ++stage) {
        const auto& actions = actions_of(schedule, stage);
        ASSERT_EQ(actions.size(), static_cast<std::size_t>(2 * micro));
        EXPECT_EQ(most[static_cast<std::size_t>(stage)], schedule.most_in_flight(stage))
            << stage << " of " << stages << ", " << micro << " micro-batches";
        EXPECT_EQ(schedule.most_in_flight(stage), std::min(stages - stage, micro));
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

// What the layout planner asks of 1F1B for every stage: the most a stage holds, each micro-batch
// weighed by its bytes, whatever the micro-batches against the stages (fewer included, which the
// engine refuses and the planner still weighs).
TEST(PipelineSchedule, OneForwardOneBackwardHoldsItsWarmUpAndOneMoreWeighedByItsBytes) {
  for (int64_t stages : {1, 2, 3, 5}) {
    for (int64_t micro = 1; micro <= 2 * stages + 3; ++micro) {
      for (int64_t bytes : {1, 7}) {
        for (int64_t stage = 0; stage < stages; ++stage) {
          EXPECT_EQ(parallel::PipelineSchedule::most_held(stages, stage, micro, {bytes}),
                    bytes * std::min(stages - stage, micro))
              << stage << " of " << stages << ", " << micro << " micro-batches of " << bytes;
        }
      }
    }
  }
}

// Interleaved: the same guarantees over V chunks; the first stage holds 2(P − 1) + (V − 1)·P + 1
// chunk passes at once (all of them when M = P), so that with a chunk 1/V of a stage's blocks
// it keeps P·(1 + (P − 1)/(P·V)) micro-batches' worth, as Megatron-LM's paper says.
TEST(PipelineSchedule, InterleavedRunsEveryChunkOfEveryMicroBatchWithoutAWaitingCycle) {
  for (int64_t stages : {2, 3, 4}) {
    for (int64_t chunks : {2, 3}) {
      for (int64_t micro : {stages, 2 * stages, 3 * stages}) {
        const parallel::PipelineSchedule schedule(stages, chunks, micro);
        std::vector<int64_t> most;
        EXPECT_TRUE(plays_to_the_end(schedule, most))
            << stages << " stages of " << chunks << " chunks, " << micro << " micro-batches";
        for (int64_t stage = 0; stage < stages; ++stage) {
          EXPECT_EQ(actions_of(schedule, stage).size(),
                    static_cast<std::size_t>(2 * chunks * micro));
          // Chunks of unequal size: the walk without the order against the order itself.
          const std::vector<int64_t> weights = {3, 1, 2};
          int64_t held = 0;
          int64_t most_weighed = 0;
          for (const parallel::PipelineAction& action : actions_of(schedule, stage)) {
            const int64_t weight = weights[static_cast<std::size_t>(action.chunk)];
            held += action.forward ? weight : -weight;
            most_weighed = std::max(most_weighed, held);
          }
          EXPECT_EQ(parallel::PipelineSchedule::most_held(
                        stages, stage, micro,
                        std::vector<int64_t>(weights.begin(), weights.begin() + chunks)),
                    most_weighed)
              << stage << " of " << stages << " × " << chunks << ", " << micro;
          EXPECT_EQ(most[static_cast<std::size_t>(stage)], schedule.most_in_flight(stage))
              << stage << " of " << stages << " × " << chunks << ", " << micro;
        }
        if (micro > stages) {
          EXPECT_EQ(schedule.most_in_flight(0), 2 * (stages - 1) + (chunks - 1) * stages + 1);
        } else {
          EXPECT_EQ(schedule.most_in_flight(0), chunks * micro);
        }
      }
    }
  }
  EXPECT_THROW(parallel::PipelineSchedule(2, 2, 3), std::invalid_argument);  // rounds of P
  EXPECT_THROW(parallel::PipelineSchedule(2, 0, 2), std::invalid_argument);
}

// What the layout planner asks for chunks under policies of their own: before each backward,
// the passes held and what that backward rises above its pass's saved bytes, highest over the
// whole order (its cool-down included), against the order played action by action.
TEST(PipelineSchedule, APeakWithEachBackwardsRiseIsTheOrdersHighest) {
  const std::vector<int64_t> saved = {3, 1, 2};
  const std::vector<int64_t> rises = {5, 11, 0};
  for (int64_t stages : {1, 2, 3, 4}) {
    for (int64_t chunks : {1, 2, 3}) {
      if (chunks > 1 && stages == 1) continue;
      for (int64_t micro : {stages, 2 * stages, 3 * stages, 7 * stages}) {
        const parallel::PipelineSchedule schedule(stages, chunks, micro);
        const std::vector<int64_t> own_saved(saved.begin(), saved.begin() + chunks);
        const std::vector<int64_t> own_rises(rises.begin(), rises.begin() + chunks);
        for (int64_t stage = 0; stage < stages; ++stage) {
          int64_t held = 0;
          int64_t highest = 0;
          for (const parallel::PipelineAction& action : actions_of(schedule, stage)) {
            const auto chunk = static_cast<std::size_t>(action.chunk);
            if (action.forward) {
              held += own_saved[chunk];
            } else {
              highest = std::max(highest, held + own_rises[chunk]);
              held -= own_saved[chunk];
            }
          }
          EXPECT_EQ(parallel::PipelineSchedule::peak_with_backward(stages, stage, micro, own_saved,
                                                                   own_rises),
                    highest)
              << stage << " of " << stages << " × " << chunks << ", " << micro;
          if (chunks == 1) {
            EXPECT_EQ(highest, saved[0] * schedule.most_in_flight(stage) + rises[0]);
          }
        }
      }
    }
  }
  EXPECT_THROW(parallel::PipelineSchedule::peak_with_backward(2, 0, 2, {1, 2}, {1}),
               std::invalid_argument);
}

// A step's end as each pass's: the later of its stage's previous pass and the neighbour pass it
// needs (found by position()), plus its own time, by recursion over the orders.
double step_by_positions(const parallel::PipelineSchedule& schedule,
                         const std::vector<std::vector<double>>& forward,
                         const std::vector<std::vector<double>>& backward) {
  const int64_t stages = schedule.stages();
  const int64_t passes = stages * schedule.chunks();
  std::map<std::pair<int64_t, int64_t>, double> ends;
  std::function<double(int64_t, int64_t)> end = [&](int64_t stage, int64_t index) -> double {
    if (index < 0) return 0.0;
    const auto found = ends.find({stage, index});
    if (found != ends.end()) return found->second;
    const parallel::PipelineAction action = schedule.action(stage, index);
    const int64_t chain = action.chunk * stages + stage;
    double ready = 0.0;
    parallel::PipelineAction needed = action;
    int64_t neighbour = -1;
    if (action.forward && chain > 0) {
      neighbour = (chain - 1) % stages;
      needed.chunk = (chain - 1) / stages;
    } else if (!action.forward && chain + 1 < passes) {
      neighbour = (chain + 1) % stages;
      needed.chunk = (chain + 1) / stages;
    }
    if (neighbour >= 0) ready = end(neighbour, schedule.position(neighbour, needed));
    const auto c = static_cast<std::size_t>(action.chunk);
    const auto s = static_cast<std::size_t>(stage);
    const double done =
        std::max(end(stage, index - 1), ready) + (action.forward ? forward[s][c] : backward[s][c]);
    ends[{stage, index}] = done;
    return done;
  };
  double step = 0.0;
  for (int64_t stage = 0; stage < stages; ++stage) {
    step = std::max(step, end(stage, schedule.length() - 1));
  }
  return step;
}

// What the layout planner asks for a pipeline's step: every stage's order played against the
// others with each pass at its own time. Even passes give the fill and drain of (P − 1)/V of a
// micro-batch; any passes, the step the orders give (against a recursion over them); past
// (V + 4)·P micro-batches, extrapolated, within 2 % of it (passes drawn at random: 0.5-3 s
// forward, backward 1.5-3.5 times that; even ones exactly).
TEST(PipelineSchedule, AWalkedStepIsTheOrdersPlayedAgainstEachOther) {
  for (int64_t stages : {2, 4}) {
    for (int64_t chunks : {1, 2}) {
      const int64_t micro = 2 * stages;
      const std::vector<std::vector<double>> forward(
          static_cast<std::size_t>(stages),
          std::vector<double>(static_cast<std::size_t>(chunks), 1.0 / chunks));
      const std::vector<std::vector<double>> backward(
          static_cast<std::size_t>(stages),
          std::vector<double>(static_cast<std::size_t>(chunks), 2.0 / chunks));
      EXPECT_NEAR(parallel::PipelineSchedule::walked_step_seconds(micro, forward, backward),
                  3.0 * (static_cast<double>(micro) + static_cast<double>(stages - 1) / chunks),
                  1e-9)
          << stages << " × " << chunks;
    }
  }
  std::mt19937 random(7);
  std::uniform_real_distribution<double> seconds(0.5, 3.0);
  std::uniform_real_distribution<double> backward_over_forward(1.5, 3.5);
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t stages = 2 + trial % 4;
    const int64_t chunks = 1 + (trial / 4) % 3;
    const int64_t micro = stages * (1 + trial % 7) * (trial % 5 == 0 ? 4 : 1);
    std::vector<std::vector<double>> forward(static_cast<std::size_t>(stages));
    std::vector<std::vector<double>> backward(static_cast<std::size_t>(stages));
    for (std::size_t stage = 0; stage < forward.size(); ++stage) {
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        forward[stage].push_back(seconds(random));
        backward[stage].push_back(forward[stage].back() * backward_over_forward(random));
      }
    }
    const double walked = parallel::PipelineSchedule::walked_step_seconds(micro, forward, backward);
    const double played =
        step_by_positions(parallel::PipelineSchedule(stages, chunks, micro), forward, backward);
    if (micro <= (chunks + 5) * stages) {
      EXPECT_NEAR(walked, played, 1e-9 * played) << stages << " × " << chunks << ", " << micro;
    } else {
      EXPECT_NEAR(walked / played, 1.0, 0.02) << stages << " × " << chunks << ", " << micro;
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
  // Too few blocks left for the ends: ⌊L/P⌋ each, the rest one more each in the middle.
  EXPECT_EQ(stage_block_bounds(7, 5), (std::vector<int64_t>{0, 1, 3, 4, 6, 7}));
  // 12 blocks in 8 chunks, PP 4 × V 2: three blocks on every stage.
  EXPECT_EQ(stage_block_bounds(12, 8), (std::vector<int64_t>{0, 1, 3, 4, 6, 8, 9, 11, 12}));
  const std::vector<int64_t> many = stage_block_bounds(105, 70);
  ASSERT_EQ(many.size(), 71u);
  EXPECT_EQ(many.back(), 105);
  for (std::size_t stage = 0; stage < 70; ++stage) {
    const int64_t blocks = many[stage + 1] - many[stage];
    EXPECT_TRUE(blocks == 1 || blocks == 2) << stage;
    if (stage == 0 || stage == 69) {
      EXPECT_EQ(blocks, 1) << stage;
    }
  }
  EXPECT_THROW(stage_block_bounds(2, 3), std::invalid_argument);
}

// tiny with enough blocks for three stages; heads 4 as the other multi-rank suites have them.
nlohmann::json stage_fields(const std::string& arch, int stages) {
  return with(tiny_fields(),
              {{"arch", arch}, {"layers", 3}, {"heads", 4}, {"pp", stages}, {"accum", 4}});
}

// --pp-split: blocks per chunk as given, read from the flag's text and from a record.
TEST(PipelineSchedule, ASplitGivenAsAListIsTheSplitRunAndRecorded) {
  EXPECT_EQ(chunk_block_bounds(4, 2, {}), stage_block_bounds(4, 2));
  EXPECT_EQ(chunk_block_bounds(4, 2, {3, 1}), (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(chunk_block_bounds(5, 4, {1, 2, 1, 1}), (std::vector<int64_t>{0, 1, 3, 4, 5}));
  EXPECT_THROW(chunk_block_bounds(4, 2, {2, 1}), std::invalid_argument);
  EXPECT_THROW(chunk_block_bounds(4, 2, {4}), std::invalid_argument);
  EXPECT_THROW(chunk_block_bounds(4, 2, {0, 4}), std::invalid_argument);
  EXPECT_THROW(chunk_block_bounds(4, 2, {5, -1}), std::invalid_argument);
  EXPECT_EQ(parse_pp_split("3,5"), (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(parse_pp_split("").empty());
  for (const char* text : {"3,,5", "3,", ",3", " 3", "+3", "0x3", "3.0", "0", "1234567890"}) {
    EXPECT_THROW(parse_pp_split(text), InvalidInput) << text;
  }
  RunConfig config = config_from(with(stage_fields("gpt", 2), {{"pp_split", "2,1"}}));
  EXPECT_EQ(config.pp_split, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(config.chunk_bounds(), (std::vector<int64_t>{0, 2, 3}));
  const nlohmann::json stored = to_json(config);
  EXPECT_EQ(stored.at("pp_split"), nlohmann::json({2, 1}));
  std::vector<std::string> unread;
  EXPECT_EQ(run_config_from_record(stored, &unread).pp_split, config.pp_split);
  EXPECT_TRUE(unread.empty());
  // A hand-edited list with one bad entry is unread whole, not cut short.
  nlohmann::json edited = stored;
  edited["pp_split"] = {2, "x"};
  EXPECT_TRUE(run_config_from_record(edited, &unread).pp_split.empty());
  EXPECT_EQ(unread, std::vector<std::string>{"pp_split"});
  // Without one, the record is as it was.
  config.pp_split.clear();
  EXPECT_FALSE(to_json(config).contains("pp_split"));
  EXPECT_EQ(config.chunk_bounds(), (std::vector<int64_t>{0, 1, 3}));
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

// `pipelines` data ranks train `pipelines` × batch rows a micro-batch: one process the same rows.
Reference one_process(const nlohmann::json& fields, bool steps, int64_t pipelines = 1) {
  RunConfig config = config_from(fields);
  config.batch *= pipelines;
  config.pp = 1;
  config.virtual_stages = 1;
  config.pp_split.clear();
  config.tp = 1;
  config.sequence_parallel = false;
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

// Every rank's values and tensors against `reference` (a tensor rank's against its part of it),
// each within `tolerance` of its tensor's largest element (0: bit for bit); every parameter must
// be held by some stage. After steps, the key part of a qkv bias only within 2·lr·steps
// (is_qkv_bias). Returns the largest relative difference seen.
double expect_stages_match(const ScratchDir& dir, const std::string& name,
                           const nlohmann::json& fields, int ranks, const Reference& reference,
                           double tolerance) {
  const RunConfig config = config_from(fields);
  const int tp = static_cast<int>(config.tp);
  std::vector<bool> held(reference.tensors.size(), false);
  // Without tensor ranks every rank holding a parameter holds all of it: its data ranks' copies
  // and a tied head's two stages' must agree bit for bit (each adds the same sums).
  std::map<std::size_t, std::pair<int, torch::Tensor>> first_copy;
  double largest = 0.0;
  for (int rank = 0; rank < ranks; ++rank) {
    const std::vector<torch::Tensor> parts =
        tp > 1 ? part_of_rank(fields, reference.tensors, rank % tp, tp) : reference.tensors;
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
      if (tp == 1) {
        const auto [copy, inserted] = first_copy.try_emplace(index, rank, mine);
        EXPECT_TRUE(inserted || torch::equal(copy->second.second, mine))
            << name << ": parameter " << index << " of rank " << rank << " differs from rank "
            << copy->second.first << "'s copy";
      }
      torch::Tensor expected = parts[index];
      if (tolerance > 0.0 && is_qkv_bias(fields, index)) {
        const int64_t first = config.model.d_model / tp;  // [query; key; value], this rank's
        const int64_t width = config.model.head_dim() * config.model.key_value_heads() / tp;
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
    // A quantised base's projections are empty everywhere: their codes are buffers.
    if (reference.tensors[index].numel() == 0) continue;
    EXPECT_TRUE(held[index]) << name << ": no stage holds parameter " << index;
  }
  std::cout << name << " over " << ranks << " ranks: largest relative difference " << largest
            << std::endl;
  return largest;
}

// The blocks whose parameters `rank` holds after case `name` (named "blockN_…" in the model).
std::set<int64_t> blocks_held(const ScratchDir& dir, const std::string& name,
                              const nlohmann::json& fields, int rank) {
  Transformer model(config_from(fields).model);
  const auto named = model->named_parameters();
  const std::vector<torch::Tensor> got = load(result_file(dir.path(), name, rank));
  std::set<int64_t> blocks;
  for (std::size_t at = 1; at + 1 < got.size(); at += 2) {
    const std::string& key = named[static_cast<std::size_t>(got[at].item<int64_t>())].key();
    if (key.rfind("block", 0) == 0) blocks.insert(std::stoll(key.substr(5)));
  }
  return blocks;
}

// Ten AdamW steps. Each stage forms its own parameters' gradients exactly as one process does
// (the same operations on the same values, accumulated over the micro-batches in the same
// order); what differs is the gradient norm (squares added per stage, then over stages) and,
// with a tied head, its weight's gradient (the head's and the embedding's parts summed apart,
// then together). Clipping carries the first into every parameter's last bits, and AdamW
// amplifies those in elements of small gradient. Measured: 1.5e-6 of a tensor's largest element
// (llama unclipped and untied: bit for bit); the tolerance leaves a factor 6.
constexpr double kStepsTolerance = 1e-5;
// Pipelines as data ranks average their gradients, (a + b)/2 where one process sums over twice
// the rows: AdamW amplifies that rounding in elements of small gradient. Measured: 2.4e-5 of a
// tensor's largest element (llama, interleaved), 2.1e-6 (gpt); as tensor parallelism's steps
// (test_tensor_parallel.cpp), 1e-4.
constexpr double kDataRanksTolerance = 1e-4;

TEST(Pipeline, TwoThreeAndFourStagesTrainTenStepsLikeOneProcessForBothFamilies) {
  // Keyed by name: the fields and how many ranks run them (stages × pipelines).
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
  // Fine-tuning: each stage trains its own blocks' adapters over the frozen base; a tied head's
  // frozen weight has no gradient for the end stages to add.
  cases["pp2_llama_lora"] = {
      with(stage_fields("llama", 2),
           {{"kv_heads", 2}, {"steps", 10}, {"grad_clip", 0}, {"finetune", "lora"}}),
      2};
  // Over an nf4 base: each stage keeps its own blocks' codes and scales, and releases the rest.
  cases["pp2_llama_lora_nf4"] = {with(stage_fields("llama", 2), {{"kv_heads", 2},
                                                                 {"steps", 10},
                                                                 {"grad_clip", 0},
                                                                 {"finetune", "lora"},
                                                                 {"base_precision", "nf4"}}),
                                 2};
  cases["pp2_dp2_gpt_lora_zero2"] = {
      with(stage_fields("gpt", 2), {{"steps", 10}, {"finetune", "lora"}, {"shard", "gradients"}}),
      4};
  // Four stages of one block each, the two in the middle passing both ways.
  cases["pp4_llama"] = {with(stage_fields("llama", 4),
                             {{"layers", 4}, {"kv_heads", 2}, {"steps", 10}, {"grad_clip", 0}}),
                        4};
  // Interleaved, two chunks a stage: the last stage's chunks send back to the first stage's.
  cases["pp2v2_gpt"] = {
      with(stage_fields("gpt", 2), {{"layers", 4}, {"virtual_stages", 2}, {"steps", 10}}), 2};
  cases["pp2v2_llama"] = {
      with(
          stage_fields("llama", 2),
          {{"layers", 4}, {"virtual_stages", 2}, {"kv_heads", 2}, {"steps", 10}, {"grad_clip", 0}}),
      2};
  // Splits given as lists: the first stage the larger (the rule gives it the smaller), and
  // interleaved chunks of unequal size.
  cases["pp2_llama_split21"] = {
      with(stage_fields("llama", 2),
           {{"kv_heads", 2}, {"steps", 10}, {"grad_clip", 0}, {"pp_split", {2, 1}}}),
      2};
  cases["pp2v2_gpt_split1211"] = {
      with(stage_fields("gpt", 2),
           {{"layers", 5}, {"virtual_stages", 2}, {"steps", 10}, {"pp_split", {1, 2, 1, 1}}}),
      2};
  // Three stages of two chunks, as many micro-batches as stages: every forward before any
  // backward on the first.
  cases["pp3v2_gpt"] = {with(stage_fields("gpt", 3),
                             {{"layers", 6}, {"virtual_stages", 2}, {"accum", 3}, {"steps", 10}}),
                        3};
  cases["pp3v2_llama"] = {with(stage_fields("llama", 3), {{"layers", 6},
                                                          {"virtual_stages", 2},
                                                          {"accum", 6},
                                                          {"kv_heads", 2},
                                                          {"steps", 10},
                                                          {"grad_clip", 0}}),
                          3};
  // Two pipelines of two stages on four ranks, each pipeline a data rank: a 1F1B pair, and an
  // interleaved one.
  cases["pp2_dp2_gpt"] = {with(stage_fields("gpt", 2), {{"steps", 10}}), 4};
  cases["pp2_dp2_llama_v2"] = {
      with(
          stage_fields("llama", 2),
          {{"layers", 4}, {"virtual_stages", 2}, {"kv_heads", 2}, {"steps", 10}, {"grad_clip", 0}}),
      4};
  // The same pipelines with their stages' optimizer states sharded over the data ranks, and
  // (llama, whose head is its own) their gradients too: the norm adds every stage's shards, the
  // tied head's once.
  cases["pp2_dp2_gpt_zero1"] = {
      with(stage_fields("gpt", 2), {{"steps", 10}, {"shard", "optimizer"}}), 4};
  cases["pp2_dp2_llama_v2_zero2"] = {with(stage_fields("llama", 2), {{"layers", 4},
                                                                     {"virtual_stages", 2},
                                                                     {"kv_heads", 2},
                                                                     {"steps", 10},
                                                                     {"shard", "gradients"}}),
                                     4};
  // A tied head's gradients sharded too: the end stages add their data ranks' shards of it,
  // which cover the same elements (a bucket of its own, in buckets that would otherwise hold the
  // whole stage), one chunk a stage and two.
  cases["pp2_dp2_gpt_zero2"] = {
      with(stage_fields("gpt", 2),
           {{"steps", 10}, {"shard", "gradients"}, {"bucket_bytes", int64_t{1} << 20}}),
      4};
  cases["pp2_dp2_gpt_v2_zero2"] = {
      with(stage_fields("gpt", 2), {{"layers", 4},
                                    {"virtual_stages", 2},
                                    {"steps", 10},
                                    {"shard", "gradients"},
                                    {"bucket_bytes", int64_t{1} << 20}}),
      4};
  // One chunk a stage: each micro-batch's gradients reduced into the shards as it ends.
  cases["pp2_dp2_llama_zero2"] = {
      with(stage_fields("llama", 2), {{"kv_heads", 2}, {"steps", 10}, {"shard", "gradients"}}), 4};
  // Two stages of two tensor ranks each: the residual stream passed whole, and (gpt) sliced by
  // sequence parallelism, each tensor rank to its counterpart.
  cases["pp2_tp2_llama"] = {with(stage_fields("llama", 2), {{"tp", 2},
                                                            {"layers", 4},
                                                            {"virtual_stages", 2},
                                                            {"kv_heads", 2},
                                                            {"steps", 10},
                                                            {"grad_clip", 0}}),
                            4};
  cases["pp2_tp2_sp_gpt"] = {
      with(stage_fields("gpt", 2), {{"tp", 2}, {"sequence_parallel", true}, {"steps", 10}}), 4};
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
      // Llama here is unclipped with a head of its own: nothing is summed apart, bit for bit;
      // but pipelines average their gradients, which one process does not.
      const int64_t pipelines =
          stages / item.first.at("pp").get<int64_t>() / item.first.value("tp", int64_t{1});
      // Tensor ranks add a split layer's products in another order: as data ranks, 1e-4.
      const bool alone = pipelines == 1 && !item.first.contains("tp");
      const bool exact = name.find("llama") != std::string::npos && alone;
      expect_stages_match(dir, name, item.first, stages, one_process(item.first, true, pipelines),
                          exact   ? 0.0
                          : alone ? kStepsTolerance
                                  : kDataRanksTolerance);
    }
    if (stages == 2) {
      // A split given is the split run: each stage holds the blocks it names.
      EXPECT_EQ(blocks_held(dir, "pp2_llama_split21", cases["pp2_llama_split21"].first, 0),
                (std::set<int64_t>{0, 1}));
      EXPECT_EQ(blocks_held(dir, "pp2_llama_split21", cases["pp2_llama_split21"].first, 1),
                (std::set<int64_t>{2}));
      // Chunks 1, 2, 1, 1 in chain order: stage 0 runs chunks 0 and 2, stage 1 chunks 1 and 3.
      const nlohmann::json& interleaved = cases["pp2v2_gpt_split1211"].first;
      EXPECT_EQ(blocks_held(dir, "pp2v2_gpt_split1211", interleaved, 0), (std::set<int64_t>{0, 3}));
      EXPECT_EQ(blocks_held(dir, "pp2v2_gpt_split1211", interleaved, 1),
                (std::set<int64_t>{1, 2, 4}));
    }
  }
}

// The three layouts together on eight ranks: two pipelines (data ranks) of two stages of two
// tensor ranks each, a stage's data ranks averaging their buckets while its last backwards run.
TEST(Pipeline, TwoStagesOfTwoTensorRanksAsTwoDataRanksTrainLikeOneProcessOnEightRanks) {
  const std::map<std::string, nlohmann::json> cases = {
      {"pp2_tp2_dp2_llama", with(stage_fields("llama", 2),
                                 {{"tp", 2}, {"kv_heads", 2}, {"steps", 10}, {"grad_clip", 0}})},
      // Sharded optimizer states beside tensor ranks: a split tied head counted on the first
      // stage only, every stage's shards in the norm.
      {"pp2_tp2_dp2_gpt_zero1",
       with(stage_fields("gpt", 2), {{"tp", 2}, {"steps", 10}, {"shard", "optimizer"}})},
      // The same with the gradients sharded, the tied head's shards added between the end
      // stages' tensor parts, in buckets that would otherwise hold the whole stage.
      {"pp2_tp2_dp2_gpt_zero2",
       with(
           stage_fields("gpt", 2),
           {{"tp", 2}, {"steps", 10}, {"shard", "gradients"}, {"bucket_bytes", int64_t{1} << 20}})},
      // And the gradients sharded too, clipped, beside tensor ranks under sequence parallelism.
      {"pp2_tp2_sp_dp2_llama_zero2", with(stage_fields("llama", 2), {{"tp", 2},
                                                                     {"sequence_parallel", true},
                                                                     {"kv_heads", 2},
                                                                     {"steps", 10},
                                                                     {"shard", "gradients"}})},
      {"pp2_tp2_sp_dp2_gpt_v2", with(stage_fields("gpt", 2), {{"tp", 2},
                                                              {"sequence_parallel", true},
                                                              {"layers", 4},
                                                              {"virtual_stages", 2},
                                                              {"steps", 10}})},
  };
  ScratchDir dir("pp-tp-dp");
  nlohmann::json spec = {{"output", dir.path()}, {"cases", nlohmann::json::array()}};
  for (const auto& [name, fields] : cases) {
    spec["cases"].push_back(case_of(name, "pipeline_steps", fields));
  }
  run_workers(spec, 8, dir);
  if (HasFatalFailure()) return;
  for (const auto& [name, fields] : cases) {
    expect_stages_match(dir, name, fields, 8, one_process(fields, true, 2), kDataRanksTolerance);
  }
}

// `run ARGS --json`'s figures of each rank, by rank (none where it failed, which it says).
std::map<int64_t, nlohmann::json> ranks_of_run(const std::string& args) {
  const testing::CliResult ran = testing::cli("run " + args + " --json");
  EXPECT_EQ(ran.exit_code, 0) << args << ": " << ran.err;
  std::map<int64_t, nlohmann::json> by_rank;
  if (ran.exit_code != 0) return by_rank;
  const nlohmann::json summary = testing::last_line_json(ran.out);  // kept: the loop reads it
  for (const nlohmann::json& rank : summary.at("ranks"))
    by_rank[rank.at("rank").get<int64_t>()] = rank;
  return by_rank;
}

// What each rank of a sharded pipeline holds between steps: its stage's weights whole, and of
// the AdamW moments (ZeRO 1) and the gradients too (ZeRO 2) its data rank's share, on three
// stages (a middle one holding neither the embedding nor the head). In small buckets, so that
// ZeRO 2's whole gradients go as each backward forms them.
TEST(Pipeline, ShardedStagesHoldTheirDataRanksShareOfTheirStates) {
  auto ranks_of = [](const std::string& shard) {
    return ranks_of_run(
        "--preset tiny --arch llama --layers 3 --batch 2 --threads 1 --steps 1 --nproc 6 --pp 3 "
        "--accum 3 --bucket-size 4KiB --shard " +
        shard);
  };
  const auto whole = ranks_of("none");
  const auto optimizer = ranks_of("optimizer");
  const auto gradients = ranks_of("gradients");
  ASSERT_EQ(whole.size(), 6u);
  ASSERT_EQ(optimizer.size(), 6u);
  ASSERT_EQ(gradients.size(), 6u);
  for (int64_t rank = 0; rank < 6; ++rank) {
    auto bytes = [rank](const std::map<int64_t, nlohmann::json>& ranks, const char* field) {
      return static_cast<double>(ranks.at(rank).at(field).get<int64_t>());
    };
    // Each bucket is padded to a multiple of the two data ranks: a value at most each.
    const double slack = 1024.0;
    EXPECT_NEAR(bytes(optimizer, "param_bytes"), bytes(whole, "param_bytes"), slack) << rank;
    EXPECT_NEAR(bytes(optimizer, "optimizer_bytes"), bytes(whole, "optimizer_bytes") / 2, slack)
        << rank;
    EXPECT_NEAR(bytes(optimizer, "grad_bytes"), bytes(whole, "grad_bytes"), slack) << rank;
    EXPECT_NEAR(bytes(gradients, "optimizer_bytes"), bytes(whole, "optimizer_bytes") / 2, slack)
        << rank;
    EXPECT_NEAR(bytes(gradients, "grad_bytes"), bytes(whole, "grad_bytes") / 2, slack) << rank;
    // Each backward's gradients reduced into the shards as it forms them: no stage holds them
    // whole while its micro-batches accumulate, so its peak lies below ZeRO 1's; the last stage's
    // (one micro-batch in flight, each backward before the next forward) by all they differ by.
    const double states_apart = bytes(optimizer, "grad_bytes") - bytes(gradients, "grad_bytes");
    const double below = bytes(optimizer, "peak_bytes") - bytes(gradients, "peak_bytes");
    EXPECT_GT(below, 0.0) << rank;
    if (rank >= 4) {
      EXPECT_GE(below, 0.9 * states_apart) << rank;
    }
  }
}

// Fine-tuning over an nf4 base: each stage holds its own blocks' codes and scales (and the
// embedding or the untied head), so the stages' frozen base is one data rank's whole, and the
// stage figures are measured, not the whole model's counted on each.
TEST(Pipeline, StagesOfAQuantisedBaseHoldTheirOwnBlocksOfIt) {
  auto ranks_of = [](const std::string& layout) {
    return ranks_of_run(
        "--preset tiny --arch llama --layers 4 --batch 2 --threads 1 --steps 1 --accum 2 "
        "--finetune lora --base-precision nf4 --nproc 2 " +
        layout);
  };
  const auto data_ranks = ranks_of("");
  const auto stages = ranks_of("--pp 2");
  ASSERT_EQ(data_ranks.size(), 2u);
  ASSERT_EQ(stages.size(), 2u);
  auto held = [](const std::map<int64_t, nlohmann::json>& ranks, int64_t rank) {
    return ranks.at(rank).at("param_bytes").get<int64_t>() +
           ranks.at(rank).at("grad_bytes").get<int64_t>();
  };
  EXPECT_EQ(held(stages, 0) + held(stages, 1), held(data_ranks, 0));
  for (int64_t rank = 0; rank < 2; ++rank) {
    EXPECT_LT(held(stages, rank), held(data_ranks, 0) * 6 / 10) << rank;
    // What the allocator held as the step began is those states (and a few KiB beside): no
    // other stage's codes kept alive elsewhere.
    const int64_t baseline = stages.at(rank).at("baseline_bytes").get<int64_t>();
    EXPECT_GE(baseline, held(stages, rank)) << rank;
    EXPECT_LE(baseline, held(stages, rank) + 16 * 1024) << rank;
  }
}

// Interleaved stages under ZeRO 2 in small buckets: each chunk's backward sends its buckets as
// they complete and lets the oldest go once two later ones are out, so a stage holds a few
// buckets whole at once (its embedding's or head's the largest), not a chunk's gradients, which
// it held while its buckets waited in index order behind the other chunk's (0.57 and 0.43 of the
// stage's gradients).
TEST(Pipeline, InterleavedShardedStagesLetGradientsGoDuringEachChunksBackward) {
  auto ranks_of = [](const std::string& shard, const std::string& bucket) {
    return ranks_of_run(
        "--preset tiny --arch llama --layers 4 --batch 2 --threads 1 --steps 1 --nproc 4 --pp 2 "
        "--virtual-stages 2 --accum 2 --bucket-size " +
        bucket + " --shard " + shard);
  };
  const auto optimizer = ranks_of("optimizer", "4KiB");
  const auto gradients = ranks_of("gradients", "4KiB");
  // Buckets that could hold a whole stage hold one chunk's gradients each: no bucket goes out in
  // both chunks' backwards, whole in each (as one spanning both did).
  const auto large_buckets = ranks_of("gradients", "25MiB");
  ASSERT_EQ(optimizer.size(), 4u);
  ASSERT_EQ(gradients.size(), 4u);
  ASSERT_EQ(large_buckets.size(), 4u);
  for (const auto& [index, rank] : gradients) {
    ASSERT_EQ(optimizer.count(index), 1u) << index;
    const nlohmann::json& whole = optimizer.at(index);
    const double stage_gradients = whole.at("grad_bytes").get<double>();
    EXPECT_LT(rank.at("buffer_peak_bytes").get<double>(), 0.35 * stage_gradients) << index;
    EXPECT_LT(rank.at("peak_bytes").get<int64_t>(), whole.at("peak_bytes").get<int64_t>()) << index;
    EXPECT_LT(large_buckets.at(index).at("buffer_peak_bytes").get<double>(), 0.75 * stage_gradients)
        << index;
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
  // Interleaved, two chunks of two blocks a stage: the plan's segments cut at every chunk's edges.
  const std::vector<std::string> interleaved = {"every:1", "every:3", "selective",
                                                "stages:every:1/none/sublayer:1,1/every:1"};
  std::map<std::string, nlohmann::json> cases;
  for (const char* arch : {"gpt", "llama"}) {
    for (const std::string& policy : policies) {
      cases[case_name(arch, policy)] =
          with(stage_fields(arch, 2), {{"checkpoint", policy}, {"tie_head", false}});
    }
    for (const std::string& policy : interleaved) {
      cases[case_name(arch, "v2_" + policy)] =
          with(stage_fields(arch, 2),
               {{"checkpoint", policy}, {"tie_head", false}, {"layers", 4}, {"virtual_stages", 2}});
    }
    cases[case_name(arch, "v2_none")] =
        with(stage_fields(arch, 2), {{"tie_head", false}, {"layers", 4}, {"virtual_stages", 2}});
    // A split given as a list, each stage's policy naming its own blocks: two on the first.
    cases[case_name(arch, "split21_stages:segments:a1-m1/every:1")] =
        with(stage_fields(arch, 2), {{"checkpoint", "stages:segments:a1-m1/every:1"},
                                     {"tie_head", false},
                                     {"pp_split", {2, 1}}});
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
    const Reference four_blocks = one_process(cases.at(case_name(arch, "v2_none")), false);
    for (const std::string& policy : interleaved) {
      const std::string name = case_name(arch, "v2_" + policy);
      expect_stages_match(dir, name, cases.at(name), 2, four_blocks, 0.0);
    }
    const std::string none_v2 = case_name(arch, "v2_none");
    expect_stages_match(dir, none_v2, cases.at(none_v2), 2, four_blocks, 0.0);
    const std::string split = case_name(arch, "split21_stages:segments:a1-m1/every:1");
    expect_stages_match(dir, split, cases.at(split), 2, none, 0.0);
    EXPECT_EQ(blocks_held(dir, split, cases.at(split), 0), (std::set<int64_t>{0, 1})) << arch;
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
      {"--nproc 3 --pp 2 --accum 2",
       "--pp: 2 stages need --nproc 2 or a multiple of it (one pipeline a data rank)"},
      {"--nproc 6 --tp 2 --pp 2 --accum 2",
       "--pp: 2 stages of 2 tensor ranks need --nproc 4 or a multiple of it"},
      {"--pp 2 --accum 2", "--pp: 2 stages need --nproc 2 or a multiple of it"},
      {"--nproc 2 --pp 0", "--pp: must be between 1 and 4096, got 0"},
      {"--nproc 4 --pp 2 --accum 2 --shard parameters",
       "--shard: sharding parameters is not built for pipeline stages yet"},
      {"--nproc 2 --pp 2 --accum 2 --checkpoint stages:none/none/every:1",
       "--checkpoint: 'stages:none/none/every:1' gives 3 stages' policies for 2 pipeline stages"},
      {"--nproc 2 --pp 2 --accum 2 --virtual-stages 2 --checkpoint stages:none/every:1",
       "--checkpoint: 'stages:none/every:1' gives 2 stages' policies for 4 model chunks (2 "
       "stages of 2)"},
      {"--virtual-stages 2",
       "--virtual-stages: model chunks per stage need a pipeline: give --pp 2 or more"},
      {"--nproc 2 --pp 2 --accum 2 --virtual-stages 3",
       "--virtual-stages: 2 stages of 3 chunks for 4 blocks: every chunk needs one block at "
       "least"},
      {"--nproc 2 --pp 2 --accum 3 --virtual-stages 2",
       "--accum: 3 micro-batches: the interleaved schedule runs them in rounds of the 2 stages "
       "(give a multiple of 2)"},
      {"--nproc 2 --pp 2 --accum 2 --virtual-stages 0",
       "--virtual-stages: must be between 1 and the model's 4 blocks, got 0"},
      {"--nproc 2 --pp 2 --accum 2 --pp-split 1,2",
       "--pp-split: gives 3 blocks in all; the model has 4"},
      {"--nproc 2 --pp 2 --accum 2 --pp-split 4",
       "--pp-split: gives 1 block counts for 2 pipeline stages: give one for each"},
      {"--nproc 2 --pp 2 --accum 2 --virtual-stages 2 --pp-split 1,3",
       "--pp-split: gives 2 block counts for 4 model chunks (2 stages of 2): give one for each"},
      {"--nproc 2 --pp 2 --accum 2 --pp-split 0,4",
       "--pp-split: '0,4' is not a list of block counts, one for each chunk (e.g. 3,5)"},
      {"--nproc 2 --pp 2 --accum 2 --pp-split 2,-2",
       "--pp-split: '2,-2' is not a list of block counts"},
      {"--pp-split 2,2", "--pp-split: splits the blocks between pipeline stages: give --pp 2"},
      // A stage's policy names its own blocks as the split gives them: one block has no a1.
      {"--nproc 2 --pp 2 --accum 2 --pp-split 1,3 --checkpoint stages:segments:a1/none",
       "--checkpoint: 'stages:segments:a1/none': stage 0 (1 block, named from a0)"},
  };
  for (const auto& [flags, message] : refused) {
    const testing::CliResult result = testing::cli(
        "run --preset tiny --layers 4 --batch 2 --threads 1 --steps 1 --db " + db + " " + flags);
    EXPECT_EQ(result.exit_code, 2) << flags << ": " << result.err;
    EXPECT_NE(result.err.find(message), std::string::npos) << flags << ": " << result.err;
    EXPECT_EQ(testing::count_lines(result.err), 1) << flags << ": " << result.err;
    EXPECT_FALSE(files::exists(db)) << flags;
  }
  // A message's tag numbers its micro-batch and chunk in an int: 2^29 of them at most.
  const testing::CliResult tags = testing::cli(
      "run --preset tiny --layers 2048 --batch 2 --steps 1 --nproc 2 --pp 2 --virtual-stages 1024 "
      "--accum 1000000 --db " +
      db);
  EXPECT_EQ(tags.exit_code, 2) << tags.err;
  EXPECT_NE(tags.err.find("--accum: 1000000 micro-batches through 2048 chunks are more than a "
                          "pipeline's messages can number (at most 262143)"),
            std::string::npos)
      << tags.err;
  EXPECT_FALSE(files::exists(db));
}

// plan:BUDGET in a pipeline: each stage planned for the micro-batches it holds (the first two,
// the last one), from the chain measured on both ranks; each stage's measured activation peak
// within 5 % of its prediction and the budget.
TEST(Pipeline, APlanUnderABudgetChoosesEachStagesPolicyAndEveryStageFitsIt) {
  ScratchDir dir("pp-plan");
  const std::string db = dir.file("runs.sqlite");
  const std::string run =
      "run --preset tiny --layers 4 --batch 2 --accum 4 --threads 1 --steps 2 --nproc 2 --pp 2 "
      "--checkpoint ";
  const nlohmann::json too_small =
      testing::last_line_json(testing::cli(run + "plan:1KiB --json").out);
  EXPECT_EQ(too_small.at("status"), "oom");
  const int64_t smallest = too_small.at("plan").at("smallest_feasible_bytes").get<int64_t>();
  const nlohmann::json none = testing::last_line_json(testing::cli(run + "none --json").out);
  int64_t none_peak = 0;
  for (const nlohmann::json& rank : none.at("ranks")) {
    none_peak = std::max(none_peak, rank.at("peak_activation_bytes").get<int64_t>());
  }
  ASSERT_GT(none_peak, smallest);
  const int64_t budget = (smallest + none_peak) / 2;
  // As a user runs it: the text names the plan and each rank's stage; the record keeps both.
  const testing::CliResult text =
      testing::cli(run + "plan:" + std::to_string(budget) + " --db " + db);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const testing::CliResult shown = testing::cli("show 1 --json --db " + db);
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  const nlohmann::json record = testing::last_line_json(shown.out);
  ASSERT_EQ(record.at("status"), "ok") << record.dump();
  const nlohmann::json& plan = record.at("request").at("plan");
  const std::string chosen = plan.at("chosen").get<std::string>();
  EXPECT_EQ(record.at("config").at("checkpoint"), chosen);
  EXPECT_NE(text.out.find("plan             " + chosen + " under "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("rank  stage  activations"), std::string::npos) << text.out;
  const CheckpointPolicy policy = CheckpointPolicy::parse(chosen);
  ASSERT_EQ(policy.stages().size(), 2u) << chosen;
  // Under the budget the first stage, holding two micro-batches, recomputes; the last need not.
  EXPECT_FALSE(policy.stages()[0].is_none()) << chosen;
  const auto predicted = plan.at("predicted_stage_peak_bytes").get<std::vector<int64_t>>();
  ASSERT_EQ(predicted.size(), 2u);
  const nlohmann::json& ranks = record.at("result").at("ranks");
  ASSERT_EQ(ranks.size(), 2u);
  for (const nlohmann::json& rank : ranks) {
    const auto stage = static_cast<std::size_t>(rank.at("rank").get<int>());
    const auto measured = static_cast<double>(rank.at("peak_activation_bytes").get<int64_t>());
    EXPECT_LE(predicted[stage], budget) << chosen;
    EXPECT_NEAR(measured / static_cast<double>(predicted[stage]), 1.0, 0.05)
        << chosen << ", stage " << stage;
  }
}

// The notice before each tensor splits a receiver's wait: a sender that comes 300 ms late is
// 300 ms of bubble, and the 16 MiB that then pass are its transfer, not bubble.
TEST(Pipeline, AReceiversWaitForALateSenderIsBubbleAndThePassageTransfer) {
  ScratchDir dir("pp-notice");
  const nlohmann::json spec = {{"output", dir.path()},
                               {"cases",
                                {{{"name", "late"},
                                  {"mode", "pipeline_notice"},
                                  {"delay_ms", 300},
                                  {"elements", 4 << 20}}}}};
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  const std::vector<torch::Tensor> receiver = load(result_file(dir.path(), "late", 1));
  ASSERT_EQ(receiver.size(), 1u);
  const double bubble = receiver[0][0].item<double>();
  const double transfer = receiver[0][1].item<double>();
  EXPECT_GE(bubble, 250.0);  // the sleep, less the first exchange's own skew between the two
  EXPECT_LT(bubble, 2000.0);
  EXPECT_GT(transfer, 0.0);  // 16 MiB take some time to pass, after the notice
  EXPECT_LT(transfer, 250.0);
  EXPECT_DOUBLE_EQ(receiver[0][2].item<double>(), bubble + transfer);
  // The sender, which came last, waited only for the bytes to be taken, not for a neighbour.
  const std::vector<torch::Tensor> sender = load(result_file(dir.path(), "late", 0));
  EXPECT_LT(sender[0][0].item<double>(), 250.0);
}

// What shapes a stage's buckets (its model chunks, the tied head's bucket of its own) is given
// before attach lays them out; given after, it would be ignored: a logic error, on both stages.
TEST(Pipeline, ChunksAndATiedHeadGivenAfterAttachAreRefused) {
  ScratchDir dir("pp-late-wiring");
  const nlohmann::json spec = {{"output", dir.path()},
                               {"cases", {{{"name", "late"}, {"mode", "pipeline_late_wiring"}}}}};
  run_workers(spec, 2, dir);
  if (HasFatalFailure()) return;
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<torch::Tensor> outcome = load(result_file(dir.path(), "late", rank));
    ASSERT_EQ(outcome.size(), 1u);
    EXPECT_TRUE(torch::equal(outcome[0], torch::ones({4}, torch::kFloat64)))
        << "rank " << rank << ": " << outcome[0];
  }
}

// Each stage's wait on its neighbours, split: idle until a neighbour reached a message (the
// bubble) and blocked while one passed (the transfers), both within what the stage waited; with
// two pipelines as data ranks, their gradient average counted beside them, not overwritten.
TEST(Pipeline, EachRanksWaitSplitsIntoItsBubbleAndTransfersBesideItsDataRanksAverage) {
  ScratchDir dir("pp-waits");
  const std::string db = dir.file("runs.sqlite");
  const testing::CliResult run = testing::cli(
      "run --preset tiny --layers 4 --batch 2 --accum 4 --threads 1 --steps 3 --nproc 4 --pp 2 "
      "--json --db " +
      db);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json result = testing::last_line_json(run.out);
  ASSERT_EQ(result.at("ranks").size(), 4u);
  for (const nlohmann::json& rank : result.at("ranks")) {
    // Every stage idles: the first while the last runs its backwards, the last while the
    // first fills the pipeline, and all where they meet at the gradient norm.
    EXPECT_GT(rank.at("bubble_ms").get<double>(), 0.0) << rank.dump();
    EXPECT_GE(rank.at("transfer_ms").get<double>(), 0.0) << rank.dump();
  }
  {
    RunStore store(db, StoreAccess::kReadOnly);
    const std::vector<StepMetrics> steps = store.steps(1);
    ASSERT_EQ(steps.size(), 3u);
    for (const StepMetrics& step : steps) {
      const double neighbours = step.bubble_ms + step.transfer_ms;
      EXPECT_GT(step.bubble_ms, 0.0) << "step " << step.step;
      EXPECT_GE(step.comm_wait_ms, neighbours - 1e-9) << "step " << step.step;
      // The data ranks' average was in flight besides: more than the waits on the neighbours.
      EXPECT_GT(step.comm_ms, neighbours) << "step " << step.step;
      EXPECT_GE(step.comm_ms, step.comm_wait_ms - 1e-9) << "step " << step.step;
    }
    EXPECT_GT(store.run(1).result.bubble_ms, 0.0);
  }
  // A pipeline recorded before its waits were split (its summary without them) reads them as
  // unknown, run and ranks.
  {
    Database edit(db, Database::Mode::kReadWrite);
    edit.exec(
        "UPDATE runs SET summary = json_remove(summary, '$.bubble_ms', '$.transfer_ms', "
        "'$.ranks[0].bubble_ms', '$.ranks[0].transfer_ms')");
  }
  RunStore store(db, StoreAccess::kReadOnly);
  const RunRecord older = store.run(1);
  EXPECT_TRUE(std::isnan(older.result.bubble_ms));
  EXPECT_TRUE(std::isnan(older.result.transfer_ms));
  for (const RankResult& rank : older.result.ranks) EXPECT_TRUE(std::isnan(rank.bubble_ms));
}

// An interleaved run as a user starts it: its chunks in the record, the run list and the report.
TEST(Pipeline, AnInterleavedRunIsRecordedWithItsVirtualStages) {
  ScratchDir dir("pp-recorded");
  const std::string db = dir.file("runs.sqlite");
  const testing::CliResult run = testing::cli(
      "run --preset tiny --layers 4 --batch 2 --threads 1 --steps 2 --nproc 2 --pp 2 "
      "--virtual-stages 2 --accum 2 --json --db " +
      db);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json result = testing::last_line_json(run.out);
  EXPECT_EQ(result.at("pp"), 2);
  EXPECT_EQ(result.at("virtual_stages"), 2);
  const testing::CliResult shown = testing::cli("show 1 --json --db " + db);
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("\"virtual_stages\":2"), std::string::npos) << shown.out;
  const testing::CliResult listed = testing::cli("runs --db " + db);
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("pp2×2"), std::string::npos) << listed.out;
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
