// One data-parallel run's ranks on this host, started and waited for: what `run --nproc` and
// the window do (launch/local_launcher.h underneath). A failure rank 0 could not record itself (it
// died, or recorded its end before anyone knew who failed) is recorded here, in its database.
// This header includes no LibTorch header, so the window can use it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "run/step_metrics.h"

namespace rematlab::launch {

// What every launch of processes on this host is given (launch/local_launcher.h adds what a
// sweep's workers need).
struct ProcessLaunch {
  int nproc = 2;
  std::vector<std::string> args;  // every process's command line; args[0] is the program
  // After a rank failed, or a cancel was forwarded: how long the others have to end on their
  // own before whatever is left is killed.
  std::chrono::milliseconds grace{std::chrono::seconds(30)};
  const std::atomic<bool>* cancel = nullptr;  // forwarded to every process as SIGINT
  // Given: every rank publishes each of its steps (launch/step_feed.h), handed over here on the
  // launching thread as they arrive.
  std::function<void(int rank, const StepMetrics& step)> on_rank_step;
};

// How a launch ended, as its caller needs it (launch/local_launcher.h adds the launcher's own).
struct ProcessLaunchOutcome {
  bool ok = true;  // every process exited with 0
  int failed_exit_code = 0;
  bool failed_by_signal = false;
  std::string failure;  // one line, e.g. "rank 1 (pid 4242) was killed by signal 9 (Killed)"
  std::optional<int64_t> run_id;  // the run rank 0 recorded, if it published one
  // The stop reached a rank before it had a run to record (it exited parallel::kExitInterrupted).
  bool stopped_before_start = false;
};

struct RankLaunch : ProcessLaunch {
  std::string db;  // where rank 0 records the run (empty: not recorded)
};
using RankLaunchOutcome = ProcessLaunchOutcome;

RankLaunchOutcome launch_ranks(const RankLaunch& launch);

// Why cuda:N is refused for several ranks.
inline constexpr const char* kGpuPerRank =
    "with several ranks give cuda: each rank takes cuda:LOCAL_RANK";

// What `ranks` ranks (or sweep workers) on this host need, checked before any starts: at most 4
// per hardware thread and, on CUDA with more than one, `device` "cuda" (each takes
// cuda:LOCAL_RANK) with a GPU for every one. Refused as InvalidInput naming the caller's words
// for them (`ranks_field`: "--nproc", "--workers" or the form's "ranks"); `beyond` ends the
// first message (where to go for more).
void check_local_ranks(const std::string& device, int ranks, const std::string& ranks_field,
                       const std::string& device_field, const std::string& beyond = "");

}  // namespace rematlab::launch
