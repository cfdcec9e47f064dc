// `run` across several processes: as one rank of a data-parallel run (its launcher set RANK,
// WORLD_SIZE, …: ours, torchrun or Slurm), and `run --nproc N`, which starts the N ranks.
#pragma once

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "parallel/dist_env.h"
#include "run/run_config.h"
#include "run/run_summary.h"

namespace rematlab::cli {

struct RankRunOptions {
  std::string db;    // rank 0 records the run here (empty: not recorded)
  std::string name;  // the run's name (empty: describe_run)
  std::chrono::milliseconds timeout{};
  // The experiment the run is recorded under (empty: none), with its spec: `run --config`'s,
  // the one-point sweep spec the window starts its ranks with.
  std::string experiment;
  nlohmann::ordered_json experiment_spec;
};

// Trains this process's share of the run. Returns the run's summary, with every rank's figures,
// on rank 0 and nothing on the others. Throws InvalidInput (configurations that differ between
// ranks, a port in use) and parallel::PeerFailure (another rank failed: rank 0 records the run
// `failed`, naming that rank when it can be known).
std::optional<RunSummary> run_as_rank(RunConfig config, const parallel::DistEnv& env,
                                      const RankRunOptions& options,
                                      const std::atomic<bool>& cancel);

// Starts config.world_size ranks of this very command line on this host and waits for them.
// Returns the exit code: 0 when every rank succeeded, 2 when a rank refused its input, 1
// otherwise (with one line saying which rank failed and how).
int launch_local_ranks(const RunConfig& config, const RankRunOptions& options,
                       const std::atomic<bool>& cancel);

// This process's command line as the kernel has it, without `flag` and its value, the program
// being this very executable: what a launcher starts in every process.
std::vector<std::string> own_command_line_without(const std::string& flag);

}  // namespace rematlab::cli
