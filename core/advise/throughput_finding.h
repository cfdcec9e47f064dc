// A checkpointed or offloaded run slower than `none`: where in the step the time went.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "advise/finding.h"
#include "store/run_store.h"

namespace rematlab::advise {

// A run is flagged when its tokens/s are at least this fraction below the reference's.
inline constexpr double kThroughputDropThreshold = 0.05;

// One step split into what it spends its time on (medians over timed steps, ms).
struct StepSplit {
  double forward = 0.0;
  double backward = 0.0;  // without recomputation and offload waits
  double recompute = 0.0;
  double offload_wait = 0.0;
  double optimizer = 0.0;
  std::string recompute_source;  // "timeline" (measured) or "estimated from FLOPs"
};

// The split of a run's step from its stored steps, and its timeline (the recomputation phases'
// time) when it recorded one; without a timeline, recomputation is estimated as the forward
// time scaled by the recomputed share of the forward FLOPs.
StepSplit split_step(const RunRecord& run, const std::vector<StepMetrics>& steps,
                     const std::vector<TimelinePoint>& timeline);

// Compares the run with the `none` run of the same configuration (`none_run`, its steps), or
// without one with itself less its recomputation and offload waits, and names the phase that
// adds the most time.
std::optional<Finding> diagnose_throughput(const RunRecord& run,
                                           const std::vector<StepMetrics>& steps,
                                           const std::vector<TimelinePoint>& timeline,
                                           const std::optional<RunRecord>& none_run,
                                           const std::vector<StepMetrics>& none_steps);

}  // namespace rematlab::advise
