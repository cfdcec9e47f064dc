#include "sweep/sweep_runner.h"

#include <algorithm>

#include "common/errors.h"
#include "store/peak_flops_registry.h"
#include "store/sqlite_db.h"
#include "train/trainer.h"

namespace rematlab {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

RunRecord SweepRunResult::record() const {
  RunRecord record;
  record.id = run_id.value_or(0);
  record.name = point.label;
  record.status = summary.status;
  record.message = summary.message;
  record.config = summary.config;
  record.request = point.request;
  record.result = summary;
  record.has_result = summary.steps_completed > 0;
  record.steps_recorded = summary.steps_completed;
  return record;
}

SweepRunner::SweepRunner(SweepSpec spec, RunWriter* writer, RunStore* store)
    : spec_(std::move(spec)), writer_(writer), store_(store) {
  points_ = expand_sweep(spec_, &skipped_);
}

std::vector<SweepRunResult> SweepRunner::run(const SweepCallbacks& callbacks) {
  if (writer_) experiment_id_ = writer_->create_experiment(spec_.name, spec_.source);
  std::vector<SweepRunResult> results;
  for (current_ = 0; current_ < static_cast<int64_t>(points_.size()); ++current_) {
    if (callbacks.cancel && callbacks.cancel->load()) break;
    run_started_ = std::chrono::steady_clock::now();
    results.push_back(run_point(callbacks));
    finished_run_seconds_ += seconds_since(run_started_);
    ++finished_runs_;
    if (callbacks.on_run_finished) callbacks.on_run_finished(results.back());
    if (results.back().summary.status == RunStatus::kCancelled) break;
  }
  return results;
}

double SweepRunner::eta_seconds(const StepMetrics* step) const {
  const int64_t remaining = static_cast<int64_t>(points_.size()) - current_ - 1;
  const double per_step =
      trained_steps_ > 0 ? trained_seconds_ / static_cast<double>(trained_steps_) : 0.0;
  const double this_run =
      step ? per_step * static_cast<double>(step->total_steps - step->step - 1) : -1.0;
  if (finished_runs_ > 0) {
    // Runs the sweep has not reached yet are as long as the finished ones were on average:
    // that counts their max-batch probes too, which a per-step rate cannot.
    const double per_run = finished_run_seconds_ / static_cast<double>(finished_runs_);
    return static_cast<double>(remaining) * per_run +
           (this_run >= 0 ? this_run : std::max(0.0, per_run - seconds_since(run_started_)));
  }
  if (trained_steps_ > 0) {
    return per_step * static_cast<double>(remaining * points_[current_].config.steps) +
           std::max(0.0, this_run);
  }
  return -1.0;
}

void SweepRunner::report(const std::string& activity, const StepMetrics* step,
                         const SweepCallbacks& callbacks) const {
  if (!callbacks.on_progress) return;
  SweepProgress progress;
  progress.run_index = current_;
  progress.run_count = static_cast<int64_t>(points_.size());
  progress.label = points_[current_].label;
  progress.activity = activity;
  progress.step = step;
  progress.eta_s = eta_seconds(step);
  callbacks.on_progress(progress);
}

MaxBatchResult SweepRunner::search_batch(std::optional<int64_t> run_id, RunConfig& config,
                                         const SweepCallbacks& callbacks) {
  const MaxBatchSpec& search = *points_[current_].request.max_batch;
  int64_t probe_index = 0;
  MaxBatchResult found = search_max_batch(search.limit, [&](int64_t batch) {
    report("probing batch " + std::to_string(batch), nullptr, callbacks);
    BatchProbe probe = probe_by_training(config, batch, search.probe_steps, callbacks.cancel);
    if (writer_) writer_->add_probe(*run_id, probe_index, batch, probe.status, probe.peak_bytes);
    ++probe_index;
    return probe;
  });
  config.batch = found.max_batch;
  return found;
}

RunSummary SweepRunner::train(std::optional<int64_t> run_id, const RunConfig& config,
                              const SweepCallbacks& callbacks) {
  const std::string activity = "training at batch " + std::to_string(config.batch);
  report(activity, nullptr, callbacks);
  Trainer trainer(config);
  TrainerCallbacks trainer_callbacks;
  trainer_callbacks.cancel = callbacks.cancel;
  trainer_callbacks.on_step = [&](const StepMetrics& step) {
    trained_seconds_ += step.step_ms / 1000.0;
    ++trained_steps_;
    if (writer_) writer_->add_step(*run_id, step);
    report(activity, &step, callbacks);
  };
  return trainer.run(trainer_callbacks);
}

SweepRunResult SweepRunner::run_point(const SweepCallbacks& callbacks) {
  SweepRunResult result;
  result.point = points_[current_];
  RunConfig config = result.point.config;
  if (writer_) {
    result.run_id =
        writer_->begin_run(experiment_id_, result.point.label, config, result.point.request);
  }
  try {
    // Before any training: the machine is as quiet as this sweep will leave it.
    resolve_peak_flops(config, store_);
    if (result.point.request.max_batch)
      result.search = search_batch(result.run_id, config, callbacks);
    result.summary.config = config;
    if (result.search && result.search->cancelled) {
      result.summary.status = RunStatus::kCancelled;
      result.summary.message = "cancelled during the max-batch search";
    } else if (result.search && result.search->max_batch == 0) {
      result.summary.status = RunStatus::kOom;
      result.summary.message = "no batch fits the budget, not even 1";
    } else {
      result.summary = train(result.run_id, config, callbacks);
    }
    result.summary.run_id = result.run_id;
    if (writer_) writer_->finish_run(*result.run_id, result.summary);
  } catch (const StoreError&) {
    throw;  // the database is unusable: stop the sweep rather than run unrecorded
  } catch (const std::exception& error) {
    // An engine failure (c10::Error, a disk offload error, …) ends this run, not the sweep.
    result.summary.status = RunStatus::kFailed;
    result.summary.config = config;
    result.summary.message = error.what();
    if (writer_) writer_->fail_run(*result.run_id, error.what());
  }
  return result;
}

}  // namespace rematlab
