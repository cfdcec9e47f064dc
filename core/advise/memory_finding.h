// Checkpointing or offloading that did not lower the peak: what dominates it instead.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "advise/finding.h"
#include "store/run_store.h"

namespace rematlab::advise {

// A run is flagged when its measured peak is less than this fraction below `none`'s.
inline constexpr double kMemoryReductionThreshold = 0.10;

// Why the estimator cannot describe a run's stored configuration (a shape or tensor layout it
// refuses: a record no run of this version could have made; of a pipeline, what the layout
// planner does not evaluate stage by stage, such as plan: or offload), or nothing when it can.
std::optional<std::string> unestimable(const RunConfig& config);

// For a finished run that checkpoints or offloads, whose configuration is estimable: compares its
// peak with the `none` run of the same configuration (`none_run`) or, without one, with the
// estimator's `none` peak, and when it is not reduced names what dominates: selective under fused
// attention, offload on a CPU device, the model states, the logits, or the segments the plan keeps.
// (Over expert ranks, the fullest rank's, at the rank load `steps` recorded; over pipeline stages,
// the fullest stage's, by the layout planner.)
std::optional<Finding> diagnose_memory(const RunRecord& run, const std::vector<StepMetrics>& steps,
                                       const std::optional<RunRecord>& none_run,
                                       std::vector<Wording>& notes);

}  // namespace rematlab::advise
