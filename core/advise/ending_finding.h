// A run that did not finish: how it ended and why, said where a user reads the advice (the
// status alone is easy to miss), and for an out-of-memory what would fit.
#pragma once

#include <optional>
#include <vector>

#include "advise/finding.h"
#include "store/run_store.h"

namespace rematlab::advise {

// For a run that ended oom, failed or interrupted (diverged has its own finding; cancelled is
// what the user asked for). An oom under a budget gets the smallest budget the run's batch needs
// and the largest batch the budget holds (the estimator's, against what the run measured); a
// plan that did not fit, the smallest budget one fits; a search that found no batch, the budget
// batch 1 needs.
std::optional<Finding> diagnose_ending(const RunRecord& run, const std::vector<StepMetrics>& steps);

}  // namespace rematlab::advise
