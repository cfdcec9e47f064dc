// The planner: the peak and time it predicts for a plan, and the plan it chooses under a
// budget, checked against every plan of small chains.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <random>

#include "checkpoint/checkpoint_policy.h"
#include "checkpoint/stage_blocks.h"
#include "common/errors.h"
#include "model/model_config.h"
#include "parallel/pipeline_schedule.h"
#include "plan/chain_costs_json.h"
#include "plan/chain_profile.h"
#include "plan/frontier.h"
#include "plan/plan_policy.h"
#include "plan/plan_prediction.h"
#include "plan/profile_key.h"
#include "plan/segment_planner.h"
#include "plan/stage_plans.h"
#include "scratch_dir.h"
#include "store/profile_registry.h"
#include "store/run_store.h"
#include "train/trainer.h"

namespace rematlab::plan {
namespace {

// Two stages that each keep 10 and output 2, on an input of 2; the head needs 5 more.
ChainCosts two_stages() {
  ChainCosts costs;
  costs.input_bytes = 2;
  costs.head_peak_bytes = 5;
  costs.fixed_ms = 1.0;
  for (int i = 0; i < 2; ++i) {
    StageCost stage;
    stage.forward_ms = 3.0;
    stage.backward_ms = 6.0;
    stage.kept_bytes = 10;
    stage.output_bytes = 2;
    stage.forward_transient_bytes = 1;
    stage.backward_transient_bytes = 4;
    costs.stages.push_back(stage);
  }
  return costs;
}

TEST(PlanPrediction, KeepingEverythingHoldsEveryStageAtTheHead) {
  const PlanPrediction none = predict_plan(two_stages(), CheckpointPolicy::none().plan_for(1, 0));
  EXPECT_EQ(none.peak_bytes, 2 + 10 + 10 + 5);  // input, both stages, the head
  EXPECT_DOUBLE_EQ(none.step_ms, 2 * (3.0 + 6.0) + 1.0);
  EXPECT_DOUBLE_EQ(none.recompute_ms, 0.0);
}

TEST(PlanPrediction, ARecomputedSegmentHoldsItsOutputUntilBackwardRebuildsIt) {
  const CheckpointPlan plan = CheckpointPolicy::parse("every:1").plan_for(1, 0);
  const PlanPrediction one = predict_plan(two_stages(), plan);
  // Backward of the segment: input 2, both stages rebuilt 20, the second's transient 4.
  EXPECT_EQ(one.peak_bytes, 2 + 20 + 4);
  EXPECT_DOUBLE_EQ(one.recompute_ms, 6.0);
  EXPECT_DOUBLE_EQ(one.step_ms, 2 * (3.0 + 6.0) + 6.0 + 1.0);
  // Two segments of one stage: at most one stage rebuilt at a time.
  const PlanPrediction two =
      predict_plan(two_stages(), CheckpointPolicy::parse("segments:a0,m0").plan_for(1, 0));
  EXPECT_LT(two.peak_bytes, one.peak_bytes);
  EXPECT_DOUBLE_EQ(two.step_ms, one.step_ms);
}

// Every plan of a chain: each stage kept or recomputed, recomputed neighbours in one segment
// or two.
void each_plan(int64_t stages, const std::function<void(const CheckpointPlan&)>& visit) {
  std::function<void(CheckpointPlan&, int64_t)> extend = [&](CheckpointPlan& plan, int64_t at) {
    if (at == stages) {
      visit(plan);
      return;
    }
    for (int64_t end = at + 1; end <= stages; ++end) {
      plan.segments.push_back({at, end, true});
      extend(plan, end);
      plan.segments.pop_back();
    }
    plan.segments.push_back({at, at + 1, false});
    extend(plan, at + 1);
    plan.segments.pop_back();
  };
  CheckpointPlan plan;
  extend(plan, 0);
}

ChainCosts random_chain(std::mt19937& random, int64_t stages, int64_t unit) {
  auto bytes = [&](int low, int high) {
    return unit * static_cast<int64_t>(low + random() % (high - low + 1));
  };
  ChainCosts costs;
  costs.input_bytes = bytes(1, 3);
  costs.head_peak_bytes = bytes(2, 12);
  for (int64_t i = 0; i < stages; ++i) {
    StageCost stage;
    stage.forward_ms = 1.0 + static_cast<double>(random() % 50) / 7.0;
    stage.backward_ms = 2.0 * stage.forward_ms;
    stage.early_stop_saving_ms = stage.forward_ms * static_cast<double>(random() % 60) / 100.0;
    stage.output_bytes = bytes(1, 3);
    stage.kept_bytes = stage.output_bytes + bytes(0, 12);
    stage.forward_transient_bytes = bytes(0, 5);
    stage.backward_transient_bytes = 2 * stage.output_bytes + bytes(0, 4);
    costs.stages.push_back(stage);
  }
  return costs;
}

// Sizes in whole slots, so rounding loses nothing and the planner must find the optimum itself.
TEST(SegmentPlanner, FindsTheFastestPlanThatFitsAmongAllPlans) {
  std::mt19937 random(7);
  const int64_t unit = 1024;
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t stages = 3 + trial % 5;
    const ChainCosts costs = random_chain(random, stages, unit);
    int64_t lowest_peak = std::numeric_limits<int64_t>::max();
    int64_t none_peak = 0;
    each_plan(stages, [&](const CheckpointPlan& plan) {
      const int64_t peak = predict_plan(costs, plan).peak_bytes;
      lowest_peak = std::min(lowest_peak, peak);
      if (plan.recomputed_segments() == 0) none_peak = peak;
    });
    for (int64_t budget = lowest_peak - unit; budget <= none_peak + unit; budget += unit) {
      double fastest = std::numeric_limits<double>::infinity();
      each_plan(stages, [&](const CheckpointPlan& plan) {
        const PlanPrediction p = predict_plan(costs, plan);
        if (p.peak_bytes <= budget) fastest = std::min(fastest, p.step_ms);
      });
      const int slots = static_cast<int>(budget / unit);
      const auto planned = plan_under_budget(costs, budget, slots);
      if (fastest == std::numeric_limits<double>::infinity()) {
        EXPECT_FALSE(planned.has_value()) << "trial " << trial << ", budget " << budget;
        continue;
      }
      ASSERT_TRUE(planned.has_value()) << "trial " << trial << ", budget " << budget;
      EXPECT_LE(planned->prediction.peak_bytes, budget) << planned->plan.canonical();
      EXPECT_DOUBLE_EQ(planned->prediction.step_ms, fastest)
          << "trial " << trial << ", budget " << budget << ": " << planned->plan.canonical();
    }
  }
}

TEST(SegmentPlanner, WithRoomForEverythingItRecomputesNothing) {
  std::mt19937 random(11);
  const ChainCosts costs = random_chain(random, 24, 1 << 20);
  const PlanPrediction none = predict_plan(costs, CheckpointPolicy::none().plan_for(12, 0));
  const auto planned = plan_under_budget(costs, none.peak_bytes);
  ASSERT_TRUE(planned.has_value());
  EXPECT_EQ(planned->plan.canonical(), "none");
  EXPECT_DOUBLE_EQ(planned->prediction.recompute_ms, 0.0);
}

TEST(SegmentPlanner, BelowTheSmallestFeasibleBudgetThereIsNoPlan) {
  std::mt19937 random(3);
  const ChainCosts costs = random_chain(random, 8, 1000);
  int64_t lowest_peak = std::numeric_limits<int64_t>::max();
  each_plan(8, [&](const CheckpointPlan& plan) {
    lowest_peak = std::min(lowest_peak, predict_plan(costs, plan).peak_bytes);
  });
  const int64_t smallest = smallest_feasible_budget(costs);
  // Rounding to slots can only make the planner ask for more, by at most a slot and the search's
  // last step.
  EXPECT_GE(smallest, lowest_peak);
  EXPECT_LE(smallest, lowest_peak + lowest_peak / 200);
  EXPECT_FALSE(plan_under_budget(costs, lowest_peak - 1).has_value());
  EXPECT_TRUE(plan_under_budget(costs, smallest).has_value());
}

// The ladder the CLI prints and the Plan tab samples its frontier on: from the smallest budget a
// plan fits to none's peak, where the plan is none; the uniform policies predicted alike.
TEST(Frontier, TheLadderRunsFromTheSmallestFeasibleBudgetToNonesPeak) {
  std::mt19937 random(7);
  const ChainCosts costs = random_chain(random, 12, 1 << 20);
  const auto budgets = ladder_budgets(costs, 6);
  ASSERT_EQ(budgets.size(), 6u);
  EXPECT_EQ(budgets.front(), smallest_feasible_budget(costs));
  EXPECT_EQ(budgets.back(), none_peak_bytes(costs));
  EXPECT_TRUE(std::is_sorted(budgets.begin(), budgets.end()));
  EXPECT_EQ(plan_under_budget(costs, budgets.back())->plan.canonical(), "none");
  const auto uniform = predict_uniform_policies(costs, 6);
  ASSERT_EQ(uniform.size(), 4u + 6u);  // none, three sublayer:A,F, every:1 … every:6
  EXPECT_EQ(uniform[0].policy, "none");
  EXPECT_EQ(uniform[0].prediction.peak_bytes, none_peak_bytes(costs));
  EXPECT_EQ(uniform.back().policy, "every:6");
  EXPECT_EQ(uniform[4].prediction.peak_bytes,
            predict_plan(costs, CheckpointPolicy::parse("every:1").plan_for(6, 0)).peak_bytes);
}

TEST(SegmentPlanner, AMoreGenerousBudgetIsNeverSlower) {
  std::mt19937 random(5);
  const ChainCosts costs = random_chain(random, 32, 1 << 16);
  const int64_t smallest = smallest_feasible_budget(costs);
  double previous = std::numeric_limits<double>::infinity();
  for (int64_t budget = smallest; budget < 4 * smallest; budget += smallest / 8) {
    const auto planned = plan_under_budget(costs, budget);
    ASSERT_TRUE(planned.has_value()) << budget;
    EXPECT_LE(planned->prediction.step_ms, previous + 1e-9) << budget;
    EXPECT_LE(planned->prediction.peak_bytes, budget);
    previous = planned->prediction.step_ms;
  }
}

// The prediction from a real profile against the allocator's measured peak of real training, for
// the uniform policies and for plans the planner chose: the ±5 % the planner promises.
class MeasuredPlans : public ::testing::TestWithParam<std::string> {};

TEST_P(MeasuredPlans, PredictedPeaksAreWithinFivePercentOfMeasured) {
  RunConfig config;
  config.model = model_preset(GetParam());
  config.model.layers = 3;
  config.batch = 8;
  config.threads = 1;
  config.steps = 2;
  ProfileOptions options;
  options.repeats = 1;
  const ChainCosts costs = profile_chain(config, options);
  ASSERT_EQ(costs.stages.size(), 6u);
  std::vector<std::string> policies = {"none", "every:1", "every:2", "sublayer:1,1"};
  const int64_t smallest = smallest_feasible_budget(costs);
  const int64_t none_peak = predict_plan(costs, CheckpointPolicy::none().plan_for(3, 0)).peak_bytes;
  for (int64_t budget : {smallest, (smallest + none_peak) / 2}) {
    const auto planned = plan_under_budget(costs, budget);
    ASSERT_TRUE(planned.has_value()) << budget;
    policies.push_back(planned->plan.canonical());
  }
  for (const std::string& policy : policies) {
    config.checkpoint = policy;
    const int64_t predicted =
        predict_plan(costs, CheckpointPolicy::parse(policy).plan_for(3, 0)).peak_bytes;
    const RunSummary measured = Trainer(config).run();
    ASSERT_EQ(measured.status, RunStatus::kOk) << policy;
    const double ratio = static_cast<double>(measured.peak_activation_bytes) / predicted;
    EXPECT_NEAR(ratio, 1.0, 0.05) << GetParam() << " " << policy << ": measured "
                                  << measured.peak_activation_bytes << ", predicted " << predicted;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, MeasuredPlans, ::testing::Values("tiny", "llama-tiny"),
                         [](const auto& param_info) {
                           return param_info.param == "tiny" ? std::string("gpt") : "llama";
                         });

RunConfig tiny_run(const std::string& checkpoint) {
  RunConfig config;
  config.model = model_preset("tiny");
  config.model.layers = 3;
  config.batch = 8;
  config.threads = 1;
  config.steps = 2;
  config.checkpoint = checkpoint;
  return config;
}

TEST(PlannedPolicy, IsAPolicyWithABudgetAndNoPlanUntilARunChoosesOne) {
  const CheckpointPolicy policy = CheckpointPolicy::parse("plan:200MiB");
  EXPECT_TRUE(policy.is_plan());
  EXPECT_EQ(policy.plan_budget_bytes(), int64_t{200} << 20);
  EXPECT_THROW(policy.plan_for(4, 0), InvalidInput);
  RunConfig none = tiny_run("none");
  EXPECT_FALSE(resolve_planned_policy(none).has_value());
  EXPECT_EQ(none.checkpoint, "none");
}

// The run trains with the list the planner chose, and measures what the planner predicted.
TEST(PlannedPolicy, ARunTrainsThePlanItChoseWithinFivePercentOfItsPrediction) {
  RunConfig probe = tiny_run("none");
  const ChainCosts costs = profile_chain(probe);
  const int64_t none_peak = predict_plan(costs, CheckpointPolicy::none().plan_for(3, 0)).peak_bytes;
  const int64_t budget = (smallest_feasible_budget(costs) + none_peak) / 2;
  const RunSummary run = Trainer(tiny_run("plan:" + std::to_string(budget))).run();
  ASSERT_EQ(run.status, RunStatus::kOk) << run.message;
  ASSERT_TRUE(run.planned.has_value());
  EXPECT_EQ(run.planned->budget_bytes, budget);
  EXPECT_EQ(run.config.checkpoint, run.planned->chosen);
  EXPECT_EQ(run.config.checkpoint.rfind("segments:", 0), 0u) << run.config.checkpoint;
  EXPECT_LE(run.planned->predicted_peak_bytes, budget);
  EXPECT_NEAR(static_cast<double>(run.peak_activation_bytes) / run.planned->predicted_peak_bytes,
              1.0, 0.05);
  EXPECT_EQ(to_json(run)["plan"]["chosen"], run.planned->chosen);
}

TEST(PlannedPolicy, ABudgetNoPlanFitsIsAnOomResultNamingTheSmallestThatDoes) {
  const RunSummary run = Trainer(tiny_run("plan:1KiB")).run();
  EXPECT_EQ(run.status, RunStatus::kOom);
  EXPECT_EQ(run.steps_completed, 0);
  ASSERT_TRUE(run.planned.has_value());
  EXPECT_TRUE(run.planned->chosen.empty());
  EXPECT_GT(run.planned->smallest_feasible_bytes, 1024);
  EXPECT_NE(run.message.find("the smallest budget one fits is"), std::string::npos) << run.message;
}

// Early stop: a recomputed segment's last stage is recomputed up to its tail, every other stage
// whole; kept stages are not recomputed at all.
TEST(PlanPrediction, ARecomputedSegmentStopsBeforeItsLastStagesTail) {
  ChainCosts costs = two_stages();
  for (StageCost& stage : costs.stages) stage.early_stop_saving_ms = 1.0;  // of forward 3
  const auto one_segment =
      predict_plan(costs, CheckpointPolicy::parse("segments:a0-m0").plan_for(1, 0));
  EXPECT_DOUBLE_EQ(one_segment.recompute_ms, 3.0 + 2.0);
  const auto two_segments =
      predict_plan(costs, CheckpointPolicy::parse("segments:a0,m0").plan_for(1, 0));
  EXPECT_DOUBLE_EQ(two_segments.recompute_ms, 2.0 + 2.0);
  const auto kept = predict_plan(costs, CheckpointPolicy::parse("segments:m0").plan_for(1, 0));
  EXPECT_DOUBLE_EQ(kept.recompute_ms, 2.0);
  EXPECT_DOUBLE_EQ(kept.step_ms, 2 * (3.0 + 6.0) + 2.0 + costs.fixed_ms);
}

// The profile measures what an early stop saves: the MLP's down projection, half its matmuls, so
// neither nothing nor the whole forward (wide bounds: the machine may be busy).
TEST(ChainProfile, MeasuresWhatAnEarlyStopSaves) {
  RunConfig config = tiny_run("none");
  config.model.layers = 1;
  config.model.d_model = 128;
  const ChainCosts costs = profile_chain(config);
  ASSERT_EQ(costs.stages.size(), 2u);
  const StageCost& mlp = costs.stages[1];
  EXPECT_GT(mlp.early_stop_saving_ms, 0.05 * mlp.forward_ms);
  EXPECT_LT(mlp.early_stop_saving_ms, 0.95 * mlp.forward_ms);
}

TEST(ChainCostsJson, CarriesEveryFigureExactlyAndRefusesWhatIsMissing) {
  ChainCosts costs = two_stages();
  costs.stages[1].forward_ms = 0.1 + 0.2;  // not representable in few digits
  costs.stages[0].early_stop_saving_ms = 1.25;
  costs.embedding_backward_peak_bytes = 123456789012;
  const ChainCosts back = chain_costs_from_json(nlohmann::json::parse(to_json(costs).dump()));
  EXPECT_EQ(to_json(back), to_json(costs));
  EXPECT_EQ(back.stages[1].forward_ms, costs.stages[1].forward_ms);
  nlohmann::json damaged = to_json(costs);
  damaged["stages"][0].erase("kept_bytes");
  EXPECT_THROW(chain_costs_from_json(damaged), std::invalid_argument);
  EXPECT_THROW(chain_costs_from_json(nlohmann::json::object()), std::invalid_argument);
}

// What no measurement gives is refused, so that a damaged or edited row is never planned with
// (a negative byte count once made a negative index into the planner's tables).
TEST(ChainCostsJson, RefusesFiguresNoMeasurementGives) {
  const nlohmann::json good = to_json(two_stages());
  EXPECT_NO_THROW(chain_costs_from_json(good));
  const std::vector<std::pair<nlohmann::json::json_pointer, nlohmann::json>> hostile = {
      {"/stages/0/kept_bytes"_json_pointer, -1e12},
      {"/stages/0/kept_bytes"_json_pointer, 1e30},
      {"/stages/0/kept_bytes"_json_pointer, -1},
      {"/stages/0/kept_bytes"_json_pointer, 2.5},
      {"/stages/1/output_bytes"_json_pointer, uint64_t{1} << 63},
      {"/input_bytes"_json_pointer, int64_t{1} << 51},
      {"/stages/0/forward_ms"_json_pointer, -6e9},
      {"/stages/0/forward_ms"_json_pointer, "nan"},
      {"/stages/0/backward_ms"_json_pointer, 1e300},
      {"/stages/0/early_stop_saving_ms"_json_pointer, 1e6},  // more than the stage's forward
      {"/time_scale"_json_pointer, 0.0},
      {"/fixed_ms"_json_pointer, nullptr},
      {"/stages"_json_pointer, nlohmann::json::array()},
      // Each within range, together past 1 PiB (a pipeline's plan multiplies them).
      {"/head_peak_bytes"_json_pointer, int64_t{1} << 50}};
  for (const auto& [where, value] : hostile) {
    nlohmann::json damaged = good;
    damaged[where] = value;
    EXPECT_THROW(chain_costs_from_json(damaged), std::invalid_argument)
        << where.to_string() << " = " << value.dump();
  }
}

TEST(ProfileKey, NamesWhatTheCostsDependOnAndNothingElse) {
  const RunConfig base = tiny_run("none");
  const std::string key = profile_key(base, 5);
  RunConfig training = base;  // what only training changes
  training.steps = 99;
  training.lr = 0.5;
  training.seed = 7;
  training.checkpoint = "plan:1MiB";
  EXPECT_EQ(profile_key(training, 5), key);
  RunConfig batch = base;
  batch.batch = base.batch + 1;
  RunConfig threads = base;
  threads.threads = 2;
  RunConfig wider = base;
  wider.model.d_model *= 2;
  for (const std::string& other : {profile_key(batch, 5), profile_key(threads, 5),
                                   profile_key(wider, 5), profile_key(base, 7)}) {
    EXPECT_NE(other, key);
  }
}

// What the Plan tab lists: a key read back gives the configuration it was measured for (its
// preset named again when the model is one), the repeats and where; a run recorded elsewhere
// has the key of that place.
TEST(ProfileKey, ReadsBackWhatItWasMeasuredFor) {
  RunConfig config = tiny_run("none");
  config.model = model_preset("tiny");
  config.batch = 3;
  const auto read = read_profile_key(profile_key(config, 7));
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->repeats, 7);
  EXPECT_EQ(read->config.preset, "tiny");
  EXPECT_EQ(read->config.batch, 3);
  EXPECT_EQ(profile_key(read->config, 7), profile_key(config, 7));
  RunConfig custom = config;
  custom.model.layers = 3;
  EXPECT_EQ(read_profile_key(profile_key(custom, 5))->config.preset, "custom");
  EXPECT_EQ(read_profile_key(profile_key(custom, 5))->config.model.layers, 3);
  const std::string elsewhere = profile_key(config, 5, "another-host", "2.0.0");
  EXPECT_EQ(read_profile_key(elsewhere)->host, "another-host");
  EXPECT_EQ(read_profile_key(elsewhere)->libtorch, "2.0.0");
  EXPECT_NE(elsewhere, profile_key(config, 5));
  // Another profiling method's key, or no key at all, is not offered.
  nlohmann::json old = nlohmann::json::parse(profile_key(config, 5));
  old["method"] = 1;
  EXPECT_FALSE(read_profile_key(old.dump()).has_value());
  EXPECT_FALSE(read_profile_key("not json").has_value());
  // Full training keeps the method its kept profiles were measured with; fine-tuning's tails
  // stop early since method 4, so its profiles of method 3 are not offered.
  EXPECT_EQ(nlohmann::json::parse(profile_key(config, 5))["method"], 3);
  RunConfig adapted = config;
  adapted.model.lora = default_lora_options(adapted.model.family);
  const std::string adapted_key = profile_key(adapted, 5);
  EXPECT_EQ(nlohmann::json::parse(adapted_key)["method"], 4);
  ASSERT_TRUE(read_profile_key(adapted_key).has_value());
  nlohmann::json before = nlohmann::json::parse(adapted_key);
  before["method"] = 3;
  EXPECT_FALSE(read_profile_key(before.dump()).has_value());
  nlohmann::json mislabelled = nlohmann::json::parse(profile_key(config, 5));
  mislabelled["method"] = 4;
  EXPECT_FALSE(read_profile_key(mislabelled.dump()).has_value());
  // Stored fields of another type make the key unread, not an exception.
  for (const auto& [field, value] : {std::pair<const char*, nlohmann::json>{"method", "3"},
                                     {"method", 4294967299LL},
                                     {"repeats", "5"},
                                     {"host", 7},
                                     {"libtorch", nullptr}}) {
    nlohmann::json odd = nlohmann::json::parse(profile_key(config, 5));
    odd[field] = value;
    EXPECT_FALSE(read_profile_key(odd.dump()).has_value()) << field << " " << value.dump();
  }
}

// A key whose config holds a setting this build cannot read (a newer RematLab's key, or a hand
// edit) is not read with that setting's default, which would offer and reuse its costs as
// another configuration's: it is refused, and the refusal names the setting.
TEST(ProfileKey, AKeyWithASettingThisVersionCannotReadIsRefusedNamingIt) {
  RunConfig config = tiny_run("none");
  config.model = model_preset("tiny");
  const nlohmann::json written = nlohmann::json::parse(profile_key(config, 5));
  std::string refused;
  ASSERT_TRUE(read_profile_key(written.dump(), &refused).has_value());
  EXPECT_TRUE(refused.empty()) << refused;
  for (const auto& [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"future_setting", 64}, {"precision", "fp4"}, {"layers", "many"}}) {
    nlohmann::json edited = written;
    edited["config"][key] = value;
    refused.clear();
    EXPECT_FALSE(read_profile_key(edited.dump(), &refused).has_value()) << key;
    EXPECT_NE(refused.find("not known to this version (a newer RematLab or a hand edit): " + key +
                           " could not be read"),
              std::string::npos)
        << refused;
    EXPECT_FALSE(read_profile_key(edited.dump()).has_value()) << key;  // no reason asked: none
  }
}

TEST(ProfileRegistry, ListsKeptProfilesNewestFirst) {
  testing::ScratchDir dir("plan-profile-list");
  RunStore store(dir.file("runs.sqlite"));
  EXPECT_TRUE(store.chain_profiles().empty());
  store.save_chain_profile("older", {"{}", 1.0, "2026-11-01T00:00:00Z"});
  store.save_chain_profile("newer", {"{}", 2.0, "2026-11-02T00:00:00Z"});
  const auto profiles = store.chain_profiles();
  ASSERT_EQ(profiles.size(), 2u);
  EXPECT_EQ(profiles[0].first, "newer");
  EXPECT_EQ(profiles[0].second.profile_ms, 2.0);
  EXPECT_EQ(profiles[1].first, "older");
}

// A configuration profiled once is planned again from what the database kept: the same costs,
// and the same plan, without measuring.
TEST(ProfileRegistry, KeepsAProfileAndReusesItForTheSameConfiguration) {
  testing::ScratchDir dir("plan-profiles");
  const std::string db = dir.file("runs.sqlite");
  RunStore store(db);
  const RunConfig config = tiny_run("plan:4MiB");
  const KnownChainCosts first = known_chain_costs(config, &store);
  EXPECT_NE(first.source.find("(kept now)"), std::string::npos) << first.source;
  EXPECT_GT(first.profile_ms, 0.0);
  EXPECT_NE(first.costs.time_scale, 1.0) << "scaled to a whole step it measured";
  EXPECT_GT(first.costs.time_scale, 0.0);
  const KnownChainCosts again = known_chain_costs(config, &store);
  EXPECT_EQ(again.source.rfind("runs database: measured ", 0), 0u) << again.source;
  EXPECT_EQ(again.source.find("(kept now)"), std::string::npos) << again.source;
  EXPECT_EQ(to_json(again.costs), to_json(first.costs));
  EXPECT_EQ(again.profile_ms, first.profile_ms) << "how long it took then";
  // Asked to measure again: replaced.
  const KnownChainCosts fresh = known_chain_costs(config, &store, {}, /*fresh=*/true);
  EXPECT_NE(fresh.source.find("(kept now)"), std::string::npos);
  // Another batch is another configuration.
  RunConfig other = config;
  other.batch = 3;
  EXPECT_NE(known_chain_costs(other, &store).source.find("(kept now)"), std::string::npos);
  // A database opened read-only gives what it kept and keeps nothing new.
  RunStore read_only(db, StoreAccess::kReadOnly, false);
  EXPECT_EQ(known_chain_costs(config, &read_only).source.find("(kept now)"), std::string::npos);
  other.batch = 5;
  EXPECT_NE(known_chain_costs(other, &read_only).source.find("not kept"), std::string::npos);
}

TEST(ProfileRegistry, ARunPlansFromKnownCostsOnlyWhileTheyAreItsConfigurations) {
  RunConfig config = tiny_run("plan:4MiB");
  KnownChainCosts known;
  known.key = profile_key(config, ProfileOptions{}.repeats);
  known.costs = profile_chain(tiny_run("none"));
  known.profile_ms = 1234.0;
  known.source = "runs database: measured 2026-12-01T00:00:00Z";
  config.known_chain_costs = std::make_shared<const KnownChainCosts>(known);
  RunConfig planned_from_known = config;
  const std::optional<PlannedPolicy> reused = resolve_planned_policy(planned_from_known);
  ASSERT_TRUE(reused.has_value());
  EXPECT_EQ(reused->profile_source, known.source);
  EXPECT_EQ(reused->profile_ms, 1234.0);
  const auto expected = plan_under_budget(known.costs, int64_t{4} << 20);
  ASSERT_TRUE(expected.has_value());
  EXPECT_EQ(reused->chosen, expected->plan.canonical());
  // A max-batch probe changes the batch: those costs are not its own, it measures.
  RunConfig probe = config;
  probe.batch = config.batch * 2;
  const std::optional<PlannedPolicy> measured = resolve_planned_policy(probe);
  ASSERT_TRUE(measured.has_value());
  EXPECT_EQ(measured->profile_source, "measured for this run");
}

// plan:BUDGET over pipeline stages (stage_plans.h), on chains of identical sublayers so that the
// stages differ only in the micro-batches each holds in flight.
ChainCosts identical_sublayers(int64_t count) {
  const int64_t unit = 1 << 16;
  ChainCosts costs;
  costs.input_bytes = 2 * unit;
  costs.head_peak_bytes = 6 * unit;
  costs.embedding_backward_peak_bytes = 3 * unit;
  for (int64_t i = 0; i < count; ++i) {
    StageCost stage;
    stage.forward_ms = 2.0;
    stage.backward_ms = 4.0;
    stage.early_stop_saving_ms = 0.5;
    stage.kept_bytes = 10 * unit;
    stage.output_bytes = 2 * unit;
    stage.forward_transient_bytes = unit;
    stage.backward_transient_bytes = 4 * unit;
    costs.stages.push_back(stage);
  }
  return costs;
}

PipelineShape pipeline_shape(int64_t stages, int64_t chunks, int64_t micro_batches,
                             int64_t layers) {
  PipelineShape shape;
  shape.stages = stages;
  shape.chunks = chunks;
  shape.micro_batches = micro_batches;
  shape.layers = layers;
  shape.most_held = [stages, micro_batches](int64_t stage, const std::vector<int64_t>& weights) {
    return parallel::PipelineSchedule::most_held(stages, stage, micro_batches, weights);
  };
  return shape;
}

// Chunk `chunk` (in chain order) of `whole` as a chain of its own, split as the engine splits.
ChainCosts chunk_chain(const ChainCosts& whole, const PipelineShape& shape, int64_t chunk) {
  const std::vector<int64_t> bounds =
      chunk_block_bounds(shape.layers, shape.stages * shape.chunks, shape.chunk_blocks);
  const int64_t begin = 2 * bounds[chunk];
  const int64_t end = 2 * bounds[chunk + 1];
  ChainCosts part;
  part.stages.assign(whole.stages.begin() + begin, whole.stages.begin() + end);
  part.input_bytes = begin == 0 ? whole.input_bytes : whole.stages[begin - 1].output_bytes;
  part.embedding_backward_peak_bytes = begin == 0 ? whole.embedding_backward_peak_bytes : 0;
  part.head_peak_bytes = end == 2 * shape.layers ? whole.head_peak_bytes : 0;
  return part;
}

// A stage's peak and compute with `plans` for its chunks (in its order), counted here apart from
// the planner by walking the stage's schedule: a forward runs through its chunk's peak above what
// is held and then holds what its micro-batch keeps; a backward runs through its peak with its
// own micro-batch's part counted once, and lets that part go.
std::pair<int64_t, double> stage_figures(const ChainCosts& whole, const PipelineShape& shape,
                                         int64_t stage, const std::vector<CheckpointPlan>& plans) {
  std::vector<PlanPrediction> chunks;
  double compute = 0.0;
  for (int64_t chunk = 0; chunk < shape.chunks; ++chunk) {
    chunks.push_back(predict_plan(chunk_chain(whole, shape, chunk * shape.stages + stage),
                                  plans[static_cast<std::size_t>(chunk)]));
    compute += chunks.back().step_ms;
  }
  const parallel::PipelineSchedule schedule(shape.stages, shape.chunks, shape.micro_batches);
  int64_t held = 0;
  int64_t peak = 0;
  for (int64_t index = 0; index < schedule.length(); ++index) {
    const parallel::PipelineAction action = schedule.action(stage, index);
    const PlanPrediction& chunk = chunks[static_cast<std::size_t>(action.chunk)];
    if (action.forward) {
      peak = std::max(peak, held + chunk.peak_bytes);
      held += chunk.held_bytes;
    } else {
      peak = std::max(peak, held - chunk.held_bytes + chunk.peak_bytes);
      held -= chunk.held_bytes;
    }
  }
  return {peak, compute};
}

TEST(StagePlans, EveryStageFitsWithItsMicroBatchesInFlightAndTheFirstRecomputesMost) {
  const PipelineShape shape = pipeline_shape(4, 1, 8, 8);
  const ChainCosts costs = identical_sublayers(16);
  const int64_t smallest = smallest_stages_budget(costs, shape);
  // The first stage holds four micro-batches, the last one: without recomputing, the first needs
  // the most.
  const auto none = CheckpointPolicy::none().plan_for(2, 0);
  const int64_t first_without = stage_figures(costs, shape, 0, {none}).first;
  const int64_t last_without = stage_figures(costs, shape, 3, {none}).first;
  ASSERT_GT(first_without, 2 * last_without);
  const int64_t budget = smallest + (first_without - smallest) / 4;
  ASSERT_GE(budget, last_without);
  const auto planned = plan_stages_under_budget(costs, shape, budget);
  ASSERT_TRUE(planned.has_value());
  ASSERT_EQ(planned->stages.size(), 4u);
  EXPECT_EQ(CheckpointPolicy::parse(planned->policy).stages().size(), 4u) << planned->policy;
  std::vector<double> recompute;
  for (int64_t stage = 0; stage < 4; ++stage) {
    const StagePlan& plan = planned->stages[static_cast<std::size_t>(stage)];
    const auto [peak, compute] = stage_figures(costs, shape, stage, plan.chunks);
    EXPECT_EQ(plan.peak_bytes, peak) << "stage " << stage;
    EXPECT_LE(plan.peak_bytes, budget) << "stage " << stage;
    EXPECT_DOUBLE_EQ(plan.compute_ms, compute) << "stage " << stage;
    recompute.push_back(compute);
  }
  // The last stage fits without recomputing at all; the first recomputes the most.
  EXPECT_EQ(planned->stages.back().chunks[0].canonical(), "none");
  EXPECT_GT(recompute[0], recompute[3]);
  EXPECT_TRUE(std::is_sorted(recompute.rbegin(), recompute.rend()));
  EXPECT_EQ(planned->compute_ms, recompute[0]);

  // Faster than any one policy for every stage that fits the same budget on every stage.
  int fitting = 0;
  for (const char* uniform : {"none", "every:1", "every:2", "sublayer:1,2", "sublayer:2,1"}) {
    const CheckpointPlan each = CheckpointPolicy::parse(uniform).plan_for(2, 0);
    double slowest = 0.0;
    bool fits = true;
    for (int64_t stage = 0; stage < 4; ++stage) {
      const auto [peak, compute] = stage_figures(costs, shape, stage, {each});
      fits = fits && peak <= budget;
      slowest = std::max(slowest, compute);
    }
    if (!fits) continue;
    ++fitting;
    EXPECT_LT(planned->compute_ms, slowest) << uniform;
  }
  EXPECT_GT(fitting, 0);

  EXPECT_FALSE(plan_stages_under_budget(costs, shape, smallest - smallest / 100).has_value());
  EXPECT_TRUE(plan_stages_under_budget(costs, shape, smallest).has_value());
}

// Unequal chunks (7 blocks in 4) and a head far above a block's: the head's chunk may recompute
// where the other keeps everything, and the stage's peak must still cover the walk of its order.
TEST(StagePlans, InterleavedStagesPlanEachChunkAndNameThemInChainOrder) {
  const PipelineShape shape = pipeline_shape(2, 2, 4, 7);
  ChainCosts costs = identical_sublayers(14);
  costs.head_peak_bytes = 40 * costs.input_bytes;
  const int64_t smallest = smallest_stages_budget(costs, shape);
  for (const int64_t budget : {smallest, smallest + smallest / 4, 2 * smallest}) {
    const auto planned = plan_stages_under_budget(costs, shape, budget);
    ASSERT_TRUE(planned.has_value()) << budget;
    const CheckpointPolicy policy = CheckpointPolicy::parse(planned->policy);
    ASSERT_EQ(policy.stages().size(), 4u) << planned->policy;
    for (int64_t stage = 0; stage < 2; ++stage) {
      const StagePlan& plan = planned->stages[static_cast<std::size_t>(stage)];
      ASSERT_EQ(plan.chunks.size(), 2u);
      const auto [walked, compute] = stage_figures(costs, shape, stage, plan.chunks);
      EXPECT_GE(plan.peak_bytes, walked) << planned->policy << ", stage " << stage;
      EXPECT_LE(plan.peak_bytes, budget) << planned->policy << ", stage " << stage;
      EXPECT_DOUBLE_EQ(plan.compute_ms, compute);
      for (int64_t chunk = 0; chunk < 2; ++chunk) {
        // Chain chunk c·P + s is stage s's chunk c.
        EXPECT_EQ(policy.stages()[static_cast<std::size_t>(chunk * 2 + stage)].text(),
                  plan.chunks[static_cast<std::size_t>(chunk)].canonical());
      }
    }
  }
}

// A split given as a list: each stage planned over its own blocks, the first holding three of
// four for its two micro-batches in flight, and its peak the walk of its schedule.
TEST(StagePlans, AGivenSplitIsPlannedStageByStageAsTheEngineSplitsIt) {
  PipelineShape shape = pipeline_shape(2, 1, 4, 4);
  shape.chunk_blocks = {3, 1};
  const ChainCosts costs = identical_sublayers(8);
  const int64_t smallest = smallest_stages_budget(costs, shape);
  const auto none = CheckpointPolicy::none().plan_for(3, 0);
  const int64_t first_without = stage_figures(costs, shape, 0, {none}).first;
  const auto planned = plan_stages_under_budget(costs, shape, (smallest + first_without) / 2);
  ASSERT_TRUE(planned.has_value());
  const CheckpointPolicy policy = CheckpointPolicy::parse(planned->policy);
  ASSERT_EQ(policy.stages().size(), 2u);
  for (int64_t stage = 0; stage < 2; ++stage) {
    const StagePlan& plan = planned->stages[static_cast<std::size_t>(stage)];
    EXPECT_EQ(plan.peak_bytes, stage_figures(costs, shape, stage, plan.chunks).first) << stage;
    // Each stage's list names its own blocks: three on the first, one on the last.
    const int64_t blocks = stage == 0 ? 3 : 1;
    EXPECT_EQ(plan.chunks[0].segments.back().end, 2 * blocks) << planned->policy;
  }
  EXPECT_GT(planned->stages[0].chunks[0].recomputed_segments(), 0) << planned->policy;
  // The policy read back under the same split recomputes the same sublayers of the chain.
  const CheckpointPlan whole = policy.plan_for(4, 0.0, shape.chunk_blocks);
  EXPECT_EQ(whole.segments.back().end, 8);
  EXPECT_GT(whole.recomputed_segments(), 0);
}

// A chain near the most a kept profile may hold, over a million micro-batches: the stages hold
// what their schedule keeps in flight, counted without wrapping, and the search ends.
TEST(StagePlans, AChainNearOnePebibyteOverAMillionMicroBatchesPlansWithoutOverflow) {
  constexpr int64_t kMicroBatches = 1'000'000;
  const PipelineShape shape = pipeline_shape(2, 1, kMicroBatches, 2);
  ChainCosts costs = identical_sublayers(4);
  for (StageCost& stage : costs.stages) stage.kept_bytes = int64_t{1} << 47;
  EXPECT_NO_THROW(chain_costs_from_json(to_json(costs)));
  // The first stage holds two micro-batches' 2^48 bytes under 1F1B, the last one's.
  const int64_t budget = int64_t{3} << 47;
  const auto planned = plan_stages_under_budget(costs, shape, budget);
  ASSERT_TRUE(planned.has_value());
  // The first stage recomputes; the last, holding one micro-batch, keeps everything.
  EXPECT_GT(planned->stages[0].chunks[0].recomputed_segments(), 0);
  EXPECT_EQ(planned->stages[1].chunks[0].canonical(), "none");
  EXPECT_GT(planned->peak_bytes, 0);
  EXPECT_LE(planned->peak_bytes, budget);
  const int64_t smallest = smallest_stages_budget(costs, shape);
  EXPECT_GT(smallest, 0);
  EXPECT_TRUE(plan_stages_under_budget(costs, shape, smallest).has_value());
}

// Past what int64 counts, a stage's peak saturates, without asking the schedule (whose count
// would wrap): no budget fits it. Within range it is the schedule's most held plus the rise.
TEST(StagePlans, AStagePeakPastWhatInt64CountsSaturates) {
  PipelineShape many = pipeline_shape(4096, 1, 4096, 4096);
  bool asked = false;
  many.most_held = [&asked](int64_t, const std::vector<int64_t>&) {
    asked = true;
    return int64_t{0};
  };
  // 2^52 bytes a micro-batch, held for up to 4096 of them: past 2^63.
  EXPECT_EQ(stage_peak_bytes({int64_t{1} << 52}, 0, 0, many), std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(asked);
  EXPECT_EQ(stage_peak_bytes({int64_t{1} << 40}, 5, 0, many), 5);  // asked: its count, 0
  EXPECT_TRUE(asked);
  const PipelineShape two = pipeline_shape(2, 1, 4, 2);
  EXPECT_EQ(stage_peak_bytes({100}, 7, 0, two), 2 * 100 + 7);  // the first holds two
  EXPECT_EQ(stage_peak_bytes({100}, 7, 1, two), 100 + 7);
}

// A Stop while a large pipeline is weighed ends the search; nothing is chosen.
TEST(StagePlans, ACancelledSearchThrowsAndChoosesNothing) {
  const PipelineShape shape = pipeline_shape(2, 1, 4, 4);
  const ChainCosts costs = identical_sublayers(8);
  const std::atomic<bool> cancel{true};
  EXPECT_THROW(plan_stages_under_budget(costs, shape, int64_t{1} << 40, &cancel), ProfileCancelled);
  EXPECT_THROW(smallest_stages_budget(costs, shape, &cancel), ProfileCancelled);
  const std::atomic<bool> go_on{false};
  EXPECT_TRUE(plan_stages_under_budget(costs, shape, int64_t{1} << 40, &go_on).has_value());
}

// The stages' predicted peaks read back all or not at all: one edited away or made negative
// would pair the rest with the wrong stages.
TEST(PlannedPolicy, StagePeaksReadBackWholeOrNotAtAll) {
  PlannedPolicy planned;
  planned.requested = "plan:2MiB";
  planned.chosen = "stages:every:1/none";
  planned.predicted_stage_peak_bytes = {1500000, 900000};
  const nlohmann::json good = to_json(planned);
  EXPECT_EQ(planned_policy_from_json(nlohmann::json::parse(good.dump())).predicted_stage_peak_bytes,
            planned.predicted_stage_peak_bytes);
  for (const nlohmann::json& peaks :
       {nlohmann::json{1500000, -1}, nlohmann::json{1500000, 2.5}, nlohmann::json{1500000, "x"},
        nlohmann::json{uint64_t{1} << 63, 1}}) {
    nlohmann::json damaged = good;
    damaged["predicted_stage_peak_bytes"] = peaks;
    EXPECT_TRUE(planned_policy_from_json(damaged).predicted_stage_peak_bytes.empty())
        << peaks.dump();
  }
  planned.predicted_stage_peak_bytes.clear();
  EXPECT_FALSE(to_json(planned).contains("predicted_stage_peak_bytes"));
}

}  // namespace
}  // namespace rematlab::plan
