// --pp-split balanced: the split chosen from the chain's measured costs (plan/balanced_split.h),
// against every split there is, and a pipeline run that takes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cli_runner.h"
#include "plan/balanced_split.h"
#include "plan/chain_costs_json.h"
#include "plan/chain_profile.h"
#include "plan/plan_policy.h"
#include "plan/profile_key.h"
#include "scratch_dir.h"

namespace rematlab {
namespace {

using plan::BalancedSplit;

// A chain of blocks whose attention and MLP sublayers take `block_ms` between them (forward and
// backward), with the embedding's and the head's times.
ChainCosts chain_of(const std::vector<double>& block_ms, double embedding_ms, double head_ms) {
  ChainCosts costs;
  for (const double ms : block_ms) {
    StageCost attention;
    attention.forward_ms = ms * 0.1;
    attention.backward_ms = ms * 0.3;
    StageCost mlp;
    mlp.forward_ms = ms * 0.2;
    mlp.backward_ms = ms * 0.4;
    costs.stages.push_back(attention);
    costs.stages.push_back(mlp);
  }
  costs.embedding_ms = embedding_ms;
  costs.head_ms = head_ms;
  costs.fixed_ms = embedding_ms + head_ms;
  return costs;
}

struct EverySplit {
  double slowest_ms = 1e300;         // the least slowest chunk of any split
  std::vector<int64_t> most_packed;  // of those, the one whose last chunks hold the most
};

// Every split of `block_ms` into `chunks` contiguous chunks, tried: what the balanced split must
// reach, and which of the equally fast splits it must give.
EverySplit by_every_split(const std::vector<double>& block_ms, int64_t chunks, double embedding,
                          double head) {
  const auto blocks = static_cast<int64_t>(block_ms.size());
  EverySplit every;
  std::vector<std::pair<double, std::vector<int64_t>>> splits;
  std::vector<int64_t> sizes;
  std::function<void(int64_t)> place = [&](int64_t from) {
    const auto chunk = static_cast<int64_t>(sizes.size());
    if (chunk == chunks) {
      if (from != blocks) return;
      double slowest = 0.0;
      int64_t start = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        double ms = (c == 0 ? embedding : 0.0) + (c == chunks - 1 ? head : 0.0);
        for (int64_t b = start; b < start + sizes[static_cast<std::size_t>(c)]; ++b) {
          ms += block_ms[static_cast<std::size_t>(b)];
        }
        slowest = std::max(slowest, ms);
        start += sizes[static_cast<std::size_t>(c)];
      }
      every.slowest_ms = std::min(every.slowest_ms, slowest);
      splits.emplace_back(slowest, sizes);
      return;
    }
    for (int64_t size = 1; from + size <= blocks; ++size) {
      sizes.push_back(size);
      place(from + size);
      sizes.pop_back();
    }
  };
  place(0);
  for (const auto& [slowest, split] : splits) {
    if (slowest > every.slowest_ms + 1e-9) continue;
    const std::vector<int64_t> reversed(split.rbegin(), split.rend());
    const std::vector<int64_t> kept(every.most_packed.rbegin(), every.most_packed.rend());
    if (every.most_packed.empty() || reversed > kept) every.most_packed = split;
  }
  return every;
}

TEST(BalancedSplit, AHeavyHeadLeavesTheLastStageFewerBlocks) {
  // Six blocks of 10 ms; a head of 35 ms: 5 and 1 (50 and 45 ms), not the rule's 3 and 3.
  BalancedSplit split =
      plan::balanced_chunk_blocks(chain_of(std::vector<double>(6, 10.0), 0, 35), 2);
  EXPECT_EQ(split.chunk_blocks, (std::vector<int64_t>{5, 1}));
  ASSERT_EQ(split.chunk_ms.size(), 2u);
  EXPECT_NEAR(split.chunk_ms[0], 50.0, 1e-9);
  EXPECT_NEAR(split.chunk_ms[1], 45.0, 1e-9);
  // A head of 30 ms: 4 and 2 and 5 and 1 are both 50 ms at most; the first stage, which holds
  // the most micro-batches in flight, takes the fewer blocks.
  split = plan::balanced_chunk_blocks(chain_of(std::vector<double>(6, 10.0), 0, 30), 2);
  EXPECT_EQ(split.chunk_blocks, (std::vector<int64_t>{4, 2}));
  // The embedding weighs on the first chunk alike.
  split = plan::balanced_chunk_blocks(chain_of(std::vector<double>(6, 10.0), 25, 0), 2);
  EXPECT_EQ(split.chunk_blocks, (std::vector<int64_t>{2, 4}));
  // Three chunks of seven blocks and a head of 35 ms: 3,3,1 and 2,4,1 both take 45 ms at most;
  // the first chunk takes the fewer.
  split = plan::balanced_chunk_blocks(chain_of(std::vector<double>(7, 10.0), 0, 35), 3);
  EXPECT_EQ(split.chunk_blocks, (std::vector<int64_t>{2, 4, 1}));
  // A thousand blocks in a thousand and in 333 chunks: one pass a bisection step, not a table.
  split = plan::balanced_chunk_blocks(chain_of(std::vector<double>(1000, 1.0), 0, 0), 1000);
  EXPECT_EQ(split.chunk_blocks, std::vector<int64_t>(1000, 1));
  split = plan::balanced_chunk_blocks(chain_of(std::vector<double>(1000, 1.0), 0, 0), 333);
  EXPECT_NEAR(*std::max_element(split.chunk_ms.begin(), split.chunk_ms.end()), 4.0, 1e-9);
}

TEST(BalancedSplit, ItsSlowestChunkIsTheLeastOfEverySplit) {
  std::mt19937 random(20261206u);
  std::uniform_real_distribution<double> ms(1.0, 20.0);
  for (int draw = 0; draw < 200; ++draw) {
    const int64_t blocks = 1 + draw % 9;
    std::vector<double> block_ms;
    for (int64_t b = 0; b < blocks; ++b) block_ms.push_back(ms(random));
    const double embedding = ms(random) * (draw % 3);
    const double head = ms(random) * (draw % 4);
    for (int64_t chunks = 1; chunks <= blocks; ++chunks) {
      const BalancedSplit split =
          plan::balanced_chunk_blocks(chain_of(block_ms, embedding, head), chunks);
      ASSERT_EQ(static_cast<int64_t>(split.chunk_blocks.size()), chunks);
      int64_t total = 0;
      for (const int64_t size : split.chunk_blocks) {
        EXPECT_GE(size, 1);
        total += size;
      }
      EXPECT_EQ(total, blocks);
      const EverySplit every = by_every_split(block_ms, chunks, embedding, head);
      EXPECT_NEAR(*std::max_element(split.chunk_ms.begin(), split.chunk_ms.end()), every.slowest_ms,
                  1e-9)
          << "draw " << draw << ", " << chunks << " chunks";
      EXPECT_EQ(split.chunk_blocks, every.most_packed) << "draw " << draw << ", " << chunks;
      // Each chunk's time is its blocks', the embedding's with the first, the head's with the
      // last.
      int64_t start = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        double expected_ms = (c == 0 ? embedding : 0.0) + (c == chunks - 1 ? head : 0.0);
        const int64_t size = split.chunk_blocks[static_cast<std::size_t>(c)];
        for (int64_t b = start; b < start + size; ++b)
          expected_ms += block_ms[static_cast<std::size_t>(b)];
        EXPECT_NEAR(split.chunk_ms[static_cast<std::size_t>(c)], expected_ms, 1e-9);
        start += size;
      }
    }
  }
}

TEST(BalancedSplit, RefusesMoreChunksThanBlocks) {
  EXPECT_THROW(plan::balanced_chunk_blocks(chain_of({1.0, 2.0}, 0, 0), 3), std::invalid_argument);
  EXPECT_THROW(plan::balanced_chunk_blocks(chain_of({1.0, 2.0}, 0, 0), 0), std::invalid_argument);
  ChainCosts odd = chain_of({1.0, 2.0}, 0, 0);
  odd.stages.pop_back();
  EXPECT_THROW(plan::balanced_chunk_blocks(odd, 1), std::invalid_argument);
  ChainCosts unknown = chain_of({1.0, 2.0}, 0, 0);
  unknown.head_ms = std::nan("");
  EXPECT_THROW(plan::balanced_chunk_blocks(unknown, 2), std::invalid_argument);
  ChainCosts broken = chain_of({1.0, 2.0}, 0, 0);
  broken.stages[1].backward_ms = std::nan("");
  EXPECT_THROW(plan::balanced_chunk_blocks(broken, 2), std::invalid_argument);
}

// A profile kept before the embedding's and head's times were measured apart still reads (the
// Plan tab and plan: use it); it cannot balance a split, which measures the chain again.
TEST(BalancedSplit, AProfileKeptWithoutTheEndTimesReadsWithThemUnknown) {
  ChainCosts costs = chain_of({1.0, 2.0}, 0.5, 0.25);
  nlohmann::json json = plan::to_json(costs);
  EXPECT_EQ(json.at("head_ms"), 0.25);
  EXPECT_TRUE(plan::chain_costs_from_json(json).has_end_times());
  json.erase("embedding_ms");
  json.erase("head_ms");
  const ChainCosts older = plan::chain_costs_from_json(json);
  EXPECT_FALSE(older.has_end_times());
  EXPECT_EQ(older.stages.size(), 4u);
  EXPECT_FALSE(plan::to_json(older).contains("head_ms"));  // kept again as it was
  json["head_ms"] = "x";                                   // present but no time: not read at all
  EXPECT_THROW(plan::chain_costs_from_json(json), std::invalid_argument);
  // Brought to a run: a plan: run plans from it; a balanced split does not take it.
  RunConfig config;
  config.checkpoint = "plan:1MiB";
  KnownChainCosts known;
  known.key = plan::profile_key(config, plan::ProfileOptions{}.repeats);
  known.costs = older;
  config.known_chain_costs = std::make_shared<const KnownChainCosts>(known);
  EXPECT_TRUE(plan::brings_chain_costs(config));
  config.pp_split_balanced = true;
  EXPECT_FALSE(plan::brings_chain_costs(config));
  known.costs = costs;  // with the end times
  config.known_chain_costs = std::make_shared<const KnownChainCosts>(known);
  EXPECT_TRUE(plan::brings_chain_costs(config));
  config.model.layers += 1;  // another chain's key
  EXPECT_FALSE(plan::brings_chain_costs(config));
}

// Two stages of `tiny` with a vocabulary of 8192: the head and loss cost more than a block, so
// the last stage runs fewer blocks than the rule's half; the record keeps the split run, and
// the chain measured for it, which the next run takes instead of measuring again.
TEST(BalancedSplitCli, APipelineRunsTheSplitItsMeasuredChainGivesAndRecordsIt) {
  testing::ScratchDir dir("balanced-split");
  const std::string db = dir.file("runs.sqlite");
  const std::string run = std::string("run --preset tiny --layers 6 --d-model 32 --heads 2 ") +
                          "--seq-len 16 --vocab 8192 --batch 2 --threads 1 --nproc 2 --pp 2 " +
                          "--accum 2 --steps 2 --pp-split balanced --json --db " + db;
  const testing::CliResult first = testing::cli(run);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const nlohmann::json summary = testing::last_line_json(first.out);
  const auto split = summary.at("pp_split").get<std::vector<int64_t>>();
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split[0] + split[1], 6);
  EXPECT_GT(split[0], split[1]) << first.out;
  const auto chunk_ms = summary.at("pp_split_balanced_ms").get<std::vector<double>>();
  ASSERT_EQ(chunk_ms.size(), 2u);
  EXPECT_GT(chunk_ms[0], 0.0);
  EXPECT_GT(chunk_ms[1], 0.0);
  // The next run of the same chain splits from the costs kept: the same split, the same times.
  const testing::CliResult second = testing::cli(run);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const nlohmann::json again = testing::last_line_json(second.out);
  EXPECT_EQ(again.at("pp_split"), summary.at("pp_split"));
  EXPECT_EQ(again.at("pp_split_balanced_ms"), summary.at("pp_split_balanced_ms"));
  const testing::CliResult runs = testing::cli("runs --json --db " + db);
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  // Named by the split it ran, beside the word.
  const std::string name =
      "split " + std::to_string(split[0]) + "," + std::to_string(split[1]) + " balanced";
  EXPECT_NE(runs.out.find(name), std::string::npos) << runs.out;
}

TEST(BalancedSplitCli, WhatCannotTakeItIsRefusedInOneLine) {
  testing::ScratchDir dir("balanced-split-refused");
  const std::string tiny = std::string(testing::kTiny) + " --steps 1 --db " + dir.file("r.sqlite");
  for (const std::string& flags :
       {std::string("--pp-split balanced"),
        std::string("--nproc 2 --pp 2 --accum 2 --pp-split balanced --checkpoint "
                    "stages:every:1/none"),
        std::string("--nproc 2 --pp 2 --accum 2 --pp-split Balanced")}) {
    const testing::CliResult result = testing::cli("run " + tiny + " " + flags);
    EXPECT_EQ(result.exit_code, 2) << flags;
    EXPECT_EQ(testing::count_lines(result.err), 1) << flags << ": " << result.err;
    EXPECT_NE(result.err.find("--pp-split"), std::string::npos) << result.err;
    EXPECT_FALSE(files::exists(dir.file("r.sqlite"))) << flags;
  }
}

}  // namespace
}  // namespace rematlab
