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

struct RankLaunch {
  int nproc = 2;
  std::vector<std::string> args;  // every rank's command line; args[0] is the program
  std::chrono::milliseconds grace{std::chrono::seconds(30)};  // see LocalLaunch::grace
  const std::atomic<bool>* cancel = nullptr;                  // forwarded to every rank as SIGINT
  std::string db;  // where rank 0 records the run (empty: not recorded)
  // Given: each rank's steps as they come, on the launching thread (launch/step_feed.h).
  std::function<void(int rank, const StepMetrics& step)> on_rank_step;
};

struct RankLaunchOutcome {
  bool ok = true;       // every rank exited with 0
  std::string failure;  // one line naming the rank that failed and how
  bool failed_by_signal = false;
  int failed_exit_code = 0;
  std::optional<int64_t> run_id;      // the run rank 0 recorded, if it did
  bool stopped_before_start = false;  // the stop came before any rank had a run to record
};

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
