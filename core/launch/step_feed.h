// Live step metrics from every rank to the launcher that started them, for a launcher that shows
// them as they come (the window's live view, one memory curve per rank). The launcher asks for
// them through the environment (kStepFeedVariable=1); a rank that sees it pushes each of its
// steps on a queue of the launcher's store, which the launcher drains on its tick. Nothing is
// queued otherwise: nobody would read it, and the queue would grow with the run.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <utility>
#include <vector>

#include "run/step_metrics.h"

namespace rematlab::launch {

inline constexpr const char* kStepFeedVariable = "REMATLAB_STEP_FEED";

// Whether this process's launcher asked for its steps.
bool step_feed_requested();

// The rank's side: one step of rank `rank`.
void publish_step(c10d::Store& store, int rank, const StepMetrics& step);

// The launcher's side: every step published since the last call, in the order each rank sent
// them, with the rank that sent it.
std::vector<std::pair<int, StepMetrics>> take_published_steps(c10d::Store& store);

}  // namespace rematlab::launch
