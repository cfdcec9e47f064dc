#include "sweep/sweep_runner.h"

#include <algorithm>
#include <chrono>

#include "common/errors.h"
#include "train/trainer.h"

namespace rematlab {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

SweepRunner::SweepRunner(SweepSpec spec, RunWriter* writer)
    : spec_(std::move(spec)), writer_(writer) {
  points_ = expand_sweep(spec_, &skipped_);
}

std::vector<SweepRunResult> SweepRunner::run(const SweepCallbacks& callbacks) {
  if (writer_) experiment_id_ = writer_->create_experiment(spec_.name, spec_.source);
  std::vector<SweepRunResult> results;
  for (int64_t i = 0; i < static_cast<int64_t>(points_.size()); ++i) {
    if (callbacks.cancel && callbacks.cancel->load()) break;
    const auto started = std::chrono::steady_clock::now();
    results.push_back(run_point(i, callbacks));
    finished_run_seconds_ += seconds_since(started);
    ++finished_runs_;
    if (callbacks.on_run_finished) callbacks.on_run_finished(results.back());
    if (results.back().summary.status == RunStatus::kCancelled) break;
  }
  return results;
}

SweepRunResult SweepRunner::run_point(int64_t index, const SweepCallbacks& callbacks) {
  SweepRunResult result;
  result.point = points_[index];
  RunConfig config = result.point.config;
  const int64_t count = static_cast<int64_t>(points_.size());
  const auto run_started = std::chrono::steady_clock::now();

  auto report = [&](const std::string& activity, const StepMetrics* step) {
    if (!callbacks.on_progress) return;
    SweepProgress progress;
    progress.run_index = index;
    progress.run_count = count;
    progress.label = result.point.label;
    progress.activity = activity;
    progress.step = step;
    const double per_step =
        trained_steps_ > 0 ? trained_seconds_ / static_cast<double>(trained_steps_) : 0.0;
    const double this_run = step ? per_step * static_cast<double>(step->total_steps - step->step - 1)
                                 : -1.0;
    if (finished_runs_ > 0) {
      // Runs the sweep has not reached yet are as long as the finished ones were on average:
      // that counts their max-batch probes too, which a per-step rate cannot.
      const double per_run = finished_run_seconds_ / static_cast<double>(finished_runs_);
      const double elapsed = seconds_since(run_started);
      progress.eta_s = static_cast<double>(count - index - 1) * per_run +
                       (this_run >= 0 ? this_run : std::max(0.0, per_run - elapsed));
    } else if (trained_steps_ > 0) {
      progress.eta_s = per_step * static_cast<double>((count - index - 1) * config.steps) +
                       std::max(0.0, this_run);
    }
    callbacks.on_progress(progress);
  };

  if (writer_) result.run_id = writer_->begin_run(experiment_id_, result.point.label, config);
  try {
    if (result.point.search_batch) {
      const MaxBatchSpec& search = *spec_.max_batch;
      int64_t probe_index = 0;
      result.search = search_max_batch(search.limit, [&](int64_t batch) {
        report("probing batch " + std::to_string(batch), nullptr);
        BatchProbe probe = probe_by_training(config, batch, search.probe_steps, callbacks.cancel);
        if (writer_) {
          writer_->add_probe(*result.run_id, probe_index, batch, to_string(probe.status),
                             probe.peak_bytes);
        }
        ++probe_index;
        return probe;
      });
      if (result.search->max_batch > 0) config.batch = result.search->max_batch;
    }

    if (result.search && result.search->cancelled) {
      result.summary.status = RunStatus::kCancelled;
      result.summary.message = "cancelled during the max-batch search";
      result.summary.config = config;
    } else if (result.search && result.search->max_batch == 0) {
      result.summary.status = RunStatus::kOom;
      result.summary.message = "no batch fits the budget, not even 1";
      result.summary.config = config;
    } else {
      report("training at batch " + std::to_string(config.batch), nullptr);
      Trainer trainer(config);
      TrainerCallbacks trainer_callbacks;
      trainer_callbacks.cancel = callbacks.cancel;
      trainer_callbacks.on_step = [&](const StepMetrics& step) {
        trained_seconds_ += step.step_ms / 1000.0;
        ++trained_steps_;
        if (writer_) writer_->add_step(*result.run_id, step);
        report("training at batch " + std::to_string(config.batch), &step);
      };
      result.summary = trainer.run(trainer_callbacks);
    }
    result.summary.run_id = result.run_id;
    if (writer_) writer_->finish_run(*result.run_id, result.summary);
  } catch (const StoreError&) {
    throw;  // the database is unusable: stop the sweep rather than run unrecorded
  } catch (const std::exception& error) {
    // An engine failure (c10::Error, a disk offload error, …) ends this run, not the sweep.
    result.failed = true;
    result.summary.config = config;
    result.summary.message = error.what();
    if (writer_) writer_->fail_run(*result.run_id, error.what());
  }
  return result;
}

}  // namespace rematlab
