// A run of RematLab's engine as the layout planner sees it: its own degrees, micro-batch,
// accumulation, shard mode, split and policy per stage, evaluated stage by stage. The estimator
// counts one rank of a model that is not split into stages; this is how a pipeline run's stages
// are estimated (the advisor checks their peaks against it).
#pragma once

#include <string>

#include "layout/layout.h"
#include "run/run_config.h"

namespace rematlab::layout {

// The run's layout evaluated under `checkpoint` (its own policy when empty): none, selective or
// every:K for every stage, or `stages:` with one of those for each. The memory figures are the
// engine's accounting, without a fragmentation allowance; the device is given room for any of
// them (what fits is the caller's question), so its time figures mean nothing here. Throws
// InvalidInput naming what the planner cannot evaluate: another policy (plan:, segments:, …), a
// policy list not one per chunk, offload, a balanced split never chosen, more than 1024 chunks,
// degrees it or the engine refuses.
LayoutEvaluation evaluate_run(const RunConfig& config, const std::string& checkpoint = {});

}  // namespace rematlab::layout
