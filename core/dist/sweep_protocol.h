// How a sweep spread over worker processes talks, through the rendezvous store (c10d's
// TCPStore) every worker already reaches, whether our own launcher serves it (`sweep --workers
// N`), torchrun's agent or rank 0 under Slurm:
//
// - the coordinator publishes the plan (kPlanKey): the spec it expanded and, per point, what
//   it resolved for the point (threads, the peak FLOP/s MFU is taken against);
// - a worker takes an id (add on kWorkerIdsKey), then asks for its n-th point by pushing
//   {"kind": "ready", "ask": n} on the events queue; the coordinator answers under
//   assign_key(id, n) with a point's index, or -1 when there is nothing left;
// - while it runs a point the worker pushes "activity", "probe" and "step" events, then one
//   "done" with the outcome, and bumps its heartbeat (heartbeat_key) every second from a
//   thread of its own;
// - a worker told -1 says "bye" before it leaves, so that a coordinator serving the store (rank
//   0 under Slurm) ends only once nobody needs it any more.
//
// One FIFO queue with a single consumer keeps each worker's events in order and lets the
// coordinator be the only process that writes the runs database.
#pragma once

#include <chrono>
#include <string>

namespace rematlab::dist {

inline constexpr int kSweepProtocol = 1;  // a worker of another build refuses to join
inline constexpr const char* kPlanKey = "sweep/plan";
inline constexpr const char* kWorkerIdsKey = "sweep/worker_ids";
inline constexpr const char* kEventsQueue = "sweep/events";
inline constexpr std::chrono::seconds kHeartbeatInterval{1};

inline std::string assign_key(int64_t worker, int64_t ask) {
  return "sweep/assign/" + std::to_string(worker) + "/" + std::to_string(ask);
}
inline std::string heartbeat_key(int64_t worker) { return "sweep/alive/" + std::to_string(worker); }

}  // namespace rematlab::dist
