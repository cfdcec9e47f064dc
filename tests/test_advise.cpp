// The advisor (core/advise): every finding on a run made to show it, in a real runs database
// filled by really running tiny configurations through rematlab-cli.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "advise/advisor.h"
#include "advise/chain_walk.h"
#include "advise/memory_finding.h"
#include "advise/reference_run.h"
#include "advise/throughput_finding.h"
#include "cli_runner.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "estimate/estimate.h"
#include "scratch_dir.h"
#include "store/sqlite_db.h"
#include "train/gradient_check.h"
#include "train/trainer_replay.h"

namespace rematlab::advise {
namespace {

using testing::cli;
using testing::last_line_json;
using testing::ScratchDir;

RunConfig tiny(const std::string& preset = "tiny") {
  RunConfig config;
  config.preset = preset;
  config.model = model_preset(preset);
  config.steps = 4;
  config.threads = 1;
  config.peak_flops = 1e12;
  return config;
}

// A runs database filled by the real CLI.
class AdviseDb : public ::testing::Test {
 protected:
  // Runs `flags` on tiny into the database; returns the run id and its JSON.
  int64_t run(const std::string& flags, nlohmann::json* json = nullptr) {
    const testing::CliResult result =
        cli("run --preset tiny --threads 1 --peak-flops 1e12 --db " + db_ + " --json " + flags);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    const nlohmann::json out = last_line_json(result.out);
    if (json) *json = out;
    return out.at("run_id").get<int64_t>();
  }
  // The batch an oom finding's next step gives lies between the batch that fitted (8) and the
  // one that did not (64), and trains within `budget` with `flags`.
  void expect_advised_batch_fits(const std::string& next, const std::string& budget,
                                 const std::string& flags) {
    const auto batch_at = next.find("--batch ");
    ASSERT_NE(batch_at, std::string::npos) << next;
    const int64_t batch = std::stoll(next.substr(batch_at + 8));
    EXPECT_GE(batch, 8) << next;
    EXPECT_LT(batch, 64) << next;
    nlohmann::json fits;
    run(flags + " --batch " + std::to_string(batch) + " --budget " + budget, &fits);
    EXPECT_EQ(fits.at("status"), "ok") << "the batch the advisor gave does not fit: " << next;
  }
  Diagnosis diagnose(int64_t id, bool replay = true) {
    RunStore store(db_, StoreAccess::kReadOnly, false);
    AdviseOptions options;
    options.replay = replay;
    return diagnose_run(store, id, options);
  }
  static const Finding* find(const Diagnosis& diagnosis, FindingKind kind) {
    for (const Finding& finding : diagnosis.findings) {
      if (finding.kind == kind) return &finding;
    }
    return nullptr;
  }
  static std::string evidence(const Finding& finding, const std::string& label) {
    for (const Evidence& item : finding.evidence) {
      if (item.label == label) return item.value;
    }
    return "";
  }

  ScratchDir dir_{"advise"};
  std::string db_ = dir_.file("runs.sqlite");
};

// The walk must compute what the model computes, or the sublayer it names is another model's.
TEST(ChainWalk, EqualsTheModelsLossAndGradientsBitForBit) {
  for (const std::string preset : {"tiny", "llama-tiny"}) {
    RunConfig config = tiny(preset);
    config.model.dropout = 0.1;  // the walk must draw dropout in the model's order too
    config.accum = 2;
    Trainer walked(config);
    const ChainWalk walk = walk_chain(walked);
    Trainer reference(config);
    const double loss = *reference.accumulate_gradients(
        CheckpointPolicy::none().plan_for(config.model.layers, 0.0));
    EXPECT_EQ(walk.loss, loss) << preset;
    const auto a = walked.model()->named_parameters();
    const auto b = reference.model()->named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i].value().grad(), b[i].value().grad()))
          << preset << " " << a[i].key();
    }
    EXPECT_TRUE(walk.params_without_gradient.empty()) << preset;
    EXPECT_EQ(walk.params_total, static_cast<int64_t>(a.size()));
    EXPECT_FALSE(walk.first_nonfinite_output()) << preset;
    EXPECT_FALSE(walk.first_nonfinite_backward()) << preset;
  }
}

TEST(ChainWalk, NamesTheSublayerWhoseOutputOverflowsFirst) {
  Trainer trainer(tiny());
  {
    // Weights so large that mlp1's output overflows fp32 while everything before it is finite.
    torch::NoGradGuard no_grad;
    for (auto& item : trainer.model()->named_parameters()) {
      if (item.key().rfind("block1_mlp", 0) == 0 && item.value().dim() == 2) {
        item.value().fill_(1e30f);
      }
    }
  }
  const ChainWalk walk = walk_chain(trainer);
  ASSERT_TRUE(walk.first_nonfinite_output());
  EXPECT_EQ(walk.pieces[*walk.first_nonfinite_output()].name, "mlp1");
  EXPECT_EQ(walk.pieces[*walk.first_nonfinite_output()].nonfinite_params, 0);
  EXPECT_EQ(walk.pieces[3].nonfinite_outputs, 0);  // attn1, just before it
}

TEST(ChainWalk, NamesAParameterThatReceivedNoGradient) {
  Trainer trainer(tiny());
  std::string frozen;
  for (auto& item : trainer.model()->named_parameters()) {
    if (item.key().rfind("block0_attn", 0) == 0) {
      frozen = item.key();
      item.value().set_requires_grad(false);  // frozen: backward never reaches it
      break;
    }
  }
  ASSERT_FALSE(frozen.empty());
  const ChainWalk walk = walk_chain(trainer);
  EXPECT_EQ(walk.params_without_gradient, std::vector<std::string>{frozen});
}

TEST(TrainerReplay, ReachesTheRunsStateAtAStep) {
  RunConfig config = tiny();
  config.steps = 6;
  const RunSummary full = Trainer(config).run();
  Trainer replayed(config);
  const std::vector<double> losses = replay_until(replayed, 3);
  ASSERT_EQ(losses.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(losses[i], full.steps[i].loss);
  // The next step it takes is the run's step 3, on the same data and weights.
  const double next =
      *replayed.accumulate_gradients(CheckpointPolicy::none().plan_for(config.model.layers, 0.5));
  EXPECT_EQ(next, full.steps[3].loss);
}

TEST(GradientCheck, AtALaterStepComparesThatStep) {
  RunConfig config = tiny();
  config.steps = 6;
  config.checkpoint = "every:1";
  const GradientCheckResult at_three = check_gradients(config, nullptr, std::nullopt, 3);
  EXPECT_TRUE(at_three.identical);
  // A later step's loss, not the first one's: the check really trained three steps first.
  const GradientCheckResult at_zero = check_gradients(config, nullptr, std::nullopt, 0);
  EXPECT_NE(at_three.loss, at_zero.loss);
  EXPECT_THROW(check_gradients(config, nullptr, std::nullopt, 6), InvalidInput);
}

TEST_F(AdviseDb, DivergedRunNamesTheFirstNonFiniteSublayerAndClearsRecomputation) {
  nlohmann::json json;
  const int64_t id = run("--lr 1e6 --steps 30 --checkpoint every:1", &json);
  ASSERT_EQ(json.at("status"), "diverged") << json.dump();
  const Diagnosis diagnosis = diagnose(id);
  const Finding* finding = find(diagnosis, FindingKind::kDiverged);
  ASSERT_NE(finding, nullptr);
  // The stored steps say where; the finding names that step and a piece of the chain.
  RunStore store(db_, StoreAccess::kReadOnly, false);
  const auto steps = store.steps(id);
  int64_t first_bad = -1;
  for (const StepMetrics& step : steps) {
    if (!std::isfinite(step.loss) || !std::isfinite(step.grad_norm)) {
      first_bad = step.step;
      break;
    }
  }
  ASSERT_GE(first_bad, 0);
  EXPECT_EQ(evidence(*finding, "first non-finite step").rfind(std::to_string(first_bad) + " of", 0),
            0u);
  EXPECT_TRUE(finding->title.find("first non-finite") != std::string::npos ||
              finding->title.find("already non-finite") != std::string::npos)
      << finding->title;
  EXPECT_EQ(evidence(*finding, "recomputation").rfind("innocent", 0), 0u)
      << evidence(*finding, "recomputation");
  EXPECT_NE(finding->next_step.command_line().find("--lr 100000"), std::string::npos)
      << finding->next_step.command_line();
  // Each setting it names is a part a front end can say its own way, not text with a flag in it.
  std::vector<std::string> settings;
  for (const Phrase& phrase : finding->next_step.phrases()) {
    if (phrase.kind == Phrase::Kind::kSetting) settings.push_back(phrase.text + " " + phrase.value);
    if (phrase.kind == Phrase::Kind::kText) {
      EXPECT_EQ(phrase.text.find("--"), std::string::npos) << phrase.text;
    }
  }
  ASSERT_FALSE(settings.empty());
  EXPECT_EQ(settings.front(), "lr 100000");
  // The sublayer named is the one the walk of that step finds, independently replayed here.
  RunConfig config = store.run(id).config;
  Trainer trainer(config);
  replay_until(trainer, first_bad);
  const ChainWalk walk = walk_chain(trainer);
  const auto forward = walk.first_nonfinite_output();
  const auto backward = walk.first_nonfinite_backward();
  ASSERT_TRUE(forward || backward);
  const std::string named = walk.pieces[forward ? *forward : *backward].name;
  EXPECT_TRUE(finding->title.find(" " + named + " (") != std::string::npos ||
              finding->title.find(": " + named + "'s weights") != std::string::npos)
      << finding->title << " / " << named;

  // Without replays the finding stays, and the notes say what was not checked.
  const Diagnosis records_only = diagnose(id, false);
  ASSERT_NE(find(records_only, FindingKind::kDiverged), nullptr);
  EXPECT_EQ(evidence(*find(records_only, FindingKind::kDiverged), "recomputation"), "");
  EXPECT_FALSE(records_only.notes.empty());
}

TEST_F(AdviseDb, HealthyRunHasNoFindings) {
  const int64_t id = run("--steps 4");
  const Diagnosis diagnosis = diagnose(id);
  EXPECT_TRUE(diagnosis.findings.empty()) << to_json(diagnosis).dump();
}

TEST_F(AdviseDb, SelectiveUnderSdpaIsMemoryNotReduced) {
  const int64_t none = run("--steps 3 --batch 16");
  const int64_t selective = run("--steps 3 --batch 16 --checkpoint selective");
  const Diagnosis diagnosis = diagnose(selective, false);
  const Finding* finding = find(diagnosis, FindingKind::kMemoryNotReduced);
  ASSERT_NE(finding, nullptr) << to_json(diagnosis).dump();
  EXPECT_NE(finding->title.find("selective under fused attention"), std::string::npos);
  EXPECT_NE(evidence(*finding, "peak under none").find("run #" + std::to_string(none)),
            std::string::npos);
  EXPECT_NE(finding->next_step.command_line().find("--checkpoint every:1"), std::string::npos);
}

TEST_F(AdviseDb, EveryBlockRecomputedWithLargeActivationsIsNotFlagged) {
  // Wide enough that activations, not the model states, make the peak: every:1 lowers it.
  run("--steps 3 --batch 32 --seq-len 128 --attention math");
  const int64_t every =
      run("--steps 3 --batch 32 --seq-len 128 --attention math --checkpoint every:1");
  const Diagnosis diagnosis = diagnose(every, false);
  EXPECT_EQ(find(diagnosis, FindingKind::kMemoryNotReduced), nullptr) << to_json(diagnosis).dump();
}

TEST_F(AdviseDb, ModelStatesDominatingIsNamedWithBytes) {
  // One sequence of 16 tokens: the activations are small next to weights, gradients and moments.
  run("--steps 3 --batch 1 --seq-len 16");
  const int64_t every = run("--steps 3 --batch 1 --seq-len 16 --checkpoint every:1");
  const Diagnosis diagnosis = diagnose(every, false);
  const Finding* finding = find(diagnosis, FindingKind::kMemoryNotReduced);
  ASSERT_NE(finding, nullptr) << to_json(diagnosis).dump();
  EXPECT_NE(finding->title.find("model states dominate"), std::string::npos) << finding->title;
  RunStore store(db_, StoreAccess::kReadOnly, false);
  EXPECT_NE(evidence(*finding, "model states (live when a step begins)")
                .find(format_bytes(store.run(every).result.baseline_bytes)),
            std::string::npos);
}

// A LoRA run is estimated as fine-tuning: its frozen base's states, and the advice to store that
// base in fewer bits rather than to shard (adapters train on one process).
TEST_F(AdviseDb, ALoraRunWhoseStatesDominateIsAdvisedASmallerBase) {
  const std::string flags = "--steps 3 --batch 1 --seq-len 16 --checkpoint every:1 --finetune lora";
  for (const auto& [base, next] : std::vector<std::pair<std::string, std::string>>{
           {"fp32", "--base-precision nf4"}, {"nf4", "a device with more memory"}}) {
    const int64_t id = run(flags + " --base-precision " + base);
    const Diagnosis diagnosis = diagnose(id, false);
    const Finding* finding = find(diagnosis, FindingKind::kMemoryNotReduced);
    ASSERT_NE(finding, nullptr) << base << ": " << to_json(diagnosis).dump();
    EXPECT_NE(finding->title.find("model states dominate"), std::string::npos) << finding->title;
    EXPECT_NE(finding->next_step.command_line().find(next), std::string::npos)
        << finding->next_step.command_line();
    // The estimated reference is a frozen base's: less than full training's states alone (16
    // bytes a parameter).
    RunStore store(db_, StoreAccess::kReadOnly, false);
    const std::string reference = evidence(*finding, "peak under none");
    ASSERT_NE(reference.find(" (estimated)"), std::string::npos) << reference;
    std::string bytes = reference.substr(0, reference.find(" ("));
    bytes.erase(std::remove(bytes.begin(), bytes.end(), ' '), bytes.end());
    EXPECT_LT(parse_byte_size(bytes, "reference"),
              16 * store.run(id).config.model.parameter_count())
        << reference;
  }
}

// Sharded runs are advised from what they shard already: gradients on 2 ranks shard the
// parameters next; parameters on 2 ranks add ranks, and never bf16 (fully sharded trains in
// fp32). Without a `none` run the reference is the estimator's for the same sharding.
TEST_F(AdviseDb, ShardedRunsAreAdvisedTheNextShardingStep) {
  const std::string flags = "--steps 2 --batch 1 --seq-len 16 --checkpoint every:1 --nproc 2 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--shard gradients",
       "--precision bf16 halves the weights and gradients; --shard "
       "parameters shards the weights over its 2 data ranks too"},
      {"--shard parameters",
       "--nproc 4 --shard parameters shards the model states over twice "
       "the data ranks"}};
  for (const auto& [shard, next] : cases) {
    const int64_t id = run(flags + shard);
    const Diagnosis diagnosis = diagnose(id, false);
    const Finding* finding = find(diagnosis, FindingKind::kMemoryNotReduced);
    ASSERT_NE(finding, nullptr) << shard << ": " << to_json(diagnosis).dump();
    EXPECT_NE(finding->title.find("model states dominate"), std::string::npos) << finding->title;
    EXPECT_EQ(finding->next_step.command_line(), next) << shard;
    // The estimated reference holds the states as sharded: less than one rank's whole states.
    RunStore store(db_, StoreAccess::kReadOnly, false);
    const int64_t whole_states = 16 * store.run(id).config.model.parameter_count();
    const std::string reference = evidence(*finding, "peak under none");
    ASSERT_NE(reference.find(" (estimated)"), std::string::npos) << reference;
    std::string bytes = reference.substr(0, reference.find(" ("));
    bytes.erase(std::remove(bytes.begin(), bytes.end(), ' '), bytes.end());  // "1.39 MiB"
    EXPECT_LT(parse_byte_size(bytes, "reference"), whole_states) << reference;
  }
}

// Expert ranks shard nothing: their states divide over more of them, never over --shard.
TEST_F(AdviseDb, ExpertParallelRunsAreAdvisedMoreExpertRanks) {
  const std::string flags =
      "--arch llama --experts 4 --steps 2 --batch 1 --seq-len 8 --nproc 2 --ep 2 --checkpoint ";
  run(flags + "none");
  const int64_t every = run(flags + "every:1");
  const Diagnosis diagnosis = diagnose(every, false);
  const Finding* finding = find(diagnosis, FindingKind::kMemoryNotReduced);
  ASSERT_NE(finding, nullptr) << to_json(diagnosis).dump();
  EXPECT_NE(finding->title.find("model states dominate"), std::string::npos) << finding->title;
  EXPECT_EQ(finding->next_step.command_line(),
            "--precision bf16 halves the weights and gradients; --nproc 4 --ep 4 gives each "
            "expert rank 1 of the 4 experts (now 2)");

  RunStore store(db_, StoreAccess::kReadOnly, false);
  // Six ranks over two expert ranks: four expert ranks must divide the ranks, so eight.
  RunRecord six = store.run(every);
  const std::vector<StepMetrics> steps = store.steps(every);
  six.config.world_size = 6;
  std::vector<Wording> notes;
  const std::optional<Finding> more = diagnose_memory(six, steps, store.run(every - 1), notes);
  ASSERT_TRUE(more);
  EXPECT_NE(more->next_step.command_line().find("--nproc 8 --ep 4 gives"), std::string::npos)
      << more->next_step.command_line();
  // Six experts over two expert ranks: three split them further (not only doubling).
  six.config.world_size = 2;
  six.config.model.moe.experts = 6;
  const std::optional<Finding> thirds = diagnose_memory(six, steps, store.run(every - 1), notes);
  ASSERT_TRUE(thirds);
  EXPECT_NE(thirds->next_step.command_line().find(
                "--nproc 3 --ep 3 gives each expert rank 2 of the 6 experts (now 3)"),
            std::string::npos)
      << thirds->next_step.command_line();
  // Twelve experts on four ranks: four expert ranks need no more ranks, which three would.
  six.config.world_size = 4;
  six.config.model.moe.experts = 12;
  const std::optional<Finding> same_ranks =
      diagnose_memory(six, steps, store.run(every - 1), notes);
  ASSERT_TRUE(same_ranks);
  EXPECT_NE(same_ranks->next_step.command_line().find("; --ep 4 gives each expert rank 3 of the "
                                                      "12 experts (now 6)"),
            std::string::npos)
      << same_ranks->next_step.command_line();
  // Counts no run could have (a hand-edited record) split nothing and end: no overflow, no loop.
  EXPECT_TRUE(more_expert_splits(4, INT64_MAX, 2, kMaxWorldSize).empty());
  EXPECT_TRUE(more_expert_splits(4, 2, INT64_MAX, kMaxWorldSize).empty());
  EXPECT_TRUE(more_expert_splits(4, 0, 2, kMaxWorldSize).empty());
  RunRecord hostile = store.run(every);
  hostile.config.ep = INT64_MAX;
  EXPECT_TRUE(unestimable(hostile.config).has_value());
  // Expert ranks beside tensor ranks or sharded states, which `run` refuses: said, not estimated
  // as if the experts were whole on each tensor rank.
  for (const auto& [tp, shard] : {std::pair<int64_t, std::string>{2, "none"}, {1, "optimizer"}}) {
    RunRecord edited = store.run(every);
    ASSERT_GT(edited.config.ep, 1);
    edited.config.tp = tp;
    edited.config.shard = shard;
    edited.config.world_size *= tp;
    const std::optional<std::string> why = unestimable(edited.config);
    ASSERT_TRUE(why.has_value()) << tp << " " << shard;
    EXPECT_NE(why->find("expert ranks"), std::string::npos) << *why;
  }
  // Without the `none` run its peak is estimated from one expert rank's states, not the whole
  // model's (at the rank load the steps recorded): close to what that run measured.
  const std::optional<Finding> estimated =
      diagnose_memory(store.run(every), steps, std::nullopt, notes);
  ASSERT_TRUE(estimated);
  const std::string reference = evidence(*estimated, "peak under none");
  std::string figure = reference.substr(0, reference.find(" ("));  // "12.3 MiB (estimated)"
  figure.erase(std::remove(figure.begin(), figure.end(), ' '), figure.end());
  const double estimate = static_cast<double>(parse_byte_size(figure, "peak under none"));
  const double measured = static_cast<double>(store.run(every - 1).result.peak_bytes);
  EXPECT_NEAR(estimate / measured, 1.0, 0.15) << reference;
}

TEST_F(AdviseDb, RecomputationIsSplitOutOfTheStepFromTheTimeline) {
  const int64_t none = run("--steps 6 --batch 16 --seq-len 128 --attention math --timeline");
  const int64_t every =
      run("--steps 6 --batch 16 --seq-len 128 --attention math --timeline --checkpoint every:1");
  RunStore store(db_, StoreAccess::kReadOnly, false);
  const StepSplit none_split = split_step(store.run(none), store.steps(none), store.timeline(none));
  const StepSplit every_split =
      split_step(store.run(every), store.steps(every), store.timeline(every));
  EXPECT_EQ(none_split.recompute, 0.0);
  EXPECT_GT(every_split.recompute, 0.0);
  EXPECT_EQ(every_split.recompute_source, "timeline");
  // Recomputing every block's forward costs time in backward: when the run is slower by more
  // than the threshold, the finding names recomputation as the largest added cost.
  const Diagnosis diagnosis = diagnose(every, false);
  const Finding* finding = find(diagnosis, FindingKind::kThroughputDropped);
  const double drop =
      1.0 - store.run(every).result.tokens_per_s / store.run(none).result.tokens_per_s;
  if (drop >= kThroughputDropThreshold) {
    ASSERT_NE(finding, nullptr) << to_json(diagnosis).dump();
    // On a busy machine the two runs' own step-time spread can exceed what recomputation adds:
    // the finding must then say so rather than name it (its evidence holds both figures).
    const double noise = std::stod(evidence(*finding, "noise").substr(std::string("±").size()));
    const double added = every_split.recompute - none_split.recompute;
    if (added > noise * 1.2) {
      EXPECT_NE(finding->title.find("recompute adds"), std::string::npos) << finding->title;
    } else if (added < noise * 0.8) {
      // Within the noise recomputation is not named: the finding says noise, or names another
      // part whose added time does stand out (backward slowed by a neighbour's load).
      EXPECT_EQ(finding->title.find("recompute adds"), std::string::npos) << finding->title;
    }
  } else {
    EXPECT_EQ(finding, nullptr);
  }
  // Without a `none` run the reference is the run less its recomputation, which the timeline
  // measured: the finding does not depend on timing noise between two runs. The run's own
  // spread still sets the noise margin, and a loaded machine can spread its steps by more than
  // recomputation costs (the verdict is then "noise", as above); from here on its steps are
  // held at their median time, so that what follows is about the advice, not the machine.
  std::vector<StepMetrics> quiet = store.steps(every);
  std::vector<double> times;
  for (const StepMetrics& step : quiet) times.push_back(step.step_ms);
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  for (StepMetrics& step : quiet) step.step_ms = times[times.size() / 2];
  const std::optional<Finding> estimated =
      diagnose_throughput(store.run(every), quiet, store.timeline(every), std::nullopt, {});
  ASSERT_TRUE(estimated) << every_split.recompute << " ms recomputed";
  EXPECT_NE(estimated->title.find("recompute adds"), std::string::npos) << estimated->title;
  EXPECT_NE(evidence(*estimated, "compared with").find("estimated"), std::string::npos);
  // The next step is the plan that fits the memory this run used (5 % above it, for the
  // prediction's margin, in whole MiB).
  const auto used_mib = static_cast<int64_t>(std::ceil(
      static_cast<double>(store.run(every).result.peak_activation_bytes) * 1.05 / 1048576.0));
  EXPECT_NE(estimated->next_step.command_line().find(
                "--checkpoint plan:" + std::to_string(used_mib) + "MiB"),
            std::string::npos)
      << estimated->next_step.command_line();
  // Not for what a plan cannot stand in for: offload, several ranks, no measured peak.
  for (const auto& change : std::vector<std::function<void(RunRecord&)>>{
           [](RunRecord& r) { r.config.offload = "disk"; },
           [](RunRecord& r) { r.config.world_size = 2; },
           [](RunRecord& r) { r.result.peak_activation_bytes = 0; }}) {
    RunRecord other = store.run(every);
    change(other);
    const auto unplannable =
        diagnose_throughput(other, quiet, store.timeline(every), std::nullopt, {});
    ASSERT_TRUE(unplannable);
    EXPECT_EQ(unplannable->next_step.command_line().find("plan:"), std::string::npos)
        << unplannable->next_step.command_line();
  }
  // A planned run is already that plan: more memory is what helps.
  RunRecord planned = store.run(every);
  planned.request.plan = PlannedPolicy{};
  planned.request.plan->requested = "plan:5MiB";
  planned.request.plan->chosen = "segments:a0-m1";
  const std::optional<Finding> of_plan =
      diagnose_throughput(planned, quiet, store.timeline(every), std::nullopt, {});
  ASSERT_TRUE(of_plan);
  EXPECT_NE(of_plan->next_step.command_line().find("fastest plan found for plan:5MiB"),
            std::string::npos)
      << of_plan->next_step.command_line();
}

// Steps whose phases take these times (ms), the step time alternating by ±jitter around their
// sum: a run's own noise.
std::vector<StepMetrics> steps_of(double forward, double backward, double optimizer,
                                  double jitter) {
  std::vector<StepMetrics> steps;
  for (int64_t i = 0; i < 20; ++i) {
    StepMetrics step;
    step.step = i;
    step.forward_ms = forward;
    step.backward_ms = backward;
    step.optimizer_ms = optimizer;
    step.step_ms = forward + backward + optimizer + (i % 2 == 0 ? jitter : -jitter);
    steps.push_back(step);
  }
  return steps;
}

// The hands-on test's selective run: backward adds 0.71 ms and its recomputation 0.70 ms.
struct SelectiveAgainstNone {
  RunRecord run, none;
  std::vector<TimelinePoint> timeline = {{0.0, 0, MemoryPhase::kRecompute},
                                         {0.70, 0, MemoryPhase::kIdle}};
  SelectiveAgainstNone() {
    none.id = 1;
    none.config = tiny();
    none.status = RunStatus::kOk;
    none.result.tokens_per_s = 1000.0;
    run = none;
    run.id = 2;
    run.config.checkpoint = "selective";
    run.result.tokens_per_s = 880.0;
    run.result.peak_activation_bytes = 8 << 20;
  }
};

TEST(ThroughputFinding, AgreesWithItsEvidenceAndHasANoiseMargin) {
  SelectiveAgainstNone runs;
  // Quiet runs (±0.02 ms): recomputation's 0.70 ms is well above the noise. Backward adds a
  // hundredth more; the finding must not then say the time is not recomputation.
  const auto quiet = diagnose_throughput(runs.run, steps_of(10.0, 11.41, 2.0, 0.02), runs.timeline,
                                         runs.none, steps_of(10.0, 10.0, 2.0, 0.02));
  ASSERT_TRUE(quiet);
  EXPECT_NE(quiet->title.find("backward adds 0.71 ms per step, recompute 0.70 ms"),
            std::string::npos)
      << quiet->title;
  EXPECT_EQ(quiet->next_step.command_line().find("not recomputation"), std::string::npos)
      << quiet->next_step.command_line();
  EXPECT_NE(quiet->next_step.command_line().find("--checkpoint plan:"), std::string::npos)
      << quiet->next_step.command_line();
  bool backward_said_apart = false, noise_said = false;
  for (const Evidence& item : quiet->evidence) {
    backward_said_apart =
        backward_said_apart || item.label == "backward (recompute and offload waits apart)";
    noise_said = noise_said || item.label == "noise";
  }
  EXPECT_TRUE(backward_said_apart);
  EXPECT_TRUE(noise_said);
  // Noisy runs (±2 ms, an interquartile range of 4 ms each): neither phase is told apart from
  // the noise, and the finding says that rather than pick one by a hundredth of a millisecond.
  const auto noisy = diagnose_throughput(runs.run, steps_of(10.0, 11.41, 2.0, 2.0), runs.timeline,
                                         runs.none, steps_of(10.0, 10.0, 2.0, 2.0));
  ASSERT_TRUE(noisy);
  EXPECT_NE(noisy->title.find("no phase adds more than the runs' own noise"), std::string::npos)
      << noisy->title;
  EXPECT_NE(
      noisy->next_step.command_line().find("not recomputation (it adds 0.70 ms, within the noise)"),
      std::string::npos)
      << noisy->next_step.command_line();
}

TEST(ReferenceRun, TheNoneRunIsMatchedOnWhatChangesAStepsCostAndTheRestIsSaid) {
  RunRecord run;
  run.id = 10;
  run.config = tiny();
  run.config.checkpoint = "every:1";
  run.config.lr = 1e-3;
  run.config.steps = 100;
  auto none = [&](int64_t id, const std::function<void(RunConfig&)>& change) {
    RunRecord other = run;
    other.id = id;
    other.status = RunStatus::kOk;
    other.has_result = true;
    other.config.checkpoint = "none";
    change(other.config);
    return other;
  };
  const RunRecord other_lr = none(3, [](RunConfig& c) {
    c.lr = 3e-3;
    c.steps = 50;
    c.seed = 7;
  });
  const RunRecord other_batch = none(4, [](RunConfig& c) { c.batch = 16; });
  const RunRecord other_threads = none(5, [](RunConfig& c) { c.threads = 2; });
  const RunRecord other_precision = none(6, [](RunConfig& c) { c.precision = Precision::kBf16; });
  auto found = find_none_run(run, {other_lr, other_batch, other_threads, other_precision});
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, 3);
  const std::string differs = describe_differences(run.config, found->config);
  EXPECT_NE(differs.find("lr 0.003"), std::string::npos) << differs;
  EXPECT_NE(differs.find("steps 50"), std::string::npos) << differs;
  EXPECT_NE(differs.find("seed 7"), std::string::npos) << differs;
  EXPECT_EQ(differs.find("checkpoint"), std::string::npos) << differs;
  // One that differs in fewer settings is the closer reference, even when older.
  const RunRecord same = none(2, [](RunConfig&) {});
  found = find_none_run(run, {other_lr, same});
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, 2);
  EXPECT_TRUE(describe_differences(run.config, found->config).empty());
}

// A run whose record held settings this build could not read has their defaults in its config:
// as a reference it could match a run it does not match, and given one it would be compared
// with another configuration. Neither happens.
TEST(ReferenceRun, ARunWithSettingsThisVersionCannotReadIsNoReferenceNorGivenOne) {
  RunRecord run;
  run.id = 10;
  run.config = tiny();
  run.config.checkpoint = "every:1";
  RunRecord none = run;
  none.id = 3;
  none.status = RunStatus::kOk;
  none.has_result = true;
  none.config.checkpoint = "none";
  RunRecord edited = none;
  edited.id = 4;  // newer, and the same in every setting read: it would be chosen
  edited.unread_config_fields = {"future_setting"};
  auto found = find_none_run(run, {none, edited});
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, 3);
  EXPECT_FALSE(find_none_run(run, {edited}));
  RunRecord unread_run = run;
  unread_run.unread_config_fields = {"future_setting"};
  EXPECT_FALSE(find_none_run(unread_run, {none}));
}

// The advisor does not diagnose a run from the defaults of settings its record held that this
// build could not read (a replay, an estimate or a reference would be of another configuration):
// it says so, naming them; and such a run is not the `none` reference of another.
TEST_F(AdviseDb, ARunWithASettingThisVersionCannotReadIsNotDiagnosedFromDefaults) {
  const int64_t none = run("--steps 2");
  const int64_t every = run("--steps 2 --checkpoint every:1");
  auto notes_of = [](const Diagnosis& diagnosis) {
    std::string text;
    for (const Wording& note : diagnosis.notes) text += note.command_line() + "\n";
    return text;
  };
  const std::string compared = "compared with run #" + std::to_string(none) + " (none)";
  EXPECT_NE(notes_of(diagnose(every, false)).find(compared), std::string::npos)
      << notes_of(diagnose(every, false));
  auto edit = [&](int64_t id) {
    Database(db_, Database::Mode::kReadWrite)
        .exec("UPDATE runs SET config = json_set(config, '$.future_setting', 1) WHERE id = " +
              std::to_string(id));
  };
  edit(none);
  EXPECT_EQ(notes_of(diagnose(every, false)).find(compared), std::string::npos)
      << notes_of(diagnose(every, false));
  edit(every);
  const Diagnosis diagnosis = diagnose(every, true);
  EXPECT_TRUE(diagnosis.findings.empty()) << to_json(diagnosis).dump();
  EXPECT_TRUE(diagnosis.checked.empty()) << to_json(diagnosis).dump();
  ASSERT_EQ(diagnosis.notes.size(), 1u) << to_json(diagnosis).dump();
  const std::string note = diagnosis.notes[0].command_line();
  EXPECT_NE(note.find("not known to this version (a newer RematLab or a hand edit): its "
                      "future_setting could not be read"),
            std::string::npos)
      << note;
}

TEST_F(AdviseDb, AnOomRunIsExplainedWithABudgetAndABatchThatFit) {
  nlohmann::json ok;
  run("--steps 3 --batch 8", &ok);
  const int64_t peak = ok.at("peak_bytes").get<int64_t>();
  // Eight times the batch under a fifth more than batch 8 needed: out of memory.
  const std::string budget = std::to_string(peak + peak / 5);
  const int64_t oom = run("--steps 3 --batch 64 --budget " + budget);
  const Diagnosis diagnosis = diagnose(oom, false);
  const Finding* finding = find(diagnosis, FindingKind::kDidNotFinish);
  ASSERT_NE(finding, nullptr) << to_json(diagnosis).dump();
  EXPECT_NE(finding->title.find("ended oom: step 0 peaked at"), std::string::npos)
      << finding->title;
  // The smallest budget for batch 64 is above what batch 64 measured; the largest batch under
  // the budget is smaller than 64, and trains within it.
  RunStore store(db_, StoreAccess::kReadOnly, false);
  const int64_t measured = store.steps(oom).front().peak_bytes;
  const std::string& next = finding->next_step.command_line();
  const auto budget_at = next.find("--budget ");
  ASSERT_NE(budget_at, std::string::npos) << next;
  EXPECT_GE(
      parse_byte_size(next.substr(budget_at + 9, next.find(' ', budget_at + 9) - budget_at - 9),
                      "budget"),
      measured)
      << next;
  expect_advised_batch_fits(next, budget, "--steps 3");
}

// A stored configuration no run of this version could have made (edited by hand: no heads, or a
// tensor layout that cannot split the model) is named as not checked, never divided by.
TEST_F(AdviseDb, AStoredShapeOrLayoutTheEstimatorRefusesIsNotCheckedNotDividedBy) {
  const int64_t id = run("--steps 2 --checkpoint every:1");
  for (const char* edit : {"json_set(config, '$.heads', 0, '$.kv_heads', 0)",
                           "json_set(config, '$.heads', 4, '$.kv_heads', 4, '$.tp', -3)"}) {
    Database(db_, Database::Mode::kReadWrite)
        .exec("UPDATE runs SET config = " + std::string(edit) +
              " WHERE id = " + std::to_string(id));
    const Diagnosis diagnosis = diagnose(id, false);
    bool named = false;
    for (const Wording& note : diagnosis.notes) {
      named = named || note.command_line().find("memory: not checked") != std::string::npos;
    }
    EXPECT_TRUE(named) << edit << ": " << to_json(diagnosis).dump();
    for (const Wording& checked : diagnosis.checked) {
      EXPECT_EQ(checked.command_line().find("memory:"), std::string::npos) << edit;
    }
  }
}

// The same under tensor parallelism: the estimator's figures are one tensor rank's, as the
// budget and the measured peak are, so the batch it gives trains within the budget on 2 ranks.
TEST_F(AdviseDb, ATensorParallelOomRunIsAdvisedFromOneRanksFigures) {
  const std::string layout = " --nproc 2 --tp 2";
  nlohmann::json ok;
  run("--steps 2 --batch 8" + layout, &ok);
  const std::string budget = std::to_string(ok.at("peak_bytes").get<int64_t>() * 6 / 5);
  const int64_t oom = run("--steps 2 --batch 64 --budget " + budget + layout);
  const Diagnosis diagnosis = diagnose(oom, false);
  const Finding* finding = find(diagnosis, FindingKind::kDidNotFinish);
  ASSERT_NE(finding, nullptr) << to_json(diagnosis).dump();
  bool estimated = false;
  for (const auto& evidence : finding->evidence) {
    estimated = estimated || evidence.label == "a step at batch 64 needs (estimated)";
  }
  EXPECT_TRUE(estimated) << to_json(diagnosis).dump();
  const std::string& next = finding->next_step.command_line();
  expect_advised_batch_fits(next, budget, "--steps 2" + layout);
}

// An expert-parallel run that ran out of memory is estimated at the loads its steps recorded
// (the fullest rank's experts hold that many times their own tokens' rows, its busiest block's
// alone at least as many, its busiest expert's); a hand-edited load no run records (beyond
// what --ep allows, infinite, below 1, text) as none.
TEST_F(AdviseDb, AnExpertParallelOomRunIsEstimatedAtItsRecordedRankLoad) {
  const testing::CliResult result =
      cli("run --preset moe-tiny --threads 1 --nproc 2 --ep 2 --steps 2 --checkpoint every:1 "
          "--json --db " +
          db_);  // recomputed: a block rebuilt alone holds its own load
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const int64_t id = last_line_json(result.out).at("run_id").get<int64_t>();
  // As if a third step had gone over a budget of 1 MiB (an oom run keeps the steps before it).
  Database(db_, Database::Mode::kReadWrite)
      .exec(
          "UPDATE runs SET status = 'oom', config = json_set(config, '$.budget_bytes', 1048576) "
          "WHERE id = " +
          std::to_string(id));
  const RunConfig config = RunStore(db_, StoreAccess::kReadOnly, false).run(id).config;
  const std::string label =
      "a step at batch " + std::to_string(config.batch) + " needs (estimated)";
  // The busiest expert's load as the steps hold it (moe-tiny's, within its range of 1 to 2).
  const double expert_load = most_recorded(RunStore(db_, StoreAccess::kReadOnly, false).steps(id),
                                           &StepMetrics::expert_load);
  ASSERT_GE(expert_load, 1.0);
  // The steps' rank loads set to `load`, their busiest block's to `block` (`load` when empty).
  auto advised_at = [&](const std::string& load, const std::string& block = "") {
    Database(db_, Database::Mode::kReadWrite)
        .exec("UPDATE steps SET expert_rank_load = " + load + ", expert_block_load = " +
              (block.empty() ? load : block) + " WHERE run_id = " + std::to_string(id));
    const Diagnosis diagnosis = diagnose(id, false);
    const Finding* finding = find(diagnosis, FindingKind::kDidNotFinish);
    return finding ? evidence(*finding, label) : std::string("no finding");
  };
  auto estimated_at = [&](double load, std::optional<double> block = std::nullopt) {
    estimate::EstimateRequest request;
    request.arch = estimate::from_model_config(config.model);
    request.arch->expert_rank_load = load;
    request.arch->expert_block_load = block;
    request.arch->expert_load = expert_load;
    request.checkpoint = "every:1";
    request.batch = config.batch;
    request.world_size = 2;
    request.expert_ranks = 2;
    request.device_memories = {1048576};
    return format_bytes(estimate::make_estimate(request).fits.front().needed_bytes);
  };
  EXPECT_EQ(advised_at("1.0"), estimated_at(1.0));
  EXPECT_EQ(advised_at("1.75"), estimated_at(1.75));
  EXPECT_NE(estimated_at(1.75), estimated_at(1.0));
  for (const char* hostile : {"9.0", "9e999", "-1", "0.5", "'abc'"}) {
    EXPECT_EQ(advised_at(hostile), estimated_at(1.0)) << hostile;
    // A hand-edited block load alone: the block is taken at the step's load.
    EXPECT_EQ(advised_at("1.25", hostile), estimated_at(1.25)) << hostile;
  }
  // A busiest block above the step's mean sizes what a block holds alone.
  EXPECT_EQ(advised_at("1.25", "1.75"), estimated_at(1.25, 1.75));
  EXPECT_NE(estimated_at(1.25, 1.75), estimated_at(1.25));
  // One step edited by hand does not discard what the other step recorded.
  advised_at("1.75");
  Database(db_, Database::Mode::kReadWrite)
      .exec("UPDATE steps SET expert_rank_load = 9e999 WHERE run_id = " + std::to_string(id) +
            " AND step = (SELECT min(step) FROM steps WHERE run_id = " + std::to_string(id) + ")");
  const Diagnosis diagnosis = diagnose(id, false);
  const Finding* finding = find(diagnosis, FindingKind::kDidNotFinish);
  ASSERT_NE(finding, nullptr);
  EXPECT_EQ(evidence(*finding, label), estimated_at(1.75));
}

// A pipeline run is estimated stage by stage, by the layout planner's fullest stage (the run's
// peak is its fullest stage's): without its `none` run, the peak under none is estimated within
// 5 % of what that run measured, and the evidence names the stage.
TEST_F(AdviseDb, APipelineRunIsEstimatedStageByStage) {
  const std::string stages = " --nproc 2 --pp 2 --accum 2 --steps 2 --batch 4";
  nlohmann::json none;
  run("--checkpoint none" + stages, &none);
  const int64_t selective = run("--checkpoint selective" + stages);
  RunStore store(db_, StoreAccess::kReadOnly, false);
  EXPECT_FALSE(unestimable(store.run(selective).config).has_value());
  std::vector<Wording> notes;
  const std::optional<Finding> finding =
      diagnose_memory(store.run(selective), store.steps(selective), std::nullopt, notes);
  ASSERT_TRUE(finding);
  EXPECT_NE(finding->title.find("selective under fused attention"), std::string::npos)
      << finding->title;
  const std::string reference = evidence(*finding, "peak under none");
  ASSERT_NE(reference.find(" (estimated, the fullest stage's)"), std::string::npos) << reference;
  std::string figure = reference.substr(0, reference.find(" ("));
  figure.erase(std::remove(figure.begin(), figure.end(), ' '), figure.end());
  const double estimated = static_cast<double>(parse_byte_size(figure, "peak under none"));
  const double measured = static_cast<double>(none.at("peak_bytes").get<int64_t>());
  EXPECT_NEAR(estimated / measured, 1.0, 0.05) << reference << " against " << measured;
  EXPECT_NE(evidence(*finding, "stage 0's activations under none (estimated)"), "")
      << to_json(*finding).dump();
  // The whole diagnosis checks memory rather than saying it cannot.
  const Diagnosis diagnosis = diagnose(selective, false);
  for (const Wording& note : diagnosis.notes) {
    EXPECT_EQ(note.command_line().find("memory: not checked"), std::string::npos)
        << note.command_line();
  }
}

// Stages whose model states dominate are advised to shard what the engine shards on stages (the
// gradients and optimizer state), never the parameters, which it refuses beside --pp.
TEST_F(AdviseDb, APipelineRunIsNotAdvisedShardedParameters) {
  const std::string stages = " --nproc 2 --pp 2 --accum 2 --steps 2 --batch 1 --seq-len 16";
  run("--checkpoint none" + stages);
  const int64_t every = run("--checkpoint every:1" + stages);
  const Diagnosis diagnosis = diagnose(every, false);
  const Finding* finding = find(diagnosis, FindingKind::kMemoryNotReduced);
  ASSERT_NE(finding, nullptr) << to_json(diagnosis).dump();
  EXPECT_NE(finding->title.find("model states dominate"), std::string::npos) << finding->title;
  const std::string& next = finding->next_step.command_line();
  EXPECT_EQ(next.find("--shard parameters"), std::string::npos) << next;
  EXPECT_NE(next.find("--nproc 4 --shard gradients"), std::string::npos) << next;
}

// An out-of-memory pipeline run: the batch the planner gives from the fullest stage trains within
// the budget on the same stages (measured: batch 9 fits tiny's 2 stages where 10 does not).
TEST_F(AdviseDb, APipelineOomRunIsAdvisedFromItsFullestStage) {
  const std::string stages = " --nproc 2 --pp 2 --accum 2";
  nlohmann::json ok;
  run("--steps 2 --batch 8" + stages, &ok);
  const std::string budget = std::to_string(ok.at("peak_bytes").get<int64_t>() * 6 / 5);
  const int64_t oom = run("--steps 2 --batch 64 --budget " + budget + stages);
  const Diagnosis diagnosis = diagnose(oom, false);
  const Finding* finding = find(diagnosis, FindingKind::kDidNotFinish);
  ASSERT_NE(finding, nullptr) << to_json(diagnosis).dump();
  EXPECT_NE(evidence(*finding, "a step at batch 64 needs (estimated)"), "")
      << to_json(diagnosis).dump();
  const std::string& next = finding->next_step.command_line();
  // max-batch measures one process, not stages: not offered.
  EXPECT_EQ(next.find("max-batch"), std::string::npos) << next;
  expect_advised_batch_fits(next, budget, "--steps 2" + stages);
}

// Stages under segment lists (what plan:BUDGET records) are checked; a stage policy the planner
// does not evaluate (keep: in a hand-edited record) is said as not checked, naming it, never
// estimated as something else.
TEST_F(AdviseDb, APipelineStagePolicyThePlannerDoesNotEvaluateIsNotChecked) {
  auto memory_unchecked = [this](int64_t run_id) {
    bool said = false;
    for (const Wording& note : diagnose(run_id, false).notes) {
      said = said || note.command_line().find("memory: not checked") != std::string::npos;
    }
    return said;
  };
  const int64_t listed =
      run("--checkpoint stages:segments:m0/none --nproc 2 --pp 2 --accum 2 --steps 2");
  EXPECT_FALSE(unestimable(RunStore(db_, StoreAccess::kReadOnly, false).run(listed).config));
  EXPECT_FALSE(memory_unchecked(listed));
  const int64_t id = run("--checkpoint every:1 --nproc 2 --pp 2 --accum 2 --steps 2");
  Database(db_, Database::Mode::kReadWrite)
      .exec("UPDATE runs SET config = json_set(config, '$.checkpoint', 'keep:qkv') WHERE id = " +
            std::to_string(id));
  const std::optional<std::string> why =
      unestimable(RunStore(db_, StoreAccess::kReadOnly, false).run(id).config);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("pipeline stages: "), std::string::npos) << *why;
  EXPECT_NE(why->find("keep:qkv"), std::string::npos) << *why;
  EXPECT_TRUE(memory_unchecked(id));
  // A split beside one process (edited by hand, not adding up to the blocks) is no pipeline's:
  // the run is diagnosed as one process, the split passed over, nothing thrown.
  // (stages:none/none reduces nothing: the finding names the plan it keeps, split by the rule.)
  const int64_t one = run("--checkpoint stages:none/none --steps 2");
  Database(db_, Database::Mode::kReadWrite)
      .exec("UPDATE runs SET config = json_set(config, '$.pp_split', json('[1, 5]')) WHERE id = " +
            std::to_string(one));
  Diagnosis edited;
  ASSERT_NO_THROW(edited = diagnose(one, false));
  EXPECT_NE(find(edited, FindingKind::kMemoryNotReduced), nullptr) << to_json(edited).dump();
}

}  // namespace
}  // namespace rematlab::advise
