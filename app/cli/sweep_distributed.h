// `sweep` spread over processes: `--workers N` starts N workers on this host and records the
// sweep itself; under torchrun or Slurm every rank is a worker and rank 0 also records it
// (core/launch/sweep_coordinator.h). Every point runs in one worker; the runs database has one
// writer, the coordinator.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "parallel/dist_env.h"
#include "sweep/sweep_runner.h"
#include "sweep/sweep_spec.h"

namespace rematlab::cli {

struct SweepRunOptions {
  std::string db;
  bool json = false;
  std::chrono::milliseconds timeout{};
};

// The sweep's exit code: 0 when every point ran (or the sweep was cancelled), 1 when workers
// ended before every point was handed out.
int sweep_with_local_workers(const SweepSpec& spec, int workers, const SweepRunOptions& options,
                             const std::atomic<bool>& cancel);

// This process as one worker: of our own launcher (the parent records), or rank R of torchrun or
// Slurm (rank 0 records, on a thread of its own, and works too).
int sweep_as_worker(const SweepSpec& spec, const parallel::DistEnv& env,
                    const SweepRunOptions& options, const std::atomic<bool>& cancel);

// The table (and with --json the JSON line) a sweep ends with.
void print_sweep_outcome(const std::string& db, std::optional<int64_t> experiment_id,
                         const std::vector<SweepRunResult>& results, std::size_t planned,
                         bool json);

}  // namespace rematlab::cli
