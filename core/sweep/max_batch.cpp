#include "sweep/max_batch.h"

#include <algorithm>
#include <memory>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "memory/device_memory.h"
#include "plan/chain_profile.h"
#include "runtime/device.h"
#include "train/trainer.h"

namespace rematlab {
namespace {

bool fits(const BatchProbe& probe) {
  // A diverged probe still ran its steps within the budget: memory is what is searched.
  return probe.status == RunStatus::kOk || probe.status == RunStatus::kDiverged;
}

}  // namespace

MaxBatchResult search_max_batch(int64_t limit, const BatchProbeFn& probe) {
  MaxBatchResult result;
  int64_t fit = 0;   // largest batch known to fit
  int64_t miss = 0;  // smallest batch known not to fit; 0: none yet
  auto try_batch = [&](int64_t batch) {
    result.probes.push_back(probe(batch));
    const BatchProbe& outcome = result.probes.back();
    if (outcome.status == RunStatus::kCancelled) {
      result.cancelled = true;
      return false;
    }
    if (fits(outcome)) {
      fit = batch;
      result.peak_bytes = outcome.peak_bytes;
    } else {
      miss = batch;
    }
    return true;
  };

  for (int64_t batch = 1; miss == 0;) {
    if (!try_batch(batch)) return result;
    if (miss != 0 || batch == limit) break;
    batch = std::min(batch * 2, limit);
  }
  while (miss != 0 && miss - fit > 1) {
    if (!try_batch(fit + (miss - fit) / 2)) return result;
  }
  result.max_batch = fit;
  return result;
}

namespace {

BatchProbe probe_once(const RunConfig& base, int64_t batch, int64_t steps,
                      const std::atomic<bool>* cancel, const std::function<void(bool)>& on_setup) {
  RunConfig config = base;
  config.batch = batch;
  config.steps = steps;
  config.warmup_steps = 0;
  config.timeline = false;
  BatchProbe probe;
  probe.batch = batch;
  RunSummary summary;
  try {
    const std::unique_ptr<Trainer> trainer = build_trainer(config, on_setup, cancel);
    TrainerCallbacks callbacks;
    callbacks.cancel = cancel;
    callbacks.report_utilisation = false;
    summary = trainer->run(callbacks);  // an out-of-memory in a step comes back as status oom
  } catch (const plan::ProfileCancelled&) {
    probe.status = RunStatus::kCancelled;
    probe.message = plan::kStoppedWhileProfiling;
    return probe;
  } catch (const c10::OutOfMemoryError& error) {
    // Building the model did not fit: the trainer is gone, so is what it held; give the cached
    // blocks back so the next, smaller probe starts from a clean device.
    device_memory::empty_cache(parse_device(config.device));
    probe.status = RunStatus::kOom;
    probe.message = std::string("building the model ran out of device memory: ") +
                    error.what_without_backtrace();
    return probe;
  }
  probe.status = summary.status;
  probe.message = summary.message;
  for (const StepMetrics& step : summary.steps)
    probe.peak_bytes = std::max(probe.peak_bytes, step.peak_bytes);
  return probe;
}

}  // namespace

void check_probe_steps(int64_t steps, const std::string& field) {
  if (steps < kMinProbeSteps || steps > kMaxProbeSteps) {
    throw InvalidInput(field, "must be between " + std::to_string(kMinProbeSteps) + " and " +
                                  std::to_string(kMaxProbeSteps) +
                                  ": a probe's first step has no optimizer state yet (AdamW "
                                  "makes it in that step's update), so one step cannot show the "
                                  "peak of the steps after it");
  }
}

BatchProbe probe_by_training(const RunConfig& base, int64_t batch, int64_t steps,
                             const std::atomic<bool>* cancel,
                             const std::function<void(bool)>& on_setup) {
  check_probe_steps(steps, "--probe-steps");
  // A schedule trains every one of its intervals in turn, and a short probe would see only the
  // first: each is probed, and the batch fits only if it fits under all of them.
  const CheckpointPolicy policy = CheckpointPolicy::parse(base.checkpoint);
  const auto& schedule = policy.schedule();
  if (schedule.size() <= 1) return probe_once(base, batch, steps, cancel, on_setup);
  BatchProbe worst;
  worst.batch = batch;
  for (const auto& [progress, interval] : schedule) {
    RunConfig config = base;
    config.checkpoint = "every:" + std::to_string(interval);
    BatchProbe probe = probe_once(config, batch, steps, cancel, on_setup);
    if (!fits(probe)) {
      if (probe.status != RunStatus::kCancelled) {
        probe.message = "at every:" + std::to_string(interval) + " (the schedule's from " +
                        std::to_string(static_cast<int>(progress * 100.0)) +
                        " %): " + probe.message;
      }
      return probe;
    }
    worst.peak_bytes = std::max(worst.peak_bytes, probe.peak_bytes);
    if (probe.status == RunStatus::kDiverged) worst.status = RunStatus::kDiverged;
  }
  return worst;
}

}  // namespace rematlab
