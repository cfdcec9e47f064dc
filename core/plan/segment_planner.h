// The fastest segment plan whose predicted peak fits a memory budget, by dynamic programming
// over the chain of sublayers: at each stage, keep it or start a recomputed segment of any
// length there. Peaks are checked exactly as plan_prediction.h predicts them; what is
// approximate is that of the ways to reach a stage holding memory within the same 1/slots of
// the budget, only the fastest is followed (exact when sizes are whole slots). So every plan
// found fits; a faster one may rarely be missed. Time O(stages² · slots), memory
// O(stages · slots).
#pragma once

#include <cstdint>
#include <optional>

#include "checkpoint/checkpoint_policy.h"
#include "plan/plan_prediction.h"
#include "run/chain_costs.h"

namespace rematlab::plan {

inline constexpr int kDefaultMemorySlots = 1000;

struct PlannedChain {
  CheckpointPlan plan;
  PlanPrediction prediction;  // by predict_plan, unrounded
};

// Nothing when no plan fits `budget_bytes` (activations only: the model states are not in it).
std::optional<PlannedChain> plan_under_budget(const ChainCosts& costs, int64_t budget_bytes,
                                              int slots = kDefaultMemorySlots);

// The smallest budget some plan fits (within one part in a thousand), to name when a budget is
// too small.
int64_t smallest_feasible_budget(const ChainCosts& costs, int slots = kDefaultMemorySlots);

}  // namespace rematlab::plan
