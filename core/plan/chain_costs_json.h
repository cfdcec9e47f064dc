// ChainCosts as JSON: what `rematlab-cli profile --json` prints and what the runs database keeps
// (core/store/profile_registry.h), so that a configuration profiled once is planned again
// without profiling.
#pragma once

#include <nlohmann/json.hpp>

#include "run/chain_costs.h"

namespace rematlab::plan {

nlohmann::json to_json(const ChainCosts& costs);
// Throws std::invalid_argument naming what is missing, malformed or out of range: byte counts
// must be whole numbers in [0, 1 PiB], times finite and ≥ 0, an early stop's saving at most its
// stage's forward, the time scale in [0.001, 1000].
ChainCosts chain_costs_from_json(const nlohmann::json& json);

}  // namespace rematlab::plan
