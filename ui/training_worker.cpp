#include "training_worker.h"

#include <c10/util/Exception.h>

#include "common/byte_size.h"
#include "common/errors.h"
#include "train/trainer.h"

namespace rematlab::ui {

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
  } catch (const InvalidInput& error) {
    emit failed(QString::fromStdString(error.what()));
  } catch (const c10::Error& error) {
    emit failed(QString("LibTorch: ") + error.what_without_backtrace());
  } catch (const std::exception& error) {
    emit failed(QString::fromStdString(error.what()));
  }
}

}  // namespace rematlab::ui
