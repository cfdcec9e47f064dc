#include "sweep_worker.h"

#include <QRegularExpression>

#include "common/current_exception.h"
#include "store/run_writer.h"
#include "sweep/sweep_runner.h"
#include "train/gradient_check.h"

namespace rematlab::ui {

void SweepWorker::run_sweep(const QString& spec_json, const QString& database) {
  cancel_ = false;
  try {
    const SweepSpec spec =
        parse_sweep_spec(nlohmann::ordered_json::parse(spec_json.toStdString()));
    RunWriter writer(database.toStdString());
    SweepRunner runner(spec, &writer);
    int started = -1;
    SweepCallbacks callbacks;
    callbacks.cancel = &cancel_;
    callbacks.on_progress = [&](const SweepProgress& progress) {
      const int index = static_cast<int>(progress.run_index);
      if (index != started) {
        started = index;
        const auto& point = runner.points()[progress.run_index];
        // The legend names policy, offload and batch (the search's batch is not known yet).
        QString legend = QString::fromStdString(describe_run(point.config));
        if (point.search_batch) {
          legend.replace(QRegularExpression(" b\\d+"), " b=max");
        }
        if (point.repeat > 0) legend += QString(" #%1").arg(point.repeat + 1);
        emit runStarted(index, legend, static_cast<double>(point.config.budget_bytes));
      }
      SweepPosition position;
      position.run_index = index;
      position.run_count = static_cast<int>(progress.run_count);
      position.eta_s = progress.eta_s;
      position.label = QString::fromStdString(progress.label);
      position.activity = QString::fromStdString(progress.activity);
      if (progress.step) {
        position.step = progress.step->step + 1;
        position.total_steps = progress.step->total_steps;
        emit stepFinished(index, *progress.step);
      }
      emit positionChanged(position);
    };
    int finished = 0;
    QString last_status;
    callbacks.on_run_finished = [&](const SweepRunResult& result) {
      last_status = result.failed ? "failed"
                                  : QString::fromStdString(to_string(result.summary.status));
      emit runFinished(finished++, last_status, QString::fromStdString(result.summary.message),
                       result.run_id.value_or(0), result.summary.timeline);
    };
    const auto results = runner.run(callbacks);
    writer.flush();
    emit sweepFinished(QString("%1 of %2 runs recorded; the last ended %3")
                           .arg(results.size())
                           .arg(runner.points().size())
                           .arg(last_status));
  } catch (...) {
    emit failed(QString::fromStdString(describe_current_exception()));
  }
}

void SweepWorker::check(const rematlab::RunConfig& config) {
  try {
    const GradientCheckResult result = check_gradients(config);
    const QString verdict =
        QString("%1: %2 against none, %3 parameters, largest difference %4 (loss %5)")
            .arg(result.identical ? "identical" : "DIFFERENT")
            .arg(QString::fromStdString(config.checkpoint))
            .arg(result.params_compared)
            .arg(result.max_abs_diff, 0, 'g', 3)
            .arg(result.loss_diff, 0, 'g', 3);
    emit checkFinished(result.identical, verdict);
  } catch (...) {
    emit failed(QString::fromStdString(describe_current_exception()));
  }
}

}  // namespace rematlab::ui
