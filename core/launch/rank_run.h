// One rank of a data-parallel run, in this process: `rematlab-cli run` when its launcher (ours,
// torchrun or Slurm) set RANK, WORLD_SIZE, …, and one process that shards alone. Every rank
// joins the group and agrees on the configuration before rank 0 creates the database; rank 0
// records the run with every rank's figures.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "parallel/dist_env.h"
#include "run/run_config.h"
#include "run/run_summary.h"
#include "run/step_metrics.h"

namespace rematlab::launch {

struct RankRunOptions {
  std::string db;    // rank 0 records the run here (empty: not recorded)
  std::string name;  // the run's name (empty: describe_run)
  std::chrono::milliseconds timeout{};
  // The experiment the run is recorded under (empty: none), with its spec: `run --config`'s,
  // the one-point sweep spec the window starts its ranks with.
  std::string experiment;
  nlohmann::ordered_json experiment_spec;
  std::function<void(const StepMetrics&)> on_step;  // each of this rank's steps, as it ends
};

// Trains this process's share of the run. Returns the run's summary, with every rank's figures,
// on rank 0 and nothing on the others. Throws InvalidInput (configurations that differ between
// ranks, a port in use) and parallel::PeerFailure (another rank failed: rank 0 records the run
// `failed`, naming that rank when it can be known).
std::optional<RunSummary> run_as_rank(RunConfig config, const parallel::DistEnv& env,
                                      const RankRunOptions& options,
                                      const std::atomic<bool>& cancel);

}  // namespace rematlab::launch
