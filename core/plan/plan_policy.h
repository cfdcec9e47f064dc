// `--checkpoint plan:BUDGET`: when a run starts, its chain is profiled on its own device and
// configuration, and the fastest segment list whose predicted activation peak fits BUDGET is
// what it trains with. What was planned stays with the run, beside what it then measured.
#pragma once

#include <atomic>
#include <optional>

#include "plan/stage_plans.h"
#include "run/planned_policy.h"
#include "run/run_config.h"

namespace rematlab::plan {

// Whether config.known_chain_costs serve this run: of its key and, for --pp-split balanced,
// with the embedding's and the head's times (a profile kept before they were measured apart
// has none).
bool brings_chain_costs(const RunConfig& config);

// The chain's costs for `config`: those it brings (above), else measured here now (stopped by
// `cancel`: ProfileCancelled).
KnownChainCosts chain_costs_for(const RunConfig& config, const std::atomic<bool>* cancel);

// For a config whose checkpoint is plan:BUDGET: profiles it (or takes config.known_chain_costs
// when their key matches it), plans, and sets config.checkpoint to the chosen list (left as it
// is when none fits). Nothing for any other policy. Profiling is stopped by `cancel`
// (ProfileCancelled). A pipeline (`pipeline`, for a config with pp > 1) plans each stage for its
// micro-batches in flight (stage_plans.h): the chosen policy is a stages: list.
std::optional<PlannedPolicy> resolve_planned_policy(RunConfig& config,
                                                    const std::atomic<bool>* cancel = nullptr,
                                                    const PipelineShape* pipeline = nullptr);

}  // namespace rematlab::plan
