// Loss or gradients became NaN/inf: where it started, and whether recomputation is to blame.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "advise/advisor.h"
#include "advise/chain_walk.h"

namespace rematlab::advise {

// The first step whose loss or gradient norm is not finite (an fp16 step the loss scaler
// skipped does not count: skipping is how it handles overflow).
std::optional<int64_t> first_nonfinite_step(const std::vector<StepMetrics>& steps);

// The finding for a run whose loss or gradients became non-finite, or none. With replays, the
// run's configuration is trained again up to that step, the step is walked piece by piece
// (chain_walk.h) and the exactness check compares it under the run's policy and `none`.
// `walk` receives the replayed step's walk (for the missing-gradient finding).
std::optional<Finding> diagnose_divergence(const RunRecord& run,
                                           const std::vector<StepMetrics>& steps,
                                           const AdviseOptions& options,
                                           std::vector<Wording>& notes,
                                           std::optional<ChainWalk>& walk);

}  // namespace rematlab::advise
