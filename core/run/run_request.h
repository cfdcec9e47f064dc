// What was asked of a run, beside the config it trained with: a max-batch search's budget and
// range, a planned policy's budget (with the planner's prediction). Kept apart from the config so
// the batch a run trained at never hides the search that chose it, nor the other way round.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "run/planned_policy.h"

namespace rematlab {

struct MaxBatchSpec {
  int64_t budget_bytes = 0;
  int64_t limit = 1024;     // the largest batch tried
  int64_t probe_steps = 2;  // steps per probe: the second has the optimizer state in place
};

struct RunRequest {
  std::optional<MaxBatchSpec> max_batch;  // the batch was searched, from 1 to limit
  // --checkpoint plan:BUDGET: the budget, and what the planner chose and predicted for it.
  std::optional<PlannedPolicy> plan;
};

nlohmann::json to_json(const RunRequest& request);
RunRequest run_request_from_json(const nlohmann::json& json);  // tolerant: {} is no request

}  // namespace rematlab
