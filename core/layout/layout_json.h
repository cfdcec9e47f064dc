// The layout planner's answer as JSON: what `rematlab-cli layout --json` prints as its last line
// and what the Scale tab reads.
#pragma once

#include <nlohmann/json.hpp>

#include "layout/layout.h"
#include "layout/layout_search.h"

namespace rematlab::layout {

nlohmann::json to_json(const MemoryParts& memory);
nlohmann::json to_json(const LayoutEvaluation& evaluation);
// `layouts`: the fastest that fit, best first, or when none fits the nearest ones (fits false,
// with their reason); then `frontier`, `nearest`, the request's figures and the search's counts.
nlohmann::json to_json(const LayoutRequest& request, const LayoutAnswer& answer);

}  // namespace rematlab::layout
