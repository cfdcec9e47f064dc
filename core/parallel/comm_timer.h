// A step's communication, measured: how long collectives were in flight (comm_ms, the union of
// their intervals, blocking ones included) and how long the training thread was blocked on them
// (wait_ms). The difference is the communication hidden behind computation (backward and
// recomputation).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "run/step_metrics.h"

namespace rematlab::parallel {

class CommTimer {
 public:
  using Clock = std::chrono::steady_clock;

  // An asynchronous collective issued now. On Gloo it ends when its future completes (marked by
  // Gloo's thread); NCCL completes futures when a collective is queued, so there its interval
  // is its start plus the duration CUDA events measured (`device_timed`).
  void launched(const c10::intrusive_ptr<c10d::Work>& work, bool device_timed);
  // `work` has been waited for: a collective whose end was not marked by its future (Gloo's
  // reduce-scatter has none) ends now at the latest.
  void waited(const c10::intrusive_ptr<c10d::Work>& work);
  // A span the training thread was blocked on communication.
  void blocked(Clock::time_point start, Clock::time_point end);
  // Runs `fn`, which the training thread waits on communication in, and records it as blocked.
  template <typename Fn>
  auto blocking(Fn&& fn) {
    struct Record {
      CommTimer& timer;
      Clock::time_point start;
      ~Record() { timer.blocked(start, Clock::now()); }
    } record{*this, Clock::now()};
    return fn();
  }

  double comm_ms() const;
  double wait_ms() const;
  void reset();
  // The step's comm_ms and comm_wait_ms into `metrics`, and a new step begins.
  void report(StepMetrics& metrics);

 private:
  struct Launched {
    Clock::time_point start;
    std::shared_ptr<std::atomic<int64_t>> end_ns;  // since the clock's epoch; 0 until done
    const c10d::Work* identity = nullptr;          // to match waited(); never dereferenced
    // Held for NCCL's duration only: a Gloo collective must be freed by its waiter (see
    // DistContext::wait).
    c10::intrusive_ptr<c10d::Work> device_work;
  };
  std::vector<Launched> launched_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> blocked_;
};

}  // namespace rematlab::parallel
