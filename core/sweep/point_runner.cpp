#include "sweep/point_runner.h"

#include "plan/chain_profile.h"
#include "store/sqlite_db.h"
#include "train/trainer.h"

namespace rematlab {
namespace {

void tell(const PointHooks& hooks, const std::string& activity, const StepMetrics* step) {
  if (hooks.on_activity) hooks.on_activity(activity, step);
}

// Sets config.batch to the batch found (0 when not even 1 fits).
MaxBatchResult search_batch(const MaxBatchSpec& search, RunConfig& config,
                            const PointHooks& hooks) {
  int64_t probe_index = 0;
  MaxBatchResult found = search_max_batch(search.limit, [&](int64_t batch) {
    tell(hooks, "probing batch " + std::to_string(batch), nullptr);
    BatchProbe probe =
        probe_by_training(config, batch, search.probe_steps, hooks.cancel, hooks.on_setup);
    if (hooks.on_probe) hooks.on_probe(probe_index, probe);
    ++probe_index;
    return probe;
  });
  config.batch = found.max_batch;
  return found;
}

RunSummary train(const RunConfig& config, const PointHooks& hooks) {
  const std::string activity = "training at batch " + std::to_string(config.batch);
  if (hooks.on_training) hooks.on_training(config.batch);
  tell(hooks, activity, nullptr);
  const std::unique_ptr<Trainer> trainer = build_trainer(config, hooks.on_setup, hooks.cancel);
  TrainerCallbacks callbacks;
  callbacks.cancel = hooks.cancel;
  callbacks.on_step = [&](const StepMetrics& step) {
    if (hooks.on_step) hooks.on_step(step);
    tell(hooks, activity, &step);
  };
  return trainer->run(callbacks);
}

}  // namespace

PointOutcome run_sweep_point(const SweepPoint& point, RunConfig config, const PointHooks& hooks) {
  PointOutcome outcome;
  try {
    if (point.request.max_batch)
      outcome.search = search_batch(*point.request.max_batch, config, hooks);
    outcome.summary.config = config;
    if (outcome.search && outcome.search->cancelled) {
      outcome.summary.status = RunStatus::kCancelled;
      outcome.summary.message = "cancelled during the max-batch search";
    } else if (outcome.search && outcome.search->max_batch == 0) {
      outcome.summary.status = RunStatus::kOom;
      outcome.summary.message = "no batch fits the budget, not even 1";
    } else {
      outcome.summary = train(config, hooks);
    }
  } catch (const StoreError&) {
    throw;  // the recording side is unusable: stop rather than run unrecorded
  } catch (const plan::ProfileCancelled&) {
    outcome.summary = RunSummary{};
    outcome.summary.status = RunStatus::kCancelled;
    outcome.summary.config = config;
    outcome.summary.message = plan::kStoppedWhileProfiling;
  } catch (const std::exception& error) {
    outcome.engine_failed = true;
    outcome.summary = RunSummary{};
    outcome.summary.status = RunStatus::kFailed;
    outcome.summary.config = config;
    outcome.summary.message = error.what();
  }
  return outcome;
}

}  // namespace rematlab
