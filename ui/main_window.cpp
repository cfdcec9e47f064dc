#include "main_window.h"

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFileInfo>
#include <QLineEdit>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <set>

#include "common/errors.h"
#include "compare_view.h"
#include "elided_label.h"
#include "experiment_panel.h"
#include "live_charts.h"
#include "plan/chain_costs_json.h"
#include "plan/chain_profile.h"
#include "plan/profile_key.h"
#include "plan_view.h"
#include "runs_view.h"
#include "scale_view.h"
#include "store/run_store.h"
#include "store/store_access.h"
#include "store/store_error.h"
#include "sweep_worker.h"
#include "workbench_settings.h"

namespace rematlab::ui {
namespace {

constexpr int kProgressPerRun = 1000;

// The window speaks to people, not shells or SQL: no "--db:" prefix and no SQLite detail, the
// problem alone (the path is named once, above it).
QString database_error_text(const QString& path, const std::exception& error) {
  QString reason;
  if (const auto* refused = dynamic_cast<const DatabaseRefused*>(&error)) {
    reason = "This file " + QString::fromStdString(refused->problem()) + ".";
  } else if (const auto* input = dynamic_cast<const InvalidInput*>(&error)) {
    reason = QString::fromStdString(input->reason());
  } else if (dynamic_cast<const StoreError*>(&error)) {
    reason = "This file is not a RematLab database, or it cannot be read.";
  } else {
    reason = QString::fromStdString(error.what());
  }
  return QString("Cannot open %1:\n%2").arg(QDir::toNativeSeparators(path), reason);
}

// A database chosen by name alone gets the extension the Open dialog lists.
QString with_database_suffix(const QString& path) {
  return QFileInfo(path).suffix().isEmpty() ? path + ".sqlite" : path;
}

QString format_eta(double seconds) {
  if (seconds < 0) return "ETA –";
  const qint64 total = static_cast<qint64>(seconds + 0.5);
  return total >= 3600 ? QString("ETA %1 h %2 min").arg(total / 3600).arg((total / 60) % 60)
                       : QString("ETA %1 min %2 s").arg(total / 60).arg(total % 60);
}

}  // namespace

MainWindow::MainWindow(const QString& database, QWidget* parent)
    : QMainWindow(parent),
      panel_(new ExperimentPanel),
      charts_(new LiveCharts),
      runs_(new RunsView),
      compare_(new CompareView),
      plan_(new PlanView),
      scale_(new ScaleView),
      tabs_(new QTabWidget),
      progress_(new QProgressBar),
      status_(new ElidedLabel("Ready")),
      database_label_(new ElidedLabel({}, Qt::ElideMiddle)),
      worker_(new SweepWorker) {
  qRegisterMetaType<rematlab::StepMetrics>();
  qRegisterMetaType<rematlab::RunConfig>();
  qRegisterMetaType<rematlab::RunStatus>();
  qRegisterMetaType<rematlab::ui::SweepPosition>();
  qRegisterMetaType<rematlab::ui::Timeline>();
  qRegisterMetaType<rematlab::ui::RankLayout>();
  tabs_->addTab(charts_, "Live");
  tabs_->addTab(runs_, "Runs");
  tabs_->addTab(compare_, "Compare");
  tabs_->addTab(plan_, "Plan");
  tabs_->addTab(scale_, "Scale");
  auto* splitter = new QSplitter;
  splitter->addWidget(panel_);  // its fields scroll; its Run/Stop footer stays in view
  splitter->addWidget(tabs_);
  splitter->setStretchFactor(1, 1);
  setCentralWidget(splitter);
  // Long messages and paths are elided (whole in their tooltips), never widening the window.
  statusBar()->addWidget(status_, 3);
  statusBar()->addPermanentWidget(database_label_, 2);
  statusBar()->addPermanentWidget(progress_);
  progress_->setMaximumWidth(200);
  progress_->setMinimumWidth(90);
  progress_->setFormat("%p%");
  build_menus();

  connect_worker();
  connect_views();
  worker_thread_.start();

  const WorkbenchSettings settings;
  restoreGeometry(settings.geometry());
  fit_to_screen(settings.geometry().isEmpty());
  restore_form(settings);
  QString path = database;
  if (path.isEmpty()) path = settings.last_database();
  if (path.isEmpty() || !open_database(path)) {
    open_database(QString::fromStdString(default_database_path()));
  }
  runs_->select_experiment(settings.last_experiment());
}

void MainWindow::connect_worker() {
  worker_->moveToThread(&worker_thread_);
  connect(&worker_thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(this, &MainWindow::startSweep, worker_, &SweepWorker::run_sweep);
  connect(this, &MainWindow::startDataParallel, worker_, &SweepWorker::run_data_parallel);
  connect(this, &MainWindow::startCheck, worker_, &SweepWorker::check);
  connect(worker_, &SweepWorker::runStarted, this, &MainWindow::on_run_started);
  connect(worker_, &SweepWorker::runRenamed, this, &MainWindow::on_run_renamed);
  connect(worker_, &SweepWorker::stepFinished, charts_, &LiveCharts::add_step);
  connect(worker_, &SweepWorker::positionChanged, this, &MainWindow::on_position);
  connect(worker_, &SweepWorker::runFinished, this, &MainWindow::on_run_finished);
  connect(worker_, &SweepWorker::sweepFinished, this, &MainWindow::on_sweep_finished);
  connect(worker_, &SweepWorker::failed, this, &MainWindow::on_failed);
  connect(worker_, &SweepWorker::checkFinished, this, &MainWindow::on_check_finished);
  connect(this, &MainWindow::startProfile, worker_, &SweepWorker::profile);
  connect(worker_, &SweepWorker::profileProgress, this, &MainWindow::on_profile_progress);
  connect(worker_, &SweepWorker::profileFinished, this, &MainWindow::on_profile_finished);
  connect(worker_, &SweepWorker::profileStopped, this, &MainWindow::on_profile_stopped);
  connect(worker_, &SweepWorker::profileFailed, this, &MainWindow::on_profile_failed);
}

void MainWindow::connect_views() {
  connect(plan_, &PlanView::profileRequested, this, &MainWindow::on_profile_requested);
  connect(plan_, &PlanView::runRequested, this, &MainWindow::on_plan_chosen);
  connect(scale_, &ScaleView::tryRequested, this, &MainWindow::on_layout_tried);
  connect(plan_, &PlanView::chartExported, this,
          [this](const QString& directory, const QStringList& written) {
            charts_exported(directory, written, 1);
          });
  connect(plan_, &PlanView::exportFailed, this, &MainWindow::show_error);
  connect(plan_, &PlanView::exportKept, this, [this](const QString& directory) {
    status_->setText("Nothing exported: the files already in " +
                     QDir::toNativeSeparators(directory) + " were kept");
  });
  connect(runs_, &RunsView::errorOccurred, this, &MainWindow::show_error);
  connect(runs_, &RunsView::runsDeleted, this, &MainWindow::forget_runs);
  connect(runs_, &RunsView::exported, status_, &ElidedLabel::setText);
  connect(panel_, &ExperimentPanel::actionsChanged, this, &MainWindow::update_actions);
  connect(panel_, &ExperimentPanel::sweepRequested, this, &MainWindow::on_sweep_requested);
  connect(panel_, &ExperimentPanel::checkRequested, this, &MainWindow::on_check_requested);
  connect(panel_, &ExperimentPanel::stopRequested, this, &MainWindow::stop);
  connect(runs_, &RunsView::compareRequested, this, &MainWindow::compare);
  connect(runs_, &RunsView::experimentChanged, this,
          [](qint64 id) { WorkbenchSettings().set_last_experiment(id); });
}

MainWindow::~MainWindow() {
  worker_->request_cancel();  // stops within one micro-batch
  worker_thread_.quit();
  worker_thread_.wait();
}

// No saved size, or one larger than this screen: the window takes most of the screen it is on
// (1800×1040 at most), so Run, the tabs and the status bar are all in view. On a laptop's screen
// (up to 1440 px wide) it takes all of it: every column of the Runs table counts there.
void MainWindow::fit_to_screen(bool first_start) {
  const QScreen* shown_on = screen();
  if (!shown_on) return;
  const QRect available = shown_on->availableGeometry();
  if (!first_start && available.contains(frameGeometry())) return;
  if (available.width() <= 1440) {
    setGeometry(available);
    setWindowState(windowState() | Qt::WindowMaximized);
    return;
  }
  const QSize wanted(std::min(1800, available.width() * 92 / 100),
                     std::min(1040, available.height() * 92 / 100));
  resize(wanted);
  move(available.center() - QPoint(width() / 2, height() / 2));
}

void MainWindow::restore_form(const WorkbenchSettings& settings) {
  const QByteArray form = settings.form();
  if (!form.isEmpty()) {
    try {  // written by this program; anything unreadable keeps the defaults
      panel_->load_spec(nlohmann::ordered_json::parse(form.toStdString()));
    } catch (const std::exception&) {
    }
  }
  panel_->set_experiment_name(settings.experiment_name());
}

void MainWindow::remember_form() {
  WorkbenchSettings settings;
  settings.set_experiment_name(panel_->experiment_name());
  const nlohmann::ordered_json values = panel_->form_values();
  if (!values.is_null()) settings.set_form(QByteArray::fromStdString(values.dump()));
}

void MainWindow::update_actions() {
  start_action_->setEnabled(panel_->can_start());
  check_action_->setEnabled(panel_->can_check());
  stop_action_->setEnabled(running_);
  start_action_->setToolTip(panel_->run_button()->toolTip());
  check_action_->setToolTip(panel_->check_button()->toolTip());
}

QString MainWindow::dialog_folder() const {
  return database_.isEmpty() ? QDir::homePath() : QFileInfo(database_).absolutePath();
}

bool MainWindow::open_database(const QString& path) {
  if (running_) {
    show_error("A sweep is writing to " + database_ + "; stop it before opening another database.");
    return false;
  }
  const std::string file = path.toStdString();
  QString read_only_reason;
  try {
    try {
      store_ = std::make_unique<RunStore>(file);
    } catch (const ReadOnlyDatabase&) {
      // Write-protected: browse it, but say so and offer nothing that would write.
      store_ = std::make_unique<RunStore>(file, StoreAccess::kReadOnly, /*create=*/false);
      read_only_reason =
          "This database is write-protected: its runs can be browsed, compared "
          "and exported, but not added to or deleted.";
    }
  } catch (const std::exception& error) {
    show_error(database_error_text(path, error));
    return false;
  }
  database_ = path;
  // Nothing of the last database stays on screen: its sweep's curves, its comparison (axes and
  // ticks too), its profiles and plan, its advice, the last sweep's progress.
  charts_->clear();
  compare_->set_runs({}, {});
  runs_->set_store(store_.get());
  const auto form = panel_->first_config();
  plan_->set_store(store_.get(), form ? *form : std::optional<RunConfig>());
  run_labels_.clear();
  endings_.clear();
  progress_->setRange(0, 1);
  progress_->setValue(0);
  progress_->setFormat("%p%");
  status_->setText("Opened " + QDir::toNativeSeparators(path));
  panel_->set_read_only_reason(read_only_reason);
  WorkbenchSettings().set_last_database(path);
  setWindowTitle("RematLab — " + QDir::toNativeSeparators(path));
  database_label_->setText("Database: " + QDir::toNativeSeparators(path) +
                           (read_only_reason.isEmpty() ? "" : " (read-only)"));
  database_label_->set_description(read_only_reason.isEmpty() ? "The runs database"
                                                              : read_only_reason);
  if (!read_only_reason.isEmpty()) {
    status_->setText(read_only_reason);
  } else if (store_->recovered_runs() > 0) {
    const int64_t recovered = store_->recovered_runs();
    status_->setText(QString(recovered == 1 ? "1 run left running by a process that ended is now "
                                              "marked interrupted"
                                            : "%1 runs left running by a process that ended are "
                                              "now marked interrupted")
                         .arg(recovered));
  }
  return true;
}

bool MainWindow::new_database(const QString& path) {
  return open_database(with_database_suffix(path));
}

bool MainWindow::database_read_only() const { return store_ && store_->read_only(); }

void MainWindow::forget_runs(const QList<qint64>& ids) { compare_->remove_runs(ids); }

void MainWindow::compare(const QList<qint64>& ids) {
  if (!store_ || ids.isEmpty()) return;
  std::vector<RunRecord> runs;
  std::map<int64_t, std::vector<StepMetrics>> steps;
  try {
    for (qint64 id : ids) {
      runs.push_back(store_->run(id));
      steps[id] = store_->steps(id);
    }
  } catch (const std::exception& error) {
    show_error(QString::fromStdString(error.what()));
    return;
  }
  compare_->set_runs(std::move(runs), std::move(steps));
  tabs_->setCurrentWidget(compare_);
}

QString MainWindow::status_text() const { return status_->text(); }

void MainWindow::set_busy(bool busy, bool profiling) {
  running_ = busy;
  profiling_ = busy && profiling;
  stopping_ = false;
  panel_->set_running(busy);  // revalidates, and so updates the menu's actions
  plan_->set_busy(busy, profiling_);
}

void MainWindow::stop() {
  if (!running_) return;
  worker_->request_cancel();
  stopping_ = true;
  status_->setText(stopping_text());
}

QString MainWindow::stopping_text() const {
  if (profiling_) return "Stopping the profile after its current repeat …";
  // Stages wait on one another inside a step, so a pipeline stops between steps.
  if (panel_->pipeline_stages() > 1) return "Stopping the pipeline after its current step …";
  return "Stopping after the current micro-batch …";
}

void MainWindow::refresh_runs() {
  try {
    runs_->refresh();
    plan_->refresh();
  } catch (const std::exception& error) {
    show_error(QString::fromStdString(error.what()));
  }
}

void MainWindow::on_sweep_requested(const QString& spec_json) {
  if (running_) return;
  if (!store_) {
    show_error("No runs database is open (File → Open database).");
    return;
  }
  set_busy(true);
  charts_->clear();
  tabs_->setCurrentWidget(charts_);
  progress_->setRange(0, 0);  // busy until the first position arrives
  progress_->setFormat("%p%");
  status_->setText("Starting …");
  last_run_status_.reset();
  run_labels_.clear();
  endings_.clear();
  remember_form();
  worker_->arm();
  if (panel_->data_parallel()) {
    emit startDataParallel(spec_json, panel_->rank_layout(), database_);
  } else {
    emit startSweep(spec_json, database_);
  }
}

void MainWindow::on_run_started(int index, const QString& label, double budget_bytes) {
  while (run_labels_.size() <= index) run_labels_ << QString();
  run_labels_[index] = label;
  charts_->begin_run(index, label, budget_bytes);
  refresh_runs();
}

void MainWindow::on_run_renamed(int index, const QString& label) {
  if (index < run_labels_.size()) run_labels_[index] = label;
  charts_->rename_run(index, label);
}

void MainWindow::on_position(const SweepPosition& position) {
  progress_->setRange(0, position.run_count * kProgressPerRun);
  const double within = position.total_steps > 0 ? static_cast<double>(position.step) /
                                                       static_cast<double>(position.total_steps)
                                                 : 0.0;
  progress_->setValue(position.run_index * kProgressPerRun +
                      static_cast<int>(within * kProgressPerRun));
  QString text = QString("Run %1 of %2 · %3 · ")
                     .arg(position.run_index + 1)
                     .arg(position.run_count)
                     .arg(position.label);
  text += position.total_steps > 0
              ? QString("step %1 of %2").arg(position.step).arg(position.total_steps)
              : position.activity;
  text += " · " + format_eta(position.eta_s);
  // The steps that finish while a run stops would otherwise hide that it is stopping.
  status_->setText(stopping_ ? stopping_text() : text);
}

void MainWindow::on_run_finished(int index, RunStatus status, const QString& message, qint64 run_id,
                                 const Timeline& timeline) {
  last_run_status_ = status;
  if (!timeline.empty()) {
    const QString label = index < run_labels_.size() ? run_labels_[index] : QString();
    charts_->show_timeline(QString("#%1 %2").arg(run_id).arg(label), timeline);
  }
  charts_->finish_run(index, status, message, run_id);
  // A run that did not end ok is said where the user looks: here, above the charts and in the
  // status bar when the sweep ends (a failure also as a dialog). Cancelled runs are the Stop's.
  if (status != RunStatus::kOk && status != RunStatus::kCancelled) {
    endings_
        << QString("run #%1 ended %2").arg(run_id).arg(QString::fromStdString(to_string(status))) +
               (message.isEmpty() ? QString() : ": " + message);
  }
  if (status == RunStatus::kFailed)
    show_error(QString("Run #%1 failed: %2").arg(run_id).arg(message));
  refresh_runs();
  // The run just recorded is shown, whatever filter the Runs tab had (one restored from the
  // last session hides a new sweep's experiment).
  if (run_id > 0) runs_->reveal(run_id);
}

void MainWindow::on_sweep_finished(const QString& summary, bool stopped) {
  set_busy(false);
  if (!stopped) {
    progress_->setRange(0, 1);
    progress_->setValue(1);
  }
  QString text = stopped ? summary : "Sweep done: " + summary;
  if (!endings_.isEmpty()) {
    // The reasons first: a long status is elided at its end, and they are what matters.
    text = (endings_.size() == 1
                ? endings_.front()
                : QString("%1 runs did not end ok: ").arg(endings_.size()) + endings_.join("; ")) +
           " (" + text + ")";
    text[0] = text[0].toUpper();
    progress_->setFormat(QString("%1 not ok").arg(endings_.size()));
  }
  status_->setText(text);
  refresh_runs();
  emit sweepEnded(last_run_status_ ? QString::fromStdString(to_string(*last_run_status_))
                                   : QString());
}

void MainWindow::on_failed(const QString& message) {
  set_busy(false);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  status_->setText("Failed: " + message);
  show_error(message);
  refresh_runs();
  emit sweepEnded(QString::fromStdString(to_string(RunStatus::kFailed)));
}

void MainWindow::on_check_requested(const RunConfig& config) {
  set_busy(true);
  worker_->arm();
  status_->setText("Checking gradients of " + QString::fromStdString(config.checkpoint) + " …");
  emit startCheck(config);
}

void MainWindow::on_check_finished(bool identical, const QString& verdict) {
  set_busy(false);
  status_->setText(verdict);
  emit checkEnded(identical, verdict);
}

void MainWindow::on_profile_requested() {
  if (running_) return;
  const auto config = panel_->first_config();
  if (!config) {
    show_error("The form cannot be profiled: " + panel_->problem());
    return;
  }
  if (!store_) {
    show_error("No runs database is open (File → Open database).");
    return;
  }
  set_busy(true, /*profiling=*/true);
  progress_->setRange(0, 0);
  status_->setText("Profiling " + QString::fromStdString(describe_model(*config)) + " …");
  worker_->arm();
  emit startProfile(*config, database_);
}

void MainWindow::on_profile_progress(qint64 done, qint64 of) {
  progress_->setRange(0, static_cast<int>(of));
  progress_->setValue(static_cast<int>(done));
  status_->setText(QString("Profiling: sublayer %1 of %2 measured").arg(done).arg(of));
}

void MainWindow::on_profile_finished(const QString& key, const QString& costs_json,
                                     const QString& source) {
  set_busy(false);
  progress_->setRange(0, 1);
  progress_->setValue(1);
  try {
    plan_->add_profile(
        key, plan::chain_costs_from_json(nlohmann::json::parse(costs_json.toStdString())), source);
  } catch (const std::exception& error) {
    show_error(QString::fromStdString(error.what()));
  }
  status_->setText("Profiled: costs from " + source);
  emit profileEnded(key);
}

void MainWindow::on_profile_stopped() {
  set_busy(false);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  status_->setText("Profiling stopped");
  emit profileEnded({});
}

void MainWindow::on_profile_failed(const QString& message) {
  set_busy(false);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  status_->setText(message);
  show_error("Profiling failed: " + message);
  emit profileEnded({});
}

namespace {

// The model and batch settings of `profiled` that the form's `trained` does not have (a setting
// the form has no field for, such as a gradient clip), as "a, b".
QString settings_the_form_lost(const RunConfig& profiled, const RunConfig& trained) {
  // What the form takes from the user rather than from the profile.
  static const std::set<std::string> kOwn = {
      "preset", "steps", "lr", "seed", "data", "checkpoint", "offload", "timeline", "budget_bytes"};
  const nlohmann::json wanted = to_json(profiled);
  const nlohmann::json got = to_json(trained);
  QStringList lost;
  for (const auto& item : wanted.items()) {
    if (kOwn.count(item.key()) == 0 && got.value(item.key(), nlohmann::json()) != item.value()) {
      lost << QString::fromStdString(item.key());
    }
  }
  return lost.join(", ");
}

}  // namespace

// The form trains the plan: beside its other policies when it describes the profiled
// configuration, else it is made to describe it (the plan is for that model and batch alone).
void MainWindow::on_plan_chosen(const QString& key, const RunConfig& config,
                                const QString& policy) {
  // Whether the form describes the profiled configuration is judged where it was profiled (its
  // host, LibTorch and repeats); whether the run will plan from this very profile, by the key
  // the run itself looks up (this host, this LibTorch, the default repeats).
  const auto profiled = plan::read_profile_key(key.toStdString());
  if (!profiled) return;
  const auto form = panel_->first_config();
  const bool same = form && plan::profile_key(*form, profiled->repeats, profiled->host,
                                              profiled->libtorch) == key.toStdString();
  if (same) {
    panel_->add_policy(policy);
  } else {
    panel_->load_configuration(config, policy);
  }
  const auto trained = panel_->first_config();  // after the form changed
  const QString lost = same || !trained ? QString() : settings_the_form_lost(config, *trained);
  const QString what = same ? policy + " added to the form's policies"
                       : lost.isEmpty()
                           ? "The form now trains the profiled model and batch with " + policy
                           : "The form cannot hold the profiled model's " + lost +
                                 ": it now trains the nearest it can with " + policy;
  const bool from_this_profile =
      trained && plan::profile_key(*trained, plan::ProfileOptions{}.repeats) == key.toStdString();
  status_->setText(what + (from_this_profile
                               ? "; the run plans from this profile"
                               : "; the run profiles this host first (the profile shown is of "
                                 "another host, LibTorch, repeat count or setting the form does "
                                 "not have)"));
}

void MainWindow::show_error(const QString& message) {
  // Not modal-blocking: the window (and a running sweep's curves) keep working behind it.
  auto* box = new QMessageBox(QMessageBox::Critical, "RematLab", message, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
  emit errorShown(message);
}

}  // namespace rematlab::ui
