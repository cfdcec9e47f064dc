#include "training_worker.h"

#include <c10/util/Exception.h>

#include "common/byte_size.h"
#include "train/gradient_check.h"
#include "train/trainer.h"

namespace rematlab::ui {
namespace {

// For catch (...) blocks: no exception may leave a slot, it would end the process.
QString describe_current_exception() {
  try {
    throw;
  } catch (const c10::Error& error) {
    return QString("LibTorch: ") + error.what_without_backtrace();
  } catch (const std::exception& error) {
    return QString::fromStdString(error.what());
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

void TrainingWorker::run(const rematlab::RunConfig& config) {
  cancel_ = false;
  // No exception may leave a slot: it would terminate the process and take the window with it.
  try {
    Trainer trainer(config);
    TrainerCallbacks callbacks;
    callbacks.cancel = &cancel_;
    callbacks.on_step = [this](const StepMetrics& step) { emit stepFinished(step); };
    const RunSummary summary = trainer.run(callbacks);
    const QString line = QString("%1 steps, loss %2 → %3, %4 tokens/s, peak %5, activations %6")
                             .arg(summary.steps_completed)
                             .arg(summary.first_loss, 0, 'f', 3)
                             .arg(summary.final_loss, 0, 'f', 3)
                             .arg(summary.tokens_per_s, 0, 'f', 0)
                             .arg(QString::fromStdString(format_bytes(summary.peak_bytes)))
                             .arg(QString::fromStdString(format_bytes(summary.peak_activation_bytes)));
    emit runFinished(QString::fromStdString(to_string(summary.status)), line);
  } catch (...) {
    emit failed(describe_current_exception());
  }
}

void TrainingWorker::check(const rematlab::RunConfig& config) {
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
    emit failed(describe_current_exception());
  }
}

}  // namespace rematlab::ui
