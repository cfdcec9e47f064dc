#include "plan/frontier.h"

#include <algorithm>

#include "checkpoint/checkpoint_policy.h"
#include "plan/segment_planner.h"

namespace rematlab::plan {

std::vector<PolicyPrediction> predict_uniform_policies(const ChainCosts& costs, int64_t layers) {
  std::vector<std::string> policies = {"none", "sublayer:1,1", "sublayer:1,2", "sublayer:2,1"};
  for (int64_t k = 1; k <= layers; ++k) policies.push_back("every:" + std::to_string(k));
  std::vector<PolicyPrediction> predictions;
  for (const std::string& policy : policies) {
    predictions.push_back(
        {policy, predict_plan(costs, CheckpointPolicy::parse(policy).plan_for(layers, 0.0))});
  }
  return predictions;
}

int64_t none_peak_bytes(const ChainCosts& costs) {
  const auto layers = static_cast<int64_t>(costs.stages.size()) / 2;  // attention + MLP each
  return predict_plan(costs, CheckpointPolicy::none().plan_for(layers, 0.0)).peak_bytes;
}

std::vector<int64_t> ladder_budgets(const ChainCosts& costs, int count) {
  const int64_t smallest = smallest_feasible_budget(costs);
  const int64_t largest = std::max(smallest, none_peak_bytes(costs));
  std::vector<int64_t> budgets;
  for (int i = 0; i < count; ++i)
    budgets.push_back(smallest + (largest - smallest) * i / (count - 1));
  return budgets;
}

}  // namespace rematlab::plan
