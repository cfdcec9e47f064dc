// ChainCosts as JSON: what `rematlab-cli profile --json` prints and what the runs database keeps
// (core/store/profile_registry.h), so that a configuration profiled once is planned again
// without profiling.
#pragma once

#include <nlohmann/json.hpp>

#include "plan/chain_costs.h"

namespace rematlab::plan {

nlohmann::json to_json(const ChainCosts& costs);
// Throws std::invalid_argument naming what is missing or malformed.
ChainCosts chain_costs_from_json(const nlohmann::json& json);

}  // namespace rematlab::plan
