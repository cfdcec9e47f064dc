#include "sweep_worker.h"

#include <memory>

#include "common/current_exception.h"
#include "common/errors.h"
#include "plan/chain_costs_json.h"
#include "store/profile_registry.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "sweep/sweep_runner.h"
#include "train/gradient_check.h"

namespace rematlab::ui {
namespace {

QString legend_of(const SweepPoint& point, int64_t found = 0) {
  return QString::fromStdString(point_legend(point, found));
}

QString stop_summary(const std::vector<SweepRunResult>& results, std::size_t planned,
                     int64_t last_step) {
  if (results.empty()) return QString("Stopped before the first of %1 runs started").arg(planned);
  const SweepRunResult& last = results.back();
  QString where = QString("Stopped in run %1 of %2 (%3)")
                      .arg(results.size())
                      .arg(planned)
                      .arg(QString::fromStdString(last.point.label));
  if (last_step > 0)
    where += QString(" after step %1 of %2").arg(last_step).arg(last.point.config.steps);
  return where + "; it is recorded as cancelled";
}

}  // namespace

void SweepWorker::run_sweep(const QString& spec_json, const QString& database) {
  try {
    const SweepSpec spec = parse_sweep_spec(nlohmann::ordered_json::parse(spec_json.toStdString()));
    RunStore store(database.toStdString());
    RunWriter writer(database.toStdString());
    SweepRunner runner(spec, &writer, &store);
    int started = -1;
    int64_t last_step = 0;
    bool batch_named = false;  // the current max-batch run's legend has its batch
    SweepCallbacks callbacks;
    callbacks.cancel = &cancel_;
    callbacks.on_progress = [&](const SweepProgress& progress) {
      const int index = static_cast<int>(progress.run_index);
      if (index != started) {
        started = index;
        last_step = 0;
        batch_named = false;
        const SweepPoint& point = runner.points()[progress.run_index];
        emit runStarted(index, legend_of(point), static_cast<double>(point.config.budget_bytes));
      }
      const SweepPoint& point = runner.points()[progress.run_index];
      if (point.request.max_batch && !batch_named) {
        if (progress.training_batch > 0) {
          emit runRenamed(index, legend_of(point, progress.training_batch));
          batch_named = true;
        }
      }
      SweepPosition position;
      position.run_index = index;
      position.run_count = static_cast<int>(progress.run_count);
      position.eta_s = progress.eta_s;
      position.label = QString::fromStdString(progress.label);
      position.activity = QString::fromStdString(progress.activity);
      if (progress.step) {
        position.step = last_step = progress.step->step + 1;
        position.total_steps = progress.step->total_steps;
        emit stepFinished(index, *progress.step);
      }
      emit positionChanged(position);
    };
    int finished = 0;
    callbacks.on_run_finished = [&](const SweepRunResult& result) {
      if (result.point.request.max_batch && result.summary.config.batch > 0) {
        emit runRenamed(finished, legend_of(result.point, result.summary.config.batch));
      }
      emit runFinished(finished++, result.summary.status,
                       QString::fromStdString(result.summary.message), result.run_id.value_or(0),
                       result.summary.timeline);
    };
    const auto results = runner.run(callbacks);
    writer.flush();
    const bool stopped = cancel_.load() && (results.size() < runner.points().size() ||
                                            results.back().summary.status == RunStatus::kCancelled);
    emit sweepFinished(stopped ? stop_summary(results, runner.points().size(), last_step)
                               : QString("%1 of %1 runs recorded").arg(results.size()),
                       stopped);
  } catch (...) {
    emit failed(QString::fromStdString(describe_current_exception()));
  }
}

void SweepWorker::check(const rematlab::RunConfig& config) {
  try {
    const GradientCheckResult result = check_gradients(config, &cancel_);
    const QString verdict =
        QString("%1: %2 against none, %3 parameters, largest difference %4 (loss %5)")
            .arg(result.identical ? "identical" : "DIFFERENT")
            .arg(QString::fromStdString(config.checkpoint))
            .arg(result.params_compared)
            .arg(result.max_abs_diff, 0, 'g', 3)
            .arg(result.loss_diff, 0, 'g', 3);
    emit checkFinished(result.identical, verdict);
  } catch (const GradientCheckCancelled&) {
    emit checkFinished(false, "Gradient check stopped");
  } catch (...) {
    emit failed(QString::fromStdString(describe_current_exception()));
  }
}

void SweepWorker::profile(const rematlab::RunConfig& config, const QString& database) {
  try {
    std::unique_ptr<RunStore> store;
    try {
      store = std::make_unique<RunStore>(database.toStdString());
    } catch (const ReadOnlyDatabase&) {  // measured all the same, just not kept
      store = std::make_unique<RunStore>(database.toStdString(), StoreAccess::kReadOnly, false);
    }
    plan::ProfileOptions options;
    options.on_progress = [this](int64_t done, int64_t of) { emit profileProgress(done, of); };
    options.cancel = &cancel_;
    const KnownChainCosts known = known_chain_costs(config, store.get(), options);
    emit profileFinished(QString::fromStdString(known.key),
                         QString::fromStdString(plan::to_json(known.costs).dump()),
                         QString::fromStdString(known.source));
  } catch (const plan::ProfileCancelled&) {
    emit profileStopped();
  } catch (...) {
    emit profileFailed(QString::fromStdString(describe_current_exception()));
  }
}

}  // namespace rematlab::ui
