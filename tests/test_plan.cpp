// The planner: the peak and time it predicts for a plan, and the plan it chooses under a
// budget, checked against every plan of small chains.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "model/model_config.h"
#include "plan/chain_profile.h"
#include "plan/plan_policy.h"
#include "plan/plan_prediction.h"
#include "plan/segment_planner.h"
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

}  // namespace
}  // namespace rematlab::plan
