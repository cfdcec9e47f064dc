#include "sweep/sweep_runner.h"

#include <algorithm>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "plan/chain_profile.h"
#include "store/peak_flops_registry.h"
#include "store/profile_registry.h"
#include "store/sqlite_db.h"
#include "sweep/point_runner.h"

namespace rematlab {

void record_outcome(PointOutcome outcome, SweepRunResult& result, const RunRecorder& recorder) {
  const bool engine_failed = outcome.engine_failed;
  result.summary = std::move(outcome.summary);
  result.search = std::move(outcome.search);
  result.summary.run_id = result.run_id;
  if (engine_failed) {
    recorder.fail(result.summary.message);
  } else {
    recorder.finish(result.summary);
  }
}
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
  progress.training_batch = training_batch_;
  progress.eta_s = eta_seconds(step);
  callbacks.on_progress(progress);
}

SweepRunResult SweepRunner::run_point(const SweepCallbacks& callbacks) {
  SweepRunResult result;
  result.point = points_[current_];
  training_batch_ = 0;
  RunConfig config = result.point.config;
  const RunRecorder recorder(writer_, experiment_id_, result.point.label, config,
                             result.point.request);
  result.run_id = recorder.id();
  PointOutcome outcome;
  try {
    // Before any training: the machine is as quiet as this sweep will leave it. A plan's chain
    // costs too, kept for the next point of the same configuration (a search's batch is not
    // known yet: its probes profile their own).
    resolve_peak_flops(config, store_);
    if (!result.point.request.max_batch && CheckpointPolicy::parse(config.checkpoint).is_plan()) {
      report("profiling the model for " + config.checkpoint, nullptr, callbacks);
      resolve_chain_costs(config, store_, callbacks.cancel);
    }
  } catch (const StoreError&) {
    throw;  // the database is unusable: stop the sweep rather than run unrecorded
  } catch (const plan::ProfileCancelled&) {
    outcome.summary.status = RunStatus::kCancelled;
    outcome.summary.config = config;
    outcome.summary.message = plan::kStoppedWhileProfiling;
  } catch (const std::exception& error) {
    outcome.engine_failed = true;
    outcome.summary.status = RunStatus::kFailed;
    outcome.summary.config = config;
    outcome.summary.message = error.what();
  }
  if (!outcome.engine_failed && outcome.summary.status != RunStatus::kCancelled) {
    PointHooks hooks;
    hooks.cancel = callbacks.cancel;
    hooks.on_activity = [&](const std::string& activity, const StepMetrics* step) {
      report(activity, step, callbacks);
    };
    hooks.on_training = [this](int64_t batch) { training_batch_ = batch; };
    hooks.on_probe = [&](int64_t index, const BatchProbe& probe) {
      recorder.add_probe(index, probe.batch, probe.status, probe.peak_bytes);
    };
    hooks.on_step = [&](const StepMetrics& step) {
      trained_seconds_ += step.step_ms / 1000.0;
      ++trained_steps_;
      recorder.add_step(step);
    };
    outcome = run_sweep_point(result.point, config, hooks);
  }
  record_outcome(std::move(outcome), result, recorder);
  return result;
}

}  // namespace rematlab
