// Runs an expanded sweep unattended: one run after another (a max-batch search first where the
// spec asks for it), every run and step recorded by the RunWriter, past runs that end oom or
// diverged or fail, until the end or a cancel (the current run is then recorded `cancelled`).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "run/run_summary.h"
#include "store/run_recorder.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "sweep/max_batch.h"
#include "sweep/point_runner.h"
#include "sweep/sweep_spec.h"

namespace rematlab {

struct SweepProgress {
  int64_t run_index = 0;  // 0-based
  int64_t run_count = 0;
  std::string label;
  std::string activity;               // "probing batch 16", "training at batch 12", …
  const StepMetrics* step = nullptr;  // the step just finished, if any
  int64_t training_batch = 0;         // the batch the run trains at once known; 0 while searching
  double eta_s = -1.0;                // whole sweep; negative until there is a step to go by
};

struct SweepRunResult {
  SweepPoint point;
  std::optional<int64_t> run_id;
  RunSummary summary;  // status failed: summary.message says why
  std::optional<MaxBatchResult> search;

  // The run as the database records it (without the database's identity fields).
  RunRecord record() const;
};

// A point's outcome into its result and its record: the same for a point trained here and one a
// worker process trained (core/launch/sweep_coordinator.cpp).
void record_outcome(PointOutcome outcome, SweepRunResult& result, const RunRecorder& recorder);

struct SweepCallbacks {
  std::function<void(const SweepProgress&)> on_progress;  // on the sweep's thread
  std::function<void(const SweepRunResult&)> on_run_finished;
  const std::atomic<bool>* cancel = nullptr;
};

class SweepRunner {
 public:
  // `writer` may be null (nothing recorded). `store` (may be null) keeps the peak FLOP/s runs
  // are measured against (store/peak_flops_registry.h).
  SweepRunner(SweepSpec spec, RunWriter* writer, RunStore* store = nullptr);

  const std::vector<SweepPoint>& points() const { return points_; }
  const std::vector<std::string>& skipped() const { return skipped_; }
  std::optional<int64_t> experiment_id() const { return experiment_id_; }

  // Runs every point; returns one result per run started.
  std::vector<SweepRunResult> run(const SweepCallbacks& callbacks);

 private:
  SweepRunResult run_point(const SweepCallbacks& callbacks);
  void report(const std::string& activity, const StepMetrics* step,
              const SweepCallbacks& callbacks) const;
  double eta_seconds(const StepMetrics* step) const;

  SweepSpec spec_;
  RunWriter* writer_;
  RunStore* store_;
  std::vector<std::string> skipped_;
  std::vector<SweepPoint> points_;
  std::optional<int64_t> experiment_id_;
  // For the ETA: steps trained and the time they took, and whole runs (probes included).
  double trained_seconds_ = 0.0;
  int64_t trained_steps_ = 0;
  double finished_run_seconds_ = 0.0;
  int64_t finished_runs_ = 0;
  int64_t current_ = 0;         // the point being run
  int64_t training_batch_ = 0;  // its batch, once it trains
  std::chrono::steady_clock::time_point run_started_;
};

}  // namespace rematlab
