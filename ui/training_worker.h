// Runs one training run off the GUI thread. Lives in its own QThread; only values (RunConfig in,
// StepMetrics and a summary line out) cross threads, through queued signals.
#pragma once

#include <QObject>
#include <QString>

#include <atomic>

#include "metatypes.h"

namespace rematlab::ui {

class TrainingWorker : public QObject {
  Q_OBJECT

 public:
  // Read between micro-batches by the trainer; set from any thread.
  void request_cancel() { cancel_ = true; }

 public slots:
  void run(const rematlab::RunConfig& config);
  // One step under the config's policy and under none, compared parameter by parameter.
  void check(const rematlab::RunConfig& config);

 signals:
  void stepFinished(const rematlab::StepMetrics& step);
  void runFinished(const QString& status, const QString& summary);
  void failed(const QString& message);
  void checkFinished(bool identical, const QString& verdict);

 private:
  std::atomic<bool> cancel_{false};
};

}  // namespace rematlab::ui
