// Runs sweeps (a single run is a sweep without axes), data-parallel runs and gradient checks off
// the GUI thread.
// Lives in its own QThread; only values cross threads, through queued signals. Every run is
// recorded in the runs database by core's RunWriter.
#pragma once

#include <QObject>
#include <QString>
#include <atomic>

#include "metatypes.h"

namespace rematlab::ui {

class SweepWorker : public QObject {
  Q_OBJECT

 public:
  // Called on the GUI thread before a request is queued: a Stop that arrives between the request
  // and the moment the worker picks it up then still stops it (it runs nothing).
  void arm() { cancel_ = false; }
  // Read between micro-batches by the trainer and the gradient check; set from any thread.
  void request_cancel() { cancel_ = true; }

 public slots:
  // `spec_json`: a sweep spec as core's parse_sweep_spec reads it; `database`: an existing
  // RematLab database (the window opened it).
  void run_sweep(const QString& spec_json, const QString& database);
  // The sweep's one run trained by the layout's processes of rematlab-cli
  // (data_parallel_run.cpp). Rank r's steps come as stepFinished(r, …); the run as run 0.
  void run_data_parallel(const QString& spec_json, const rematlab::ui::RankLayout& layout,
                         const QString& database);
  // One step under the config's policy and under none, compared parameter by parameter.
  void check(const rematlab::RunConfig& config);
  // The chain costs of `config` (core/store/profile_registry.h): kept in `database`, or measured
  // now and kept there (not when it is write-protected). Stops between stages on request.
  void profile(const rematlab::RunConfig& config, const QString& database);

 signals:
  void runStarted(int index, const QString& label, double budget_bytes);
  // Run `index` is now called `label` (a max-batch run, once its batch is found).
  void runRenamed(int index, const QString& label);
  void stepFinished(int index, const rematlab::StepMetrics& step);
  void positionChanged(const rematlab::ui::SweepPosition& position);
  // `message` says why when `status` is not ok.
  void runFinished(int index, rematlab::RunStatus status, const QString& message, qint64 run_id,
                   const rematlab::ui::Timeline& timeline);
  // `stopped`: a Stop ended the sweep early; `summary` says where.
  void sweepFinished(const QString& summary, bool stopped);
  void failed(const QString& message);  // the sweep could not start or the database failed
  // `verdict` says what was compared and found, or that the check was stopped.
  void checkFinished(bool identical, const QString& verdict);
  void profileProgress(qint64 done, qint64 of);
  // `costs_json`: plan/chain_costs_json.h; `source`: where they came from.
  void profileFinished(const QString& key, const QString& costs_json, const QString& source);
  void profileStopped();  // by Stop or by closing the window; nothing was kept
  void profileFailed(const QString& message);

 private:
  std::atomic<bool> cancel_{false};
};

}  // namespace rematlab::ui
