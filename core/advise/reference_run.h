// The run a checkpointed run is judged against: the `none` run of the same configuration.
#pragma once

#include <optional>
#include <vector>

#include "store/run_store.h"

namespace rematlab::advise {

// Whether two configurations train the same thing on the same machine setup, apart from how
// they checkpoint and offload (and what they record: timeline, budget, step count).
bool same_configuration(const RunConfig& a, const RunConfig& b);

// The newest finished `none` run without offload whose configuration is the same as `run`'s,
// from `runs` (the database's, any order); none for a run that is itself `none`.
std::optional<RunRecord> find_none_run(const RunRecord& run, const std::vector<RunRecord>& runs);

// Checkpointing or offloading at all: what the memory and throughput findings are about.
bool reduces_memory(const RunConfig& config);

}  // namespace rematlab::advise
