// The one process that records a sweep spread over workers (core/launch/sweep_protocol.h): it
// hands out points as workers ask for them, writes what they send into the runs database
// through its single RunWriter, reports the whole sweep's progress, and fails the point of a
// worker that dies or stops making progress, so the sweep goes on without it. It runs in the parent
// of `sweep --workers N` (on the launcher's thread) or on a thread of rank 0 under torchrun or
// Slurm; `pump` never blocks for long, so either can call it in its own loop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "common/process_identity.h"
#include "store/run_writer.h"
#include "sweep/sweep_runner.h"
#include "sweep/sweep_spec.h"

namespace rematlab::launch {

struct SweepCoordinatorOptions {
  // A worker holding a point that sends nothing (no step, probe, activity or setup beat) this
  // long is hung.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  // How long what a worker sent just before it ended may take to arrive: the store serves each
  // connection on its own, so a `done` can be read after the launcher has reaped the sender.
  std::chrono::milliseconds settle{std::chrono::seconds(2)};
  // Under torchrun or Slurm, the world size: the sweep ends once every worker has been told
  // there is nothing left (or is lost), or `timeout` after the last point ended. 0: the caller
  // knows when its workers are gone (our launcher).
  int expected_workers = 0;
  const std::atomic<bool>* cancel = nullptr;  // stop handing out points
  std::function<void(const SweepProgress&)> on_progress;
  std::function<void(const std::string&)> on_note;  // "point 2/4 (…) -> worker 1 (pid 42 on h)"
  // A worker given up on while its process may live (it hung): our launcher kills it by its pid
  // if that is still a child it has not reaped. Never called for a worker reported ended.
  std::function<void(int pid)> on_lost;
};

class SweepCoordinator {
 public:
  // `points` is the expanded sweep, each config final (threads, peak FLOP/s resolved); `writer`
  // may be null (nothing recorded). Creates the experiment and publishes the plan.
  SweepCoordinator(c10::intrusive_ptr<c10d::Store> store, const SweepSpec& spec,
                   std::vector<SweepPoint> points, RunWriter* writer,
                   SweepCoordinatorOptions options);

  // Handles every event the workers sent since the last call and checks the progress of the
  // workers that hold a point. Throws StoreError when the database cannot be written.
  void pump();
  // A worker process ended (our launcher reaped it): the point it held, if any, is failed with
  // `how` unless its `done` arrives within `settle`. Returns whether it was a worker that had
  // asked for points (so that a fresh one may take its place; one that ends before asking would
  // only end again).
  bool worker_ended(int pid, const std::string& how);
  // Pumps until the point of every worker reported ended is settled (done or failed).
  void settle_ended_workers();
  // This coordinator cannot go on (`why`: its database failed): tells the workers, which stop
  // with that reason instead of waiting for answers that will not come.
  void abandon(const std::string& why);
  // After abandon: whether every expected worker has read why (or had left before).
  bool abandon_heard();

  bool work_left() const;  // points not handed out yet (and no cancel)
  bool finished() const;   // nothing running, nothing left, every expected worker let go
  std::optional<int64_t> experiment_id() const { return experiment_id_; }
  std::size_t point_count() const { return points_.size(); }
  // Every point handed out, in the spec's order.
  std::vector<SweepRunResult> results() const;

 private:
  enum class PointState { kWaiting, kRunning, kDone };
  struct Point {
    SweepPoint point;
    PointState state = PointState::kWaiting;
    int64_t worker = -1;
    std::string activity;
    SweepRunResult result;
    RunRecorder recorder;  // begun when a worker takes the point
  };
  struct Worker {
    int64_t rank = -1;        // its RANK: how messages and its launcher's output name it
    ProcessIdentity process;  // where it trains: recorded as the host and pid of its runs
    int64_t point = -1;       // the one it holds
    bool released = false;
    bool lost = false;
    bool ended = false;  // its process is gone (reaped): never signal its pid again
    std::string how_ended;
    std::chrono::steady_clock::time_point ended_at;
    std::chrono::steady_clock::time_point heard;  // when it last made progress
  };

  void handle(const std::string& text);
  void on_ready(int64_t id, const nlohmann::json& event);
  void on_done(Point& point, Worker& worker, const nlohmann::json& event);
  // `alive`: it may still be running (it stopped responding), so on_lost is told.
  void lose(int64_t id, const std::string& why, bool alive);
  void finish(Point& point, int64_t index);
  void check_workers();
  void report(int64_t index, const StepMetrics* step);
  std::string who(int64_t id) const;

  c10::intrusive_ptr<c10d::Store> store_;
  RunWriter* writer_;
  SweepCoordinatorOptions options_;
  std::vector<Point> points_;
  std::map<int64_t, Worker> workers_;
  std::optional<int64_t> experiment_id_;
  std::size_t next_ = 0;  // the next point to hand out
  std::size_t done_ = 0;
  bool stopped_ = false;  // a point came back cancelled: hand out no more
  // While worker_ended reads what a reaped worker sent: its pid, and whether it had asked.
  std::optional<int64_t> ended_pid_;
  bool asked_after_end_ = false;
  std::optional<std::chrono::steady_clock::time_point> stop_seen_;  // when cancel was first read
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::time_point last_done_;
  std::chrono::steady_clock::time_point workers_checked_;
};

}  // namespace rematlab::launch
