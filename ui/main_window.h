// The workbench window: the experiment form on the left, live charts on the right, progress in
// the status bar. Training runs in a worker thread that is stopped and joined on close.
#pragma once

#include <QMainWindow>
#include <QThread>

#include "metatypes.h"

class QLabel;
class QProgressBar;

namespace rematlab::ui {

class LiveCharts;
class RunPanel;
class TrainingWorker;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  RunPanel* run_panel() const { return panel_; }
  LiveCharts* charts() const { return charts_; }
  bool is_running() const { return running_; }

 signals:
  void startRun(const rematlab::RunConfig& config);
  void startCheck(const rematlab::RunConfig& config);
  void checkEnded(bool identical, const QString& verdict);
  void runEnded(const QString& status);

 private:
  void set_busy(bool busy);  // a run or a check occupies the worker
  void on_run_requested(const RunConfig& config);
  void on_step(const StepMetrics& step);
  void on_run_finished(const QString& status, const QString& summary);
  void on_failed(const QString& message);
  void on_check_requested(const RunConfig& config);
  void on_check_finished(bool identical, const QString& verdict);

  RunPanel* panel_;
  LiveCharts* charts_;
  QProgressBar* progress_;
  QLabel* status_;
  QThread worker_thread_;
  TrainingWorker* worker_;  // owned by worker_thread_ (deleted on its finished())
  bool running_ = false;
};

}  // namespace rematlab::ui
