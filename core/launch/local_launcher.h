// `rematlab-cli run --nproc N`: N ranks on this host, one process each. The launcher serves the
// rendezvous store itself on a free port (as torchrun's agent does, so every rank is a client
// and the store outlives any rank), merges the ranks' output (rank 0's stdout, the result,
// verbatim; everything else on stderr behind "[rank R] "), and watches them: when one fails the
// others get `grace` to stop on their own, then whatever is left is killed. No rank outlives
// the launcher (each dies with it, PR_SET_PDEATHSIG).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launch/rank_launch.h"
#include "parallel/rendezvous_store.h"
#include "run/step_metrics.h"

namespace rematlab::launch {

// The processes a launch has started and not reaped yet. Only they may be signalled from
// outside the launcher: once reaped, a pid may belong to another process. Thread-safe.
class LiveChildren {
 public:
  // Sends signal `number` to `pid` if it is one of them; returns whether it was.
  bool signal(int pid, int number);
  bool contains(int pid) const;
  // The launcher's: a child started; waitpid(pid, status, options) with it forgotten once
  // reaped, under the lock `signal` takes, so that no signal can reach a reaped pid.
  void add(int pid);
  int reap(int pid, int* status, int options);

 private:
  mutable std::mutex mutex_;
  std::set<int> pids_;
};

struct LocalLaunch : ProcessLaunch {
  // Served by the caller, which then uses it too (a sweep's coordinator); null: served here.
  const parallel::LauncherStore* store = nullptr;
  std::string label = "rank";        // what the output and its messages call a process: "[rank 1] "
  LiveChildren* children = nullptr;  // kept up to date while the launch runs, if given

  // Independent processes (a sweep's workers) rather than the ranks of one run: one that ends
  // badly stops nobody. `on_ended` hears of every process that ends, once it is reaped (its
  // rank, pid and how it ended, e.g. "worker 1 (pid 42) was killed by signal 9 (Killed)"; clean:
  // exit code 0) and returns whether to start a fresh process with the same rank in its place.
  bool independent = false;
  std::function<bool(int rank, int pid, bool clean, const std::string& how)> on_ended;
  // Called at least every 100 ms while processes run, on the launcher's thread.
  std::function<void()> on_tick;
};

struct LaunchOutcome : ProcessLaunchOutcome {
  int failed_rank = -1;  // the rank that failed first (or stopped responding)
  // The first failure was a rank killed because it did not stop in time after a cancel was
  // forwarded (nothing had failed before): the stop caused it.
  bool killed_after_stop = false;
  int rank0_exit_code = 0;
  bool rank0_signalled = false;  // rank 0 died without recording anything itself
  // Whether rank 0 was still running when the failure was named (and could record the name).
  bool named_while_rank0_alive = false;
};

LaunchOutcome launch_local(const LocalLaunch& launch);

// Store keys shared by the launcher and the ranks (under the "rematlab" prefix).
inline constexpr const char* kFailureKey = "failure";
inline constexpr const char* kRunIdKey = "run_id";

}  // namespace rematlab::launch
