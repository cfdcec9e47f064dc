// What a plan competes with and where plans stand: the uniform policies predicted from the same
// chain costs, and plans along a ladder of budgets. `rematlab-cli plan` prints them; the window's
// Plan tab draws them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan_prediction.h"
#include "run/chain_costs.h"

namespace rematlab::plan {

struct PolicyPrediction {
  std::string policy;  // "every:2"
  PlanPrediction prediction;
};

// none, sublayer:1,1, sublayer:1,2, sublayer:2,1 and every:K for K = 1 … layers, in that order.
// (`selective` recomputes inside sublayers, which the chain costs do not split: not predicted.)
std::vector<PolicyPrediction> predict_uniform_policies(const ChainCosts& costs, int64_t layers);

// The activation peak of training without checkpointing: no plan needs more.
int64_t none_peak_bytes(const ChainCosts& costs);

// `count` (≥ 2) budgets evenly from the smallest any plan fits to none's peak, both included.
std::vector<int64_t> ladder_budgets(const ChainCosts& costs, int count);

}  // namespace rematlab::plan
