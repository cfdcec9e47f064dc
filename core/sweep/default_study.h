// The default study (product design: what `scripts/run` shows first): the article's strategy
// table on the user's machine — Baseline, checkpointing every block, the same with disk offload,
// and non-uniform sublayer segments, each at the largest batch that fits a budget.
#pragma once

#include <nlohmann/json.hpp>

namespace rematlab {

nlohmann::ordered_json default_study_spec();

}  // namespace rematlab
