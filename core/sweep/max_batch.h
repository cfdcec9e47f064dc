// The largest micro-batch whose training step fits a memory budget: doubling from 1 until a
// probe does not fit (or the limit is reached), then bisection between the last fit and the
// first miss. Every probe is kept, so the search can be shown and recorded.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "run/batch_probe.h"
#include "run/run_config.h"
#include "run/run_summary.h"

namespace rematlab {

struct MaxBatchResult {
  int64_t max_batch = 0;   // 0: not even batch 1 fits
  int64_t peak_bytes = 0;  // of the probe at max_batch
  std::vector<BatchProbe> probes;
  bool cancelled = false;
};

using BatchProbeFn = std::function<BatchProbe(int64_t batch)>;

// Assumes memory grows with the batch. Stops early, with `cancelled`, when a probe is cancelled.
MaxBatchResult search_max_batch(int64_t limit, const BatchProbeFn& probe);

// Steps a probe trains: at least 2, the second being the first with the optimizer's state.
inline constexpr int64_t kMinProbeSteps = 2;
inline constexpr int64_t kMaxProbeSteps = 1000;
// Throws InvalidInput(field, …) for a count outside [kMinProbeSteps, kMaxProbeSteps].
void check_probe_steps(int64_t steps, const std::string& field);

// A probe by training: `steps` steps of `base` at `batch` under base.budget_bytes (on CUDA a real
// out-of-memory counts too); a `schedule:` policy is probed at each of its intervals, and the
// batch fits only under all of them. Memory is measured on the calling thread. `on_setup`, if
// given, is told true before the model is built (and profiled, for a plan) and false once it is.
BatchProbe probe_by_training(const RunConfig& base, int64_t batch, int64_t steps,
                             const std::atomic<bool>* cancel,
                             const std::function<void(bool)>& on_setup = {});

}  // namespace rematlab
