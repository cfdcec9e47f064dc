// `run --nproc N`: starts the N ranks (each a `run` that trains as one, launch/rank_run.h).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "launch/rank_run.h"
#include "run/run_config.h"

namespace rematlab::cli {

// Starts config.world_size ranks of this very command line on this host and waits for them.
// Returns the exit code: 0 when every rank succeeded, 2 when a rank refused its input, 1
// otherwise (with one line saying which rank failed and how).
int launch_local_ranks(const RunConfig& config, const launch::RankRunOptions& options,
                       const std::atomic<bool>& cancel);

// This process's command line as the kernel has it, without `flag` and its value, the program
// being this very executable: what a launcher starts in every process.
std::vector<std::string> own_command_line_without(const std::string& flag);

}  // namespace rematlab::cli
