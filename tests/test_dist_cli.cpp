// `rematlab-cli run` across processes, on the real binary: --nproc launches and records every
// rank's figures; a rank killed or hung mid-run fails the run naming it, within the timeout,
// leaving no process and an intact database; a port in use, a missing peer and ranks started
// with different flags are one clear line each. A sweep spread over workers (--workers, or ranks
// started as torchrun and Slurm start them) lands every point once in the one database, and a
// worker killed mid-sweep fails its point while the others are recorded.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "child_process.h"
#include "cli_runner.h"
#include "common/posix_files.h"
#include "run/run_summary.h"
#include "scratch_dir.h"
#include "store/run_store.h"

namespace rematlab {
namespace {

using testing::ChildProcess;
using testing::cli;
using testing::cli_through;
using testing::count_lines;
using testing::kTiny;
using testing::last_line_json;
using testing::slurp;
using Clock = std::chrono::steady_clock;

using testing::free_port;
using testing::ScratchDir;
using testing::wait_until;

// These waits read /proc and a growing stderr file while ranks train: not too often.
constexpr std::chrono::milliseconds kPoll{50};

std::string shell_rank_env(int rank, int world, int port) {
  return "env RANK=" + std::to_string(rank) + " WORLD_SIZE=" + std::to_string(world) +
         " MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port);
}

std::vector<std::string> split(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// The processes whose parent is `parent`, with the RANK their environment gives them.
std::map<int, pid_t> ranks_of(pid_t parent) {
  std::map<int, pid_t> ranks;
  for (const pid_t pid : testing::children_of(parent)) {
    std::ifstream environ("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
    for (std::string entry; std::getline(environ, entry, '\0');) {
      if (entry.rfind("RANK=", 0) == 0) ranks[std::stoi(entry.substr(5))] = pid;
    }
  }
  return ranks;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

// The launcher's ranks once rank 0 has trained 3 steps; empty if the launcher ended first or
// that took more than two minutes.
std::map<int, pid_t> ranks_training(ChildProcess& launcher, std::size_t count,
                                    const std::string& err) {
  std::map<int, pid_t> ranks;
  const bool training = wait_until(
      [&] {
        if (launcher.wait_for(std::chrono::milliseconds(0))) return true;
        ranks = ranks_of(launcher.pid());
        return ranks.size() == count && slurp(err).find("[rank 0] step 3/") != std::string::npos;
      },
      std::chrono::seconds(120), kPoll);
  if (!training || launcher.wait_for(std::chrono::milliseconds(0))) return {};
  return ranks;
}

TEST(DistCli, TwoLocalRanksReportAndRecordEveryRanksFigures) {
  ScratchDir dir("distcli-two");
  const std::string db = dir.file("runs.sqlite");
  const auto result = cli("run " + std::string(kTiny) +
                          " --nproc 2 --steps 4 --checkpoint every:1 --shard optimizer "
                          "--bucket-size 4KiB --json --db " +
                          db);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(count_lines(result.out), 1) << "one result, rank 0's: " << result.out;
  EXPECT_NE(result.err.find("[rank 1] step 4/4"), std::string::npos) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  EXPECT_EQ(json["status"], "ok");
  EXPECT_EQ(json["world_size"], 2);
  EXPECT_EQ(json["shard"], "optimizer");
  ASSERT_EQ(json["ranks"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json& figures = json["ranks"][rank];
    EXPECT_EQ(figures["rank"], rank);
    EXPECT_GT(figures["peak_bytes"].get<int64_t>(), 0);
    EXPECT_GT(figures["optimizer_bytes"].get<int64_t>(), 0);
    EXPECT_GT(figures["step_ms"].get<double>(), 0.0);
    EXPECT_EQ(figures["step_peak_bytes"].size(), 4u);
    // Several buckets go out while backward still runs: some communication is hidden.
    EXPECT_GT(figures["comm_ms"].get<double>(), 0.0);
    EXPECT_GT(figures["comm_hidden_ms"].get<double>(), 0.0);
    EXPECT_LE(figures["comm_hidden_ms"].get<double>(), figures["comm_ms"].get<double>());
  }
  EXPECT_NE(json["ranks"][0]["pid"], json["ranks"][1]["pid"]);

  RunStore store(db, StoreAccess::kReadOnly, false);
  const std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, RunStatus::kOk);
  EXPECT_EQ(runs[0].config.world_size, 2);
  EXPECT_EQ(runs[0].config.shard, "optimizer");
  ASSERT_EQ(runs[0].result.ranks.size(), 2u);
  EXPECT_EQ(runs[0].result.ranks[1].peak_bytes, json["ranks"][1]["peak_bytes"].get<int64_t>());
  EXPECT_EQ(runs[0].result.ranks[1].optimizer_bytes,
            json["ranks"][1]["optimizer_bytes"].get<int64_t>());
  EXPECT_EQ(runs[0].result.ranks[1].buffer_peak_bytes,
            json["ranks"][1]["buffer_peak_bytes"].get<int64_t>());
  EXPECT_EQ(store.steps(runs[0].id).size(), 4u);
}

// Under --shard gradients a bucket's whole gradients exist from its first gradient until its
// reduction is waited for, which happens once two later buckets are on the wire: the most held
// at once is a few buckets, not the whole model's gradients (until every bucket was reduced at
// the end of backward, it was all of them).
TEST(DistCli, ShardedGradientsHoldAFewWholeBucketsAtOnceNotTheModels) {
  ScratchDir dir("distcli-buffers");
  const std::string db = dir.file("runs.sqlite");
  const auto result =
      cli("run " + std::string(kTiny) +
          " --nproc 2 --steps 2 --shard gradients --bucket-size 4KiB --json --db " + db);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  const int64_t whole = 4 * json["params"].get<int64_t>();
  RunStore store(db, StoreAccess::kReadOnly, false);
  const RunRecord record = store.run(json["run_id"].get<int64_t>());
  ASSERT_EQ(record.result.ranks.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const int64_t buffers = json["ranks"][rank]["buffer_peak_bytes"].get<int64_t>();
    EXPECT_GE(buffers, 4096) << json["ranks"][rank].dump();  // a bucket at least
    EXPECT_LE(buffers, whole / 2) << json["ranks"][rank].dump();
    EXPECT_EQ(record.result.ranks[rank].buffer_peak_bytes, buffers);  // kept as reported
  }
}

// Two groups of two expert ranks: each rank's all-to-all is measured, every step, and lies
// within what it waited on; each step records its experts' load.
TEST(DistCli, ExpertRanksRecordTheirAllToAllWithinTheirWaits) {
  ScratchDir dir("distcli-experts");
  const std::string db = dir.file("runs.sqlite");
  const auto result =
      cli("run --preset moe-tiny --threads 1 --seq-len 16 --batch 2 --nproc 4 --ep 2 --steps 3 "
          "--bucket-size 4KiB --json --db " +
          db);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  ASSERT_EQ(json["ranks"].size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    const nlohmann::json& figures = json["ranks"][rank];
    EXPECT_GT(figures["dispatch_ms"].get<double>(), 0.0) << figures.dump();
    EXPECT_LE(figures["dispatch_ms"].get<double>(), figures["comm_wait_ms"].get<double>());
  }
  RunStore store(db, StoreAccess::kReadOnly, false);
  const std::vector<StepMetrics> steps = store.steps(json["run_id"].get<int64_t>());
  ASSERT_EQ(steps.size(), 3u);
  for (const StepMetrics& step : steps) {
    EXPECT_GT(step.dispatch_ms, 0.0);
    EXPECT_LE(step.dispatch_ms, step.comm_wait_ms);
    EXPECT_TRUE(std::isfinite(step.expert_load));  // recorded, not the dense model's nan
    // Over two ranks the fullest takes at least its own rows and at most both ranks'.
    EXPECT_GE(step.expert_rank_load, 1.0);
    EXPECT_LE(step.expert_rank_load, 2.0);
  }
}

// The fullest expert rank holds more than a balanced one: `estimate` at the rank load its steps
// recorded gives its peak within 1.5 %, nearer than the balanced estimate (2.6 % short when
// written); data ranks without --ep record no rank load.
TEST(DistCli, TheFullestExpertRanksPeakIsEstimatedAtItsRecordedRankLoad) {
  ScratchDir dir("distcli-rank-load");
  const std::string db = dir.file("runs.sqlite");
  const std::string shape = "--preset moe-tiny --seq-len 128 --batch 4 --expert-hidden 192";
  const auto experts =
      cli("run " + shape + " --threads 1 --nproc 2 --ep 2 --steps 3 --json --db " + db);
  ASSERT_EQ(experts.exit_code, 0) << experts.err;
  const auto data = cli("run " + shape + " --threads 1 --nproc 2 --steps 1 --json --db " + db);
  ASSERT_EQ(data.exit_code, 0) << data.err;
  const nlohmann::json json = last_line_json(experts.out);
  RunStore store(db, StoreAccess::kReadOnly, false);
  const std::vector<StepMetrics> steps = store.steps(json["run_id"].get<int64_t>());
  const double load = most_recorded(steps, &StepMetrics::expert_rank_load);
  ASSERT_TRUE(std::isfinite(load));
  EXPECT_TRUE(std::isnan(
      store.steps(last_line_json(data.out)["run_id"].get<int64_t>()).front().expert_rank_load));
  int64_t measured = 0;
  for (const auto& rank : json["ranks"])
    measured = std::max(measured, rank["peak_bytes"].get<int64_t>());
  char flag[64];
  std::snprintf(flag, sizeof flag, " --expert-rank-load %.17g", load);
  const std::string asked =
      "estimate --model moe-tiny --seq-len 128 --batch 4 --expert-hidden 192 --nproc 2 --ep 2 "
      "--json";
  auto needed = [&](const std::string& flags) {
    const auto estimated = cli(asked + flags);
    EXPECT_EQ(estimated.exit_code, 0) << estimated.err;
    return static_cast<double>(last_line_json(estimated.out)["total_bytes"].get<int64_t>());
  };
  const double at_load = needed(flag);
  const double balanced = needed("");
  const double peak = static_cast<double>(measured);
  EXPECT_NEAR(peak / at_load, 1.0, 0.015) << "at rank load " << load;
  EXPECT_LT(std::abs(peak - at_load), std::abs(peak - balanced))
      << "measured " << peak << ", at rank load " << load << " " << at_load << ", balanced "
      << balanced;
}

// A block rebuilt for its backward holds its own rows, not the step's mean, and one wide expert
// a rank holds its gradients for every row it took: estimated at the loads the steps recorded
// (rank, busiest block, busiest expert) the fullest rank's peak under every:1 is within 5 %
// and nearer than at the rank load alone (0.6 % and 6.9 % short when written).
TEST(DistCli, ARecomputedBlocksExpertsAreEstimatedAtTheLoadsItsStepsRecorded) {
  ScratchDir dir("distcli-block-load");
  const std::string db = dir.file("runs.sqlite");
  const std::string shape =
      "--preset moe-tiny --seq-len 128 --batch 4 --expert-hidden 384 --checkpoint every:1";
  const auto ran =
      cli("run " + shape + " --threads 1 --nproc 2 --ep 2 --steps 3 --json --db " + db);
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  const nlohmann::json json = last_line_json(ran.out);
  RunStore store(db, StoreAccess::kReadOnly, false);
  const std::vector<StepMetrics> steps = store.steps(json["run_id"].get<int64_t>());
  for (const StepMetrics& step : steps) EXPECT_GE(step.expert_block_load, step.expert_rank_load);
  char rank_load[64];
  std::snprintf(rank_load, sizeof rank_load, " --expert-rank-load %.17g",
                most_recorded(steps, &StepMetrics::expert_rank_load));
  char other_loads[96];
  std::snprintf(other_loads, sizeof other_loads, " --expert-block-load %.17g --expert-load %.17g",
                most_recorded(steps, &StepMetrics::expert_block_load),
                most_recorded(steps, &StepMetrics::expert_load));
  int64_t measured = 0;
  for (const auto& rank : json["ranks"])
    measured = std::max(measured, rank["peak_bytes"].get<int64_t>());
  auto needed = [&](const std::string& flags) {
    const auto estimated = cli("estimate " + shape + " --nproc 2 --ep 2 --json" + flags);
    EXPECT_EQ(estimated.exit_code, 0) << estimated.err;
    return static_cast<double>(last_line_json(estimated.out)["total_bytes"].get<int64_t>());
  };
  const double at_loads = needed(rank_load + std::string(other_loads));
  const double at_rank_load = needed(rank_load);
  const double peak = static_cast<double>(measured);
  EXPECT_NEAR(peak / at_loads, 1.0, 0.05) << rank_load << other_loads;
  EXPECT_LT(std::abs(peak - at_loads), std::abs(peak - at_rank_load))
      << "measured " << peak << ", at" << rank_load << other_loads << " " << at_loads
      << ", at the rank load alone " << at_rank_load;
}

// LoRA over data ranks: each rank holds the frozen base whole and its share of the adapters'
// states, as `estimate` predicts byte for byte, and the run is recorded with its fine-tuning.
TEST(DistCli, LoraOverDataRanksShardsTheAdaptersStatesAndKeepsTheBaseWhole) {
  ScratchDir dir("distcli-lora");
  const std::string db = dir.file("runs.sqlite");
  const std::string model =
      "--preset llama-tiny --finetune lora --lora-rank 4 --base-precision nf4";
  const auto result = cli("run " + model +
                          " --nproc 2 --shard gradients --steps 2 --threads 1 --checkpoint every:1 "
                          "--json --db " +
                          db);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  const auto estimated =
      cli("estimate --model llama-tiny --finetune lora --lora-rank 4 "
          "--base-precision nf4 --nproc 2 --shard gradients --json");
  ASSERT_EQ(estimated.exit_code, 0) << estimated.err;
  const int64_t predicted = last_line_json(estimated.out)["model_state_bytes"].get<int64_t>();
  ASSERT_EQ(json["ranks"].size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(json["ranks"][rank]["model_state_bytes"].get<int64_t>(), predicted) << rank;
  }
  RunStore store(db, StoreAccess::kReadOnly, false);
  const RunRecord record = store.run(json["run_id"].get<int64_t>());
  EXPECT_EQ(record.status, RunStatus::kOk);
  EXPECT_EQ(record.config.world_size, 2);
  EXPECT_EQ(record.config.model.lora.rank, 4);
  EXPECT_EQ(record.config.model.lora.base, BasePrecision::kNf4);
}

// A plan trained through the data-parallel path (one rank that shards its optimizer state)
// keeps the profile it measured and plans the next run from it, as a run in one process does.
TEST(DistCli, AShardedPlannedRunKeepsItsProfileAndTheNextOnePlansFromIt) {
  ScratchDir dir("distcli-plan");
  const std::string db = dir.file("runs.sqlite");
  const std::string run =
      "run --preset tiny --batch 8 --threads 1 --steps 2 --shard optimizer "
      "--checkpoint plan:3MiB --json --db " +
      db;
  const auto first = cli(run);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const nlohmann::json measured = last_line_json(first.out)["plan"];
  EXPECT_NE(measured["profile_source"].get<std::string>().find("(kept now)"), std::string::npos)
      << measured.dump();
  const auto second = cli(run);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const nlohmann::json reused = last_line_json(second.out)["plan"];
  EXPECT_EQ(reused["profile_source"].get<std::string>().rfind("runs database: measured ", 0), 0u)
      << reused.dump();
  EXPECT_EQ(reused["chosen"], measured["chosen"]);
  RunStore store(db, StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.chain_profiles().size(), 1u);
  for (const RunRecord& record : store.runs()) {
    EXPECT_EQ(record.config.shard, "optimizer");
    ASSERT_TRUE(record.request.plan.has_value());
  }
}

// plan: over 2 tensor ranks: both measure their chain at once and agree on it, rank 0 keeps it,
// and the next run of the same layout plans from the kept profile without measuring; a run of
// one process is not handed the profile the ranks measured.
TEST(DistCli, APlanOverTensorRanksIsMeasuredOnAllAndKeptForTheNextRun) {
  ScratchDir dir("distcli-plan-ranks");
  const std::string db = dir.file("runs.sqlite");
  const std::string run =
      "run --preset tiny --batch 8 --threads 1 --steps 2 --checkpoint plan:3MiB --json --db " + db;
  const std::string ranks = " --nproc 2 --tp 2 --sequence-parallel";
  const auto first = cli(run + ranks);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const nlohmann::json measured = last_line_json(first.out)["plan"];
  EXPECT_EQ(measured["profile_source"], "measured on each of 2 ranks, the largest of each figure")
      << measured.dump();
  EXPECT_EQ(measured["chosen"].get<std::string>().rfind("segments:", 0), 0u) << measured.dump();
  const auto second = cli(run + ranks);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const nlohmann::json reused = last_line_json(second.out)["plan"];
  EXPECT_EQ(reused["profile_source"].get<std::string>().rfind("runs database: measured ", 0), 0u)
      << reused.dump();
  EXPECT_EQ(reused["chosen"], measured["chosen"]);
  const auto alone = cli(run);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_NE(
      last_line_json(alone.out)["plan"]["profile_source"].get<std::string>().find("(kept now)"),
      std::string::npos);
  RunStore store(db, StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.chain_profiles().size(), 2u);
}

// The sliced loss hands the head's gradient to the graph once, as the whole loss does: with
// small buckets it is sent with its bucket, not after it in a bucket of its own per slice.
TEST(DistCli, ASlicedLossSendsTheHeadsGradientOnceAndCostsNoExtraMemory) {
  auto peak_of = [](const std::string& chunks) {
    const auto result =
        cli("run --preset llama-tiny --nproc 2 --checkpoint every:1 "
            "--bucket-size 1KiB --steps 3 --threads 1 --json --loss-chunks " +
            chunks);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return last_line_json(result.out)["ranks"][0]["peak_bytes"].get<int64_t>();
  };
  EXPECT_LE(peak_of("4"), peak_of("1"));
}

// Runs `layout` (--nproc N …) until its ranks train, kills rank 1, and expects the run failed
// naming it, every rank gone and the database whole, the others having ended on their own (none
// killed by the launcher for not responding).
void expect_a_killed_rank_fails_the_run(const std::string& layout, int world) {
  ScratchDir dir("distcli-kill");
  const std::string db = dir.file("runs.sqlite");
  std::vector<std::string> args = {REMATLAB_CLI_PATH, "run"};
  for (const std::string& word : split(kTiny)) args.push_back(word);
  for (const std::string& word :
       split(layout + " --steps 100000 --checkpoint every:1 --dist-timeout 10 --db " + db)) {
    args.push_back(word);
  }
  ChildProcess launcher(args, {}, dir.file("out"), dir.file("err"));
  const std::map<int, pid_t> ranks = ranks_training(launcher, world, dir.file("err"));
  ASSERT_EQ(ranks.size(), static_cast<std::size_t>(world)) << slurp(dir.file("err"));
  ASSERT_EQ(::kill(ranks.at(1), SIGKILL), 0);
  const auto killed = Clock::now();
  const std::optional<int> code = launcher.exit_code(std::chrono::seconds(40));
  ASSERT_TRUE(code.has_value()) << "the launcher did not stop: " << slurp(dir.file("err"));
  EXPECT_LT(Clock::now() - killed, std::chrono::seconds(25));
  EXPECT_EQ(*code, 1);
  const std::string err = slurp(dir.file("err"));
  const std::string last = err.substr(err.rfind("rematlab-cli: error:"));
  EXPECT_NE(last.find("rank 1 (pid " + std::to_string(ranks.at(1)) + ") was killed by signal 9"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("stopped responding and was killed"), std::string::npos) << err;
  for (const auto& [rank, pid] : ranks) EXPECT_FALSE(alive(pid)) << "rank " << rank << " is left";

  RunStore store(db, StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.integrity_check(), "ok");
  const std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, RunStatus::kFailed);
  EXPECT_NE(runs[0].message.find("rank 1"), std::string::npos) << runs[0].message;
  EXPECT_GE(store.steps(runs[0].id).size(), 1u);
}

TEST(DistCli, KillingARankFailsTheRunNamingItWithinTheTimeoutAndLeavesNothingBehind) {
  expect_a_killed_rank_fails_the_run("--nproc 3", 3);
}

// Its tensor partner waits inside a layer's collective, not between steps: the same ending.
TEST(DistCli, KillingATensorParallelRankFailsTheRunTheSameWay) {
  expect_a_killed_rank_fails_the_run("--nproc 2 --tp 2", 2);
}

// Sharded gradients in small buckets: the others wait for a bucket's reduction inside backward
// (an accumulator's hook), every micro-batch: the same ending.
TEST(DistCli, KillingARankWhileItsShardedGradientsAreReducedFailsTheRunTheSameWay) {
  expect_a_killed_rank_fails_the_run("--nproc 3 --shard gradients --accum 3 --bucket-size 4KiB", 3);
}

// Its neighbouring stage waits for activations or gradients that never come: the same ending.
TEST(DistCli, KillingAPipelineStageFailsTheRunTheSameWay) {
  expect_a_killed_rank_fails_the_run("--nproc 2 --pp 2 --accum 2", 2);
  // And while sharded stages reduce each backward's gradients (a tied head's shards among them).
  expect_a_killed_rank_fails_the_run(
      "--nproc 4 --pp 2 --accum 2 --shard gradients --bucket-size 4KiB", 4);
}

// Runs `layout` (--nproc 2 …) until its ranks train, stops rank 1 (SIGSTOP), and expects rank 0
// to give up within the timeout and the launcher to kill and name the hung rank.
void expect_a_hung_rank_killed_and_named(const std::string& layout) {
  ScratchDir dir("distcli-hang");
  const std::string db = dir.file("runs.sqlite");
  std::vector<std::string> args = {REMATLAB_CLI_PATH, "run"};
  for (const std::string& word : split(kTiny)) args.push_back(word);
  for (const std::string& word : split(layout + " --steps 100000 --dist-timeout 2 --db " + db)) {
    args.push_back(word);
  }
  ChildProcess launcher(args, {}, dir.file("out"), dir.file("err"));
  const std::map<int, pid_t> ranks = ranks_training(launcher, 2, dir.file("err"));
  ASSERT_EQ(ranks.size(), 2u) << slurp(dir.file("err"));
  ASSERT_EQ(::kill(ranks.at(1), SIGSTOP), 0);
  const std::optional<int> code = launcher.exit_code(std::chrono::seconds(40));
  ASSERT_TRUE(code.has_value()) << slurp(dir.file("err"));
  EXPECT_EQ(*code, 1);
  const std::string err = slurp(dir.file("err"));
  EXPECT_NE(err.find("[rank 0] rematlab-cli: error:"), std::string::npos) << err;
  EXPECT_NE(err.find("within 2 s"), std::string::npos) << err;
  EXPECT_NE(err.find("rematlab-cli: error: rank 1 (pid " + std::to_string(ranks.at(1)) +
                     ") stopped responding"),
            std::string::npos)
      << err;
  for (const auto& [rank, pid] : ranks) EXPECT_FALSE(alive(pid)) << "rank " << rank << " is left";
  RunStore store(db, StoreAccess::kReadOnly, false);
  const std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, RunStatus::kFailed);
  EXPECT_NE(runs[0].message.find("rank 1"), std::string::npos) << runs[0].message;
}

TEST(DistCli, AHungRankIsKilledAfterTheTimeoutAndNamed) {
  expect_a_hung_rank_killed_and_named("--nproc 2");
}

// The neighbouring stage waits in a receive that never completes: the same ending.
TEST(DistCli, AHungPipelineStageIsKilledAfterTheTimeoutAndNamed) {
  expect_a_hung_rank_killed_and_named("--nproc 2 --pp 2 --accum 2");
}

TEST(DistCli, RanksStartedWithDifferentFlagsRefuseNamingTheFlag) {
  // Rank 0 is given the first flags, rank 1 the second; the message names what differs.
  const std::vector<std::tuple<std::vector<std::string>, std::vector<std::string>, std::string>>
      cases = {{{"--steps", "2"}, {"--steps", "3"}, "--steps: rank 1 was given 3 but rank 0 2"},
               {{"--tp", "2"}, {"--tp", "1"}, "--tp: rank 1 was given 1 but rank 0 2"},
               {{"--tp", "2", "--sequence-parallel"},
                {"--tp", "2"},
                "--sequence-parallel: rank 1 was given false but rank 0 true"}};
  for (const auto& [first, second, message] : cases) {
    ScratchDir dir("distcli-mismatch");
    const int port = free_port();
    std::vector<std::unique_ptr<ChildProcess>> ranks;
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<std::string> args = {REMATLAB_CLI_PATH, "run"};
      for (const std::string& word : split(kTiny)) args.push_back(word);
      for (const std::string& word : rank == 0 ? first : second) args.push_back(word);
      ranks.push_back(std::make_unique<ChildProcess>(
          args,
          std::vector<std::string>{"RANK=" + std::to_string(rank), "WORLD_SIZE=2",
                                   "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)},
          dir.file("out" + std::to_string(rank)), dir.file("err" + std::to_string(rank))));
    }
    for (int rank = 0; rank < 2; ++rank) {
      const std::optional<int> code = ranks[rank]->exit_code(std::chrono::seconds(60));
      const std::string err = slurp(dir.file("err" + std::to_string(rank)));
      ASSERT_TRUE(code.has_value()) << message;
      EXPECT_EQ(*code, 2) << err;
      EXPECT_EQ(count_lines(err), 1) << err;
      EXPECT_NE(err.find(message), std::string::npos) << err;
    }
  }
}

TEST(DistCli, APortInUseIsOneLineNamingIt) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = ntohs(address.sin_port);
  const auto result =
      cli_through(shell_rank_env(0, 2, port), "run " + std::string(kTiny) + " --dist-timeout 5");
  ::close(fd);
  EXPECT_EQ(result.exit_code, 2) << result.err;
  EXPECT_EQ(count_lines(result.err), 1) << result.err;
  EXPECT_NE(result.err.find("MASTER_PORT: port " + std::to_string(port) + " is already in use"),
            std::string::npos)
      << result.err;
}

TEST(DistCli, AMissingPeerIsReportedAfterTheTimeout) {
  const auto start = Clock::now();
  const auto result = cli_through(shell_rank_env(0, 3, free_port()),
                                  "run " + std::string(kTiny) + " --dist-timeout 2");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(result.exit_code, 4) << result.err;
  EXPECT_EQ(count_lines(result.err), 1) << result.err;
  EXPECT_NE(result.err.find("rank(s) 1, 2 of 3 did not join within 2 s"), std::string::npos)
      << result.err;
}

TEST(DistCli, BadDistributedFlagsAreRefusedBeforeAnythingStarts) {
  for (const auto& [arguments, flag] : std::vector<std::pair<std::string, std::string>>{
           {"run --nproc 0", "--nproc"},
           {"run --nproc 100000", "--nproc"},
           {"run --shard weights", "--shard"},
           {"run --bucket-size 0", "--bucket-size"},
           {"run --nproc 2 --dist-timeout 0", "--dist-timeout"},
           {"run --shard gradients --precision fp16", "--precision"}}) {
    const auto result = cli(arguments);
    EXPECT_EQ(result.exit_code, 2) << arguments << ": " << result.err;
    EXPECT_EQ(count_lines(result.err), 1) << arguments << ": " << result.err;
    EXPECT_NE(result.err.find(flag), std::string::npos) << arguments << ": " << result.err;
  }
  const auto inside = cli_through(shell_rank_env(0, 2, free_port()), "run --nproc 2");
  EXPECT_EQ(inside.exit_code, 2) << inside.err;
  EXPECT_NE(inside.err.find("--nproc: this process is already rank 0 of 2"), std::string::npos)
      << inside.err;
}

// A sweep of tiny points; `axes` is the spec's "axes" object.
std::string write_sweep_spec(const ScratchDir& dir, const std::string& axes) {
  const std::string path = dir.file("spec.json");
  std::ofstream(path) << R"({"name": "spread", "base": {"preset": "tiny", "layers": 2,
      "d_model": 32, "heads": 2, "seq_len": 16, "vocab": 64, "batch": 2, "steps": 3},
      "axes": )" << axes
                      << "}";
  return path;
}

// The pids the coordinator's notes say points went to: "point 2/4 (…) -> worker 1 (pid 42 on h)".
std::map<std::string, pid_t> point_workers(const std::string& err) {
  std::map<std::string, pid_t> workers;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("point ", 0) != 0) continue;
    const auto arrow = line.find(") -> worker ");
    const auto pid = line.find("(pid ", arrow == std::string::npos ? line.size() : arrow);
    if (arrow == std::string::npos || pid == std::string::npos) continue;
    workers[line.substr(line.find('(') + 1, arrow - line.find('(') - 1)] =
        std::stoi(line.substr(pid + 5));
  }
  return workers;
}

// Every point once, each with all its steps, under the sweep's one experiment.
void expect_every_point_once(const std::string& db, const std::vector<std::string>& labels,
                             int64_t steps) {
  RunStore store(db, StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.integrity_check(), "ok");
  ASSERT_EQ(store.experiments().size(), 1u);
  const std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), labels.size());
  std::set<int64_t> ids;
  std::set<std::string> names;
  for (const RunRecord& run : runs) {
    ids.insert(run.id);
    names.insert(run.name);
    EXPECT_EQ(run.experiment_id, store.experiments()[0].id);
    EXPECT_EQ(run.status, RunStatus::kOk) << run.name << ": " << run.message;
    EXPECT_TRUE(run.has_result) << run.name;
    EXPECT_EQ(run.result.steps_completed, steps) << run.name;
    const auto recorded = store.steps(run.id);
    ASSERT_EQ(recorded.size(), static_cast<std::size_t>(steps)) << run.name;
    for (int64_t step = 0; step < steps; ++step) EXPECT_EQ(recorded[step].step, step) << run.name;
  }
  EXPECT_EQ(ids.size(), labels.size());
  EXPECT_EQ(names, std::set<std::string>(labels.begin(), labels.end()));
}

TEST(DistCli, ARunGivenAsAOnePointSpecTrainsOnEveryRankAndFlagsBesideItAreRefused) {
  // How the window starts its ranks: the form's one run as a spec, the ranks' flags beside it.
  ScratchDir dir("distcli-config");
  const std::string one = write_sweep_spec(dir, R"({"checkpoint": ["every:1"]})");
  const auto result = cli("run --config " + one + " --nproc 2 --shard optimizer --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  EXPECT_EQ(json["status"], "ok");
  EXPECT_EQ(json["world_size"], 2);
  EXPECT_EQ(json["checkpoint"], "every:1");
  EXPECT_EQ(json["batch"], 2);
  EXPECT_EQ(json["ranks"].size(), 2u);
  EXPECT_NE(result.err.find("[rank 1] step 3/3"), std::string::npos) << result.err;

  const std::string two = dir.file("two.json");
  std::ofstream(two) << R"({"base": {"preset": "tiny"}, "axes": {"batch": [1, 2]}})";
  for (const auto& [arguments, words] : std::vector<std::pair<std::string, std::string>>{
           {"--config " + one + " --batch 4",
            "--config: give the run either in the file or as "
            "flags, not both (--batch was given too)"},
           {"--config " + two, "describes 2 runs; run takes one"},
           {"--config " + dir.file("missing.json"), "--config: cannot read"}}) {
    const auto refused = cli("run " + arguments);
    EXPECT_EQ(refused.exit_code, 2) << arguments << ": " << refused.err;
    EXPECT_EQ(count_lines(refused.err), 1) << arguments << ": " << refused.err;
    EXPECT_NE(refused.err.find(words), std::string::npos) << arguments << ": " << refused.err;
  }
}

TEST(DistSweep, FourPointsOverTwoWorkersLandOnceEachInOneDatabase) {
  ScratchDir dir("distcli-sweep");
  const std::string db = dir.file("runs.sqlite");
  // Enough steps that the first worker cannot finish every point before the second one asks.
  const std::string spec =
      write_sweep_spec(dir, R"({"checkpoint": ["none", "every:1"], "batch": [1, 2],
                                "steps": [30]})");
  const auto result = cli("sweep --spec " + spec + " --workers 2 --json --db " + db);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json json = last_line_json(result.out);
  ASSERT_EQ(json["runs"].size(), 4u) << result.out;
  for (const auto& run : json["runs"]) EXPECT_EQ(run["status"], "ok") << run.dump();
  expect_every_point_once(
      db,
      {"checkpoint=none batch=1 steps=30", "checkpoint=none batch=2 steps=30",
       "checkpoint=every:1 batch=1 steps=30", "checkpoint=every:1 batch=2 steps=30"},
      30);
  // The points ran in worker processes, both of them, never in the coordinator.
  const std::map<std::string, pid_t> workers = point_workers(result.err);
  ASSERT_EQ(workers.size(), 4u) << result.err;
  std::set<pid_t> pids;
  for (const auto& [label, pid] : workers) pids.insert(pid);
  EXPECT_EQ(pids.size(), 2u) << result.err;
  // Each worker had its share of the cores: the recorded threads say so.
  const int share = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2);
  RunStore store(db, StoreAccess::kReadOnly, false);
  for (const RunRecord& run : store.runs()) EXPECT_EQ(run.config.threads, share) << run.name;
  EXPECT_NE(result.err.find("4 of 4 done"), std::string::npos) << result.err;
}

TEST(DistSweep, AKilledWorkerFailsItsPointAndTheSweepGoesOn) {
  ScratchDir dir("distcli-sweepkill");
  const std::string db = dir.file("runs.sqlite");
  const std::string spec = write_sweep_spec(dir, R"({"steps": [100000, 3, 4, 5]})");
  ChildProcess parent({REMATLAB_CLI_PATH, "sweep", "--spec", spec, "--workers", "2", "--db", db},
                      {}, dir.file("out"), dir.file("err"));
  pid_t victim = 0;
  ASSERT_TRUE(wait_until(
      [&] {
        const std::string err = slurp(dir.file("err"));
        const auto workers = point_workers(err);
        if (workers.count("steps=100000") == 0 || err.find("step 3/100000") == std::string::npos)
          return false;
        victim = workers.at("steps=100000");
        return true;
      },
      std::chrono::seconds(120), kPoll))
      << slurp(dir.file("err"));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const std::optional<int> code = parent.exit_code(std::chrono::seconds(120));
  ASSERT_TRUE(code.has_value()) << "the sweep did not end: " << slurp(dir.file("err"));
  const std::string err = slurp(dir.file("err"));
  EXPECT_EQ(*code, 0) << err;
  for (const auto& [label, pid] : point_workers(err)) EXPECT_FALSE(alive(pid)) << label;

  RunStore store(db, StoreAccess::kReadOnly, false);
  EXPECT_EQ(store.integrity_check(), "ok");
  const std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), 4u) << err;
  std::set<int64_t> ids;
  for (const RunRecord& run : runs) {
    ids.insert(run.id);
    if (run.name == "steps=100000") {
      EXPECT_EQ(run.status, RunStatus::kFailed);
      EXPECT_NE(run.message.find("(pid " + std::to_string(victim) + " on "), std::string::npos)
          << run.message;
      EXPECT_NE(run.message.find("was killed by signal 9"), std::string::npos) << run.message;
      // One numbering: the run's message and the launcher's note name the victim alike (and
      // its output prefix would, "[worker R] ").
      const auto named = run.message.find("worker ");
      ASSERT_NE(named, std::string::npos) << run.message;
      const std::string worker = run.message.substr(named, run.message.find(" (pid") - named);
      EXPECT_NE(err.find(worker + " (pid " + std::to_string(victim) + ") was killed by signal 9"),
                std::string::npos)
          << worker << ": " << err;
      EXPECT_GE(store.steps(run.id).size(), 3u) << "its steps up to the kill stay recorded";
    } else {
      EXPECT_EQ(run.status, RunStatus::kOk) << run.name << ": " << run.message;
      EXPECT_EQ(static_cast<int64_t>(store.steps(run.id).size()), run.config.steps) << run.name;
    }
  }
  EXPECT_EQ(ids.size(), 4u);
}

TEST(DistSweep, RanksStartedAsSlurmWouldRunTheSweepAndRankZeroRecordsIt) {
  ScratchDir dir("distcli-sweepranks");
  const std::string db = dir.file("runs.sqlite");
  const std::string spec =
      write_sweep_spec(dir, R"({"checkpoint": ["none", "every:1"], "batch": [1, 2]})");
  const int port = free_port();
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{REMATLAB_CLI_PATH, "sweep", "--spec", spec, "--db", db, "--json",
                                 "--dist-timeout", "30"},
        // One thread each, as torchrun sets it: two processes of all cores each would crawl.
        std::vector<std::string>{"SLURM_PROCID=" + std::to_string(rank), "SLURM_NTASKS=2",
                                 "SLURM_LOCALID=" + std::to_string(rank), "MASTER_ADDR=127.0.0.1",
                                 "MASTER_PORT=" + std::to_string(port), "OMP_NUM_THREADS=1"},
        dir.file("out" + std::to_string(rank)), dir.file("err" + std::to_string(rank))));
  }
  for (int rank = 0; rank < 2; ++rank) {
    const std::optional<int> code = ranks[rank]->exit_code(std::chrono::seconds(120));
    ASSERT_TRUE(code.has_value()) << slurp(dir.file("err" + std::to_string(rank)));
    EXPECT_EQ(*code, 0) << slurp(dir.file("err" + std::to_string(rank)));
  }
  EXPECT_EQ(slurp(dir.file("out1")), "") << "only rank 0 reports";
  EXPECT_EQ(last_line_json(slurp(dir.file("out0")))["runs"].size(), 4u);
  expect_every_point_once(db,
                          {"checkpoint=none batch=1", "checkpoint=none batch=2",
                           "checkpoint=every:1 batch=1", "checkpoint=every:1 batch=2"},
                          3);
}

TEST(DistSweep, BadWorkerFlagsAreRefusedBeforeAnythingStarts) {
  ScratchDir dir("distcli-sweepbad");
  const std::string db = dir.file("runs.sqlite");
  const std::string spec = write_sweep_spec(dir, R"({"batch": [1, 2]})");
  for (const auto& [arguments, flag] : std::vector<std::pair<std::string, std::string>>{
           {"--workers 0", "--workers"},
           {"--workers 100000", "--workers"},
           {"--workers 2 --dist-timeout 0", "--dist-timeout"}}) {
    const auto result = cli("sweep --spec " + spec + " --db " + db + " " + arguments);
    EXPECT_EQ(result.exit_code, 2) << arguments << ": " << result.err;
    EXPECT_EQ(count_lines(result.err), 1) << arguments << ": " << result.err;
    EXPECT_NE(result.err.find(flag), std::string::npos) << arguments << ": " << result.err;
  }
  const auto inside =
      cli_through(shell_rank_env(0, 2, free_port()), "sweep --spec " + spec + " --workers 2");
  EXPECT_EQ(inside.exit_code, 2) << inside.err;
  EXPECT_NE(inside.err.find("--workers: this process is already worker 0 of 2"), std::string::npos)
      << inside.err;
  EXPECT_FALSE(files::exists(db)) << "nothing was created";
}

}  // namespace
}  // namespace rematlab
