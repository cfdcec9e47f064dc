// How a sweep spread over worker processes talks, through the rendezvous store (c10d's
// TCPStore) every worker already reaches, whether our own launcher serves it (`sweep --workers
// N`), torchrun's agent or rank 0 under Slurm:
//
// - the coordinator publishes the plan (kPlanKey): the spec it expanded and, per point, what
//   it resolved for the point (threads, the peak FLOP/s MFU is taken against);
// - a worker takes an id (add on kWorkerIdsKey), then asks for its n-th point by pushing
//   {"kind": "ready", "ask": n, "rank": R, "host", "pid", "start_ticks"} on the events queue;
//   the coordinator answers under assign_key(id, n) with a point's index, or -1 when there is
//   nothing left. R is the worker's RANK, the number its launcher's output prefix shows
//   ("[worker 1]"), so messages name it alike; the id only tells processes apart (a fresh
//   worker started in a dead one's place has the same rank but another id);
// - while it runs a point the worker pushes "activity", "probe" and "step" events, then one
//   "done" with the outcome. These come from the thread that trains: they are the worker's
//   progress, and a worker holding a point that sends nothing for the timeout is hung (a
//   deadlocked training thread included). Only while that thread builds a model or profiles it
//   for a plan (work that reports nothing for a while and waits on no other process) does a
//   helper thread send "setup" four times per timeout instead, for at most kSetupTimeouts
//   timeouts (a build stuck for good is a hang too);
// - a worker told -1 says "bye" before it leaves, so that a coordinator serving the store (rank
//   0 under Slurm) ends only once nobody needs it any more;
// - a coordinator that fails (its database cannot be written) says why under kFailureKey, and
//   workers report that rather than an unreachable coordinator, each counting itself on
//   kFailureHeardKey so that a coordinator serving the store stays until they all have read it.
//
// One FIFO queue with a single consumer keeps each worker's events in order and lets the
// coordinator be the only process that writes the runs database.
#pragma once

#include <cstdint>
#include <string>

namespace rematlab::launch {

inline constexpr int kSweepProtocol = 3;   // a worker of another build refuses to join
inline constexpr int kSetupTimeouts = 10;  // the longest a model's build is waited for
inline constexpr const char* kPlanKey = "sweep/plan";
inline constexpr const char* kWorkerIdsKey = "sweep/worker_ids";
inline constexpr const char* kEventsQueue = "sweep/events";
inline constexpr const char* kCoordinatorFailureKey = "sweep/coordinator_failed";
inline constexpr const char* kFailureHeardKey = "sweep/coordinator_failed_heard";  // a counter

inline std::string assign_key(int64_t worker, int64_t ask) {
  return "sweep/assign/" + std::to_string(worker) + "/" + std::to_string(ask);
}

}  // namespace rematlab::launch
