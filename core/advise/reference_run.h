// The run a checkpointed run is judged against: the `none` run of the same configuration.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/run_store.h"

namespace rematlab::advise {

// Whether two configurations cost the same per step in memory and time, apart from how they
// checkpoint and offload: the same model, batch and accumulation, precision (and its numerics
// switches), threads, device and data-parallel layout. What only changes what is learnt or how
// long (learning rate, steps, seed, data, …) and what a run records (timeline, budget) may
// differ.
bool same_configuration(const RunConfig& a, const RunConfig& b);

// The settings in which `reference` differs from `run` beyond the policy, the offload and what
// is recorded, with the reference's values ("lr 0.003, steps 50"); empty when none.
std::string describe_differences(const RunConfig& run, const RunConfig& reference);

// The finished `none` run without offload whose configuration is the same as `run`'s, from
// `runs` (the database's, any order): the one that differs in the fewest other settings, the
// newest of those; none for a run that is itself `none`. A run with recorded settings this build
// could not read (RunRecord::unread_config_fields) is never a reference, nor given one: its
// config holds defaults in their place, so "the same configuration" would be a guess.
std::optional<RunRecord> find_none_run(const RunRecord& run, const std::vector<RunRecord>& runs);

// Checkpointing or offloading at all: what the memory and throughput findings are about.
bool reduces_memory(const RunConfig& config);

}  // namespace rematlab::advise
