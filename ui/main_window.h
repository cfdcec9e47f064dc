// The workbench window: the experiment form on the left; on the right the live view, the runs
// of the open database, the comparison and the Plan tab; progress in the status bar, which also
// says how every run that did not end ok ended. Sweeps run in a worker thread that is cancelled
// and joined on close; quitting during a sweep stops it first and says so. Fits a 1024×600
// screen (main_window_menus.cpp: menus, tab shortcuts, exports and quitting).
#pragma once

#include <QMainWindow>
#include <QThread>
#include <memory>
#include <optional>

#include "metatypes.h"

class QAction;
class QProgressBar;
class QTabWidget;

namespace rematlab {
class RunStore;
}

namespace rematlab::ui {

class CompareView;
class ElidedLabel;
class ExperimentPanel;
class LiveCharts;
class PlanView;
class ScaleView;
struct TrialLayout;
class RunsView;
class SweepWorker;
class WorkbenchSettings;

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  // Opens `database` (empty: the last one used, or rematlab.sqlite in the user's data folder).
  explicit MainWindow(const QString& database = {}, QWidget* parent = nullptr);
  ~MainWindow() override;

  ExperimentPanel* experiment_panel() const { return panel_; }
  LiveCharts* charts() const { return charts_; }
  RunsView* runs_view() const { return runs_; }
  CompareView* compare_view() const { return compare_; }
  PlanView* plan_view() const { return plan_; }
  ScaleView* scale_view() const { return scale_; }
  QTabWidget* tabs() const { return tabs_; }
  QProgressBar* progress_bar() const { return progress_; }
  QString status_text() const;
  // What the status bar says while a run stops: a profile after its repeat, a pipeline after its
  // step, any other run after its micro-batch.
  QString stopping_text() const;
  bool is_running() const { return running_; }
  QString database_path() const { return database_; }
  // Opens another database; shows why in a dialog and keeps the current one when it fails.
  bool open_database(const QString& path);
  // Creates (or opens) a database; a name without an extension gets ".sqlite", which the Open
  // dialog lists.
  bool new_database(const QString& path);
  // Fills the compare view with these runs and shows it.
  void compare(const QList<qint64>& ids);
  // The open database could not be written (write-protected): writing actions are disabled.
  bool database_read_only() const;
  QAction* start_action() const { return start_action_; }
  QAction* check_action() const { return check_action_; }
  // Says in the status bar which chart images were written where (or that none were), and how
  // many of the `charts_asked` charts were left out because they were empty.
  void charts_exported(const QString& directory, const QStringList& written, int charts_asked);
  // File → Export charts into `directory`: asks before replacing files that are there.
  void export_charts_to(const QString& directory);
  // The status bar's database label (elided; the whole path in its tooltip).
  ElidedLabel* database_label() const { return database_label_; }
  ElidedLabel* status_label() const { return status_; }
  // Remembers the form's values for the next start (also done when a sweep starts and on close).
  void remember_form();

 signals:
  void startSweep(const QString& spec_json, const QString& database);
  void startDataParallel(const QString& spec_json, const rematlab::ui::RankLayout& layout,
                         const QString& database);
  void startCheck(const rematlab::RunConfig& config);
  void startProfile(const rematlab::RunConfig& config, const QString& database);
  // A profile for the Plan tab ended: `key` is empty when it failed or was stopped.
  void profileEnded(const QString& key);
  void checkEnded(bool identical, const QString& verdict);
  void sweepEnded(const QString& last_status);
  void errorShown(const QString& message);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  void build_menus();
  // Moves the worker to its thread and wires it both ways; the views' signals to this window.
  void connect_worker();
  void connect_views();
  void fit_to_screen(bool first_start);
  void restore_form(const WorkbenchSettings& settings);
  void update_actions();
  QString dialog_folder() const;
  // `profiling`: what keeps the window busy is a profile for the Plan tab.
  void set_busy(bool busy, bool profiling = false);
  void on_sweep_requested(const QString& spec_json);
  void on_run_started(int index, const QString& label, double budget_bytes);
  void on_run_renamed(int index, const QString& label);
  void on_position(const SweepPosition& position);
  void on_run_finished(int index, RunStatus status, const QString& message, qint64 run_id,
                       const Timeline& timeline);
  void on_sweep_finished(const QString& summary, bool stopped);
  void refresh_runs();
  void forget_runs(const QList<qint64>& ids);
  void on_failed(const QString& message);
  void on_check_requested(const RunConfig& config);
  void on_check_finished(bool identical, const QString& verdict);
  void on_profile_requested();
  void on_profile_progress(qint64 done, qint64 of);
  void on_profile_finished(const QString& key, const QString& costs_json, const QString& source);
  void on_profile_stopped();
  void on_profile_failed(const QString& message);
  void on_plan_chosen(const QString& key, const RunConfig& config, const QString& policy);
  // The Scale tab's "Try it here": the form takes the layout's degrees, sharding and policy.
  void on_layout_tried(const TrialLayout& trial);
  void show_error(const QString& message);
  void export_charts();
  void show_about();
  void stop();

  QString database_;
  std::unique_ptr<RunStore> store_;
  ExperimentPanel* panel_;
  LiveCharts* charts_;
  RunsView* runs_;
  CompareView* compare_;
  PlanView* plan_;
  ScaleView* scale_;
  QTabWidget* tabs_;
  QProgressBar* progress_;
  ElidedLabel* status_;
  ElidedLabel* database_label_;
  QAction* start_action_ = nullptr;
  QAction* stop_action_ = nullptr;
  QAction* check_action_ = nullptr;
  QThread worker_thread_;
  SweepWorker* worker_;  // owned by worker_thread_ (deleted on its finished())
  bool running_ = false;
  bool profiling_ = false;
  bool stopping_ = false;  // Stop was asked for: progress no longer replaces what it says
  std::optional<RunStatus> last_run_status_;
  QStringList run_labels_;  // of the current sweep, by run index
  QStringList endings_;     // of the current sweep: "run #12 ended oom: …", one per run not ok
};

}  // namespace rematlab::ui
