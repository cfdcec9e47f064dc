// A worker of a sweep spread over processes (core/launch/sweep_protocol.h): it asks the
// coordinator for points until there are none left, runs each in this process exactly as a
// sweep in one process would (sweep/point_runner.h), and sends its probes, steps and outcome
// back, from the thread that trains (what it sends is its progress); it never opens the runs
// database.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "sweep/sweep_spec.h"

namespace rematlab::launch {

struct SweepWorkerOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};  // for the coordinator's answers
  const std::atomic<bool>* cancel = nullptr;                     // ends the point being run
  int rank = 0;  // its RANK: the number the coordinator's messages give it
  // Its LOCAL_RANK: a point on device "cuda" trains on cuda:LOCAL_RANK, one GPU per worker of a
  // node, as the ranks of a data-parallel run do.
  int local_rank = 0;
};

// Returns how many points it ran. Throws InvalidInput when its spec is not the one the
// coordinator expanded ("--spec"), parallel::PeerFailure when the coordinator stops answering or
// says it failed (with its reason).
int64_t run_sweep_worker(const c10::intrusive_ptr<c10d::Store>& store, const SweepSpec& spec,
                         const SweepWorkerOptions& options);

}  // namespace rematlab::launch
