// One sweep point's work, wherever it runs: in the sweep's own process (SweepRunner) or in a
// worker process of a sweep spread over several (core/launch/sweep_worker.h). The max-batch search
// where the spec asks for one, then training. What it measures goes to the hooks; recording it
// is the caller's business, so both places record the same things the same way.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include "run/run_summary.h"
#include "sweep/max_batch.h"
#include "sweep/sweep_spec.h"

namespace rematlab {

struct PointHooks {
  // "probing batch 16", "training at batch 12": with the step just finished, if any.
  std::function<void(const std::string& activity, const StepMetrics* step)> on_activity;
  std::function<void(int64_t probe_index, const BatchProbe& probe)> on_probe;
  std::function<void(const StepMetrics& step)> on_step;
  // The batch the point trains at, once known (a max-batch point's after its search).
  std::function<void(int64_t batch)> on_training;
  // True before a model is built (and profiled, for a plan), false once it is: work that sends
  // nothing through the hooks above for a while.
  std::function<void(bool building)> on_setup;
  const std::atomic<bool>* cancel = nullptr;
};

struct PointOutcome {
  RunSummary summary;  // status failed: an engine error, summary.message says which
  std::optional<MaxBatchResult> search;
  bool engine_failed = false;  // the run threw: record it with fail_run, not finish_run
};

// `config` is the point's, with the peak FLOP/s already resolved. An engine error (c10::Error,
// a disk offload error, …) ends the point, not the caller: it comes back as engine_failed.
// StoreError, thrown by a hook whose recording side is gone, propagates.
PointOutcome run_sweep_point(const SweepPoint& point, RunConfig config, const PointHooks& hooks);

}  // namespace rematlab
