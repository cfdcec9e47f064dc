// The workbench through its real widgets, offscreen: sweeps run in the worker and land in a real
// database, curves per run, the comparison's ratios, Stop, errors as dialogs, settings.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <qcustomplot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStatusBar>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>
#include <QTreeWidget>
#include <QWheelEvent>
#include <cmath>
#include <fstream>
#include <sstream>

#include "advice_panel.h"
#include "common/errors.h"
#include "compare_view.h"
#include "experiment_panel.h"
#include "field_errors.h"
#include "live_charts.h"
#include "main_window.h"
#include "runs_view.h"
#include "store/run_store.h"
#include "store/sqlite_db.h"
#include "sweep/default_study.h"
#include "sweep/sweep_spec.h"
#include "window_bench.h"
#include "workbench_settings.h"

namespace {

using rematlab::RunStatus;
using rematlab::RunStore;
using rematlab::StoreAccess;
using rematlab::ui::ExperimentPanel;
using rematlab::ui::LiveCharts;
using rematlab::ui::MainWindow;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::kTimeoutMs;

TEST(ExperimentPanel, InvalidPolicyDisablesRunWithTheReasonAtTheField) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->policies_field()->setText("none; every:0");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("every:0")) << panel->problem().toStdString();
  EXPECT_TRUE(panel->run_button()->toolTip().contains("every:0"));
  EXPECT_TRUE(panel->policies_field()->property("invalid").toBool());  // marked at the field
  EXPECT_TRUE(panel->policies_field()->toolTip().startsWith(panel->problem()));
  panel->policies_field()->setText("none; sublayer:1,2");
  EXPECT_TRUE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().isEmpty());
  EXPECT_FALSE(panel->policies_field()->property("invalid").toBool());
  EXPECT_FALSE(panel->policies_field()->toolTip().contains("every:0"));
}

TEST(ExperimentPanel, BadBatchListAndMissingBudgetAreNamed) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->batch_field()->setText("8, lots");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("lots"));
  EXPECT_TRUE(panel->batch_field()->property("invalid").toBool());
  panel->batch_field()->setText("8, 16");
  EXPECT_TRUE(panel->run_button()->isEnabled());
  panel->max_batch_box()->setChecked(true);
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("budget"));
  panel->budget_field()->setText("64MiB");
  EXPECT_TRUE(panel->run_button()->isEnabled());
}

// A spec with fields of the wrong type (hand-edited, or from an older version) takes every
// field it can and keeps the others as they were: never half a form, never an exception.
TEST(ExperimentPanel, ASpecWithFieldsOfTheWrongTypeIsTakenFieldByField) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  const QString preset_before = panel->preset_field()->currentText();
  const auto spec = nlohmann::ordered_json::parse(R"({
      "name": 7,
      "base": {"preset": 5, "dropout": "much", "lr": "fast", "accum": 3, "steps": 4},
      "max_batch": {"budget": "64MiB", "limit": "large"},
      "data_parallel": {"ranks": "two", "shard": 1}})");
  EXPECT_NO_THROW(panel->load_spec(spec));
  EXPECT_EQ(panel->preset_field()->currentText(), preset_before);
  EXPECT_EQ(panel->findChild<QSpinBox*>("accum")->value(), 3);  // the fields that were right
  EXPECT_EQ(panel->steps_field()->value(), 4);
  EXPECT_TRUE(panel->max_batch_box()->isChecked());
  EXPECT_EQ(panel->budget_field()->text(), "64MiB");
  EXPECT_NO_THROW(panel->load_spec(nlohmann::ordered_json::array({1, 2})));
  EXPECT_NO_THROW(panel->load_spec(nlohmann::ordered_json::parse(R"({"max_batch": 3})")));
  EXPECT_FALSE(panel->max_batch_box()->isChecked());
}

TEST(ExperimentPanel, LoadsTheDefaultStudyAsTheSameSweep) {
  Bench bench;
  bench.panel->load_spec(rematlab::default_study_spec());
  ASSERT_TRUE(bench.panel->problem().isEmpty()) << bench.panel->problem().toStdString();
  const auto from_form = rematlab::expand_sweep(rematlab::parse_sweep_spec(*bench.panel->spec()));
  const auto expected =
      rematlab::expand_sweep(rematlab::parse_sweep_spec(rematlab::default_study_spec()));
  ASSERT_EQ(from_form.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(rematlab::describe_run(from_form[i].config),
              rematlab::describe_run(expected[i].config));
    EXPECT_EQ(from_form[i].config.preset, "small");
    EXPECT_EQ(from_form[i].config.steps, expected[i].config.steps);
    EXPECT_EQ(from_form[i].config.budget_bytes, expected[i].config.budget_bytes);
    EXPECT_TRUE(from_form[i].request.max_batch.has_value());
  }
}

TEST(MainWindow, TwoRunSweepDrawsACurvePerRunAndLandsInTheDatabase) {
  Bench bench;
  bench.panel->policies_field()->setText("none; every:1");
  ASSERT_EQ(bench.run_sweep(), "ok");
  const LiveCharts* charts = bench.window.charts();
  ASSERT_EQ(charts->run_count(), 2);
  for (int run = 0; run < 2; ++run) {
    for (auto chart : {LiveCharts::kLoss, LiveCharts::kMemory, LiveCharts::kThroughput}) {
      EXPECT_EQ(charts->points(chart, run), 6) << "chart " << chart << ", run " << run;
    }
  }
  // Per run: raw + smoothed loss, peak + live memory, throughput (and one budget-free chart).
  // Per run on the loss chart: raw, smoothed and the (empty) markers of non-finite losses.
  EXPECT_EQ(charts->plot(LiveCharts::kLoss)->graphCount(), 6);
  // Per run on the throughput chart: raw (faint) and smoothed.
  EXPECT_EQ(charts->plot(LiveCharts::kThroughput)->graphCount(), 4);
  EXPECT_GE(charts->plot(LiveCharts::kTimeline)->graphCount(), 3);  // forward, backward, …
  QTest::qWait(100);                                                // let the throttled replot fire
  EXPECT_GE(charts->replots(), 1);
  EXPECT_TRUE(bench.panel->run_button()->isEnabled());
  EXPECT_EQ(bench.window.progress_bar()->value(), bench.window.progress_bar()->maximum());

  RunStore store = bench.reader();
  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& run : runs) {
    EXPECT_EQ(run.status, RunStatus::kOk);
    EXPECT_EQ(run.steps_recorded, 6);
    EXPECT_FALSE(store.timeline(run.id).empty());
  }
  EXPECT_EQ(bench.window.runs_view()->row_count(), 2);

  bench.window.compare({runs[0].id, runs[1].id});
  QTableWidget* table = bench.window.compare_view()->table();
  ASSERT_EQ(table->rowCount(), 2);
  auto column = [&](const QString& name) {
    for (int c = 0; c < table->columnCount(); ++c) {
      if (table->horizontalHeaderItem(c)->text() == name) return c;
    }
    return -1;
  };
  // The figures the database holds, divided here: not the view's own arithmetic checked by itself.
  const double base_rate = runs[0].result.tokens_per_s;
  const double rate = runs[1].result.tokens_per_s;
  const double base_peak = static_cast<double>(runs[0].result.peak_bytes);
  const double peak = static_cast<double>(runs[1].result.peak_bytes);
  EXPECT_EQ(table->item(1, column("tok/s ×base"))->text(),
            QString("×%1").arg(rate / base_rate, 0, 'f', 3));
  EXPECT_EQ(table->item(1, column("peak ×base"))->text(),
            QString("×%1").arg(peak / base_peak, 0, 'f', 3));
  EXPECT_EQ(table->item(0, column("tok/s ×base"))->text(), "×1.000");
  // Checkpointing every block lowers the peak, so it is on the front whatever its speed.
  const auto& front = bench.window.compare_view()->comparison().pareto_front;
  EXPECT_NE(std::find(front.begin(), front.end(), 1u), front.end());
  bench.window.compare_view()->set_baseline(1);  // the other run as the reference
  EXPECT_EQ(table->item(0, column("tok/s ×base"))->text(),
            QString("×%1").arg(base_rate / rate, 0, 'f', 3));

  // Exact recomputation: every:1 trains exactly as none, so its curve hides the other's. Both
  // views say so rather than look as if a run were missing.
  const auto first = store.steps(runs[0].id), second = store.steps(runs[1].id);
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) ASSERT_EQ(first[i].loss, second[i].loss) << i;
  EXPECT_TRUE(bench.window.compare_view()->coincide_text().contains(
      QString("#%1 has exactly the loss of #%2").arg(runs[1].id).arg(runs[0].id)))
      << bench.window.compare_view()->coincide_text().toStdString();
  EXPECT_TRUE(bench.window.compare_view()->loss_chart()->graph(1)->name().contains(
      QString("coincides with #%1").arg(runs[0].id)));
  EXPECT_TRUE(charts->legend_name(LiveCharts::kLoss, 1).contains("coincides with"))
      << charts->legend_name(LiveCharts::kLoss, 1).toStdString();
  EXPECT_FALSE(charts->legend_name(LiveCharts::kLoss, 0).contains("coincides"));
}

TEST(MainWindow, StopMarksTheRunCancelledAndTheWindowKeepsWorking) {
  Bench bench;
  bench.panel->steps_field()->setValue(100000);
  QSignalSpy ended(&bench.window, &MainWindow::sweepEnded);
  bench.panel->run_button()->click();
  QElapsedTimer waited;
  waited.start();
  while (bench.window.charts()->points(LiveCharts::kLoss, 0) < 2 && waited.elapsed() < kTimeoutMs) {
    QTest::qWait(20);
  }
  bench.panel->stop_button()->click();
  ASSERT_TRUE(ended.wait(60000));
  EXPECT_EQ(ended.takeFirst().at(0).toString(), "cancelled");
  EXPECT_FALSE(bench.window.is_running());
  RunStore store = bench.reader();
  ASSERT_EQ(store.runs().size(), 1u);
  EXPECT_EQ(store.runs()[0].status, RunStatus::kCancelled);
  EXPECT_GE(store.runs()[0].steps_recorded, 2);
  // Said as a stop, where it happened, not as a finished sweep; the bar is not filled.
  const QString status = bench.window.status_text();
  EXPECT_TRUE(status.startsWith("Stopped in run 1 of 1")) << status.toStdString();
  EXPECT_TRUE(
      status.contains(QString("after step %1 of 100000").arg(store.runs()[0].steps_recorded)))
      << status.toStdString();
  EXPECT_FALSE(status.contains("done"));
  EXPECT_LT(bench.window.progress_bar()->value(), bench.window.progress_bar()->maximum());
  bench.panel->steps_field()->setValue(3);
  EXPECT_EQ(bench.run_sweep(), "ok");  // and it runs again
}

// The processes whose parent is this one (the ranks a data-parallel run started).
std::vector<pid_t> children_of_this_process() {
  std::vector<pid_t> children;
  for (const QString& name : QDir("/proc").entryList(QDir::Dirs)) {
    bool number = false;
    const pid_t pid = name.toInt(&number);
    if (!number) continue;
    std::ifstream stat(("/proc/" + name + "/stat").toStdString());
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 2));
    std::string state;
    pid_t parent = 0;
    fields >> state >> parent;
    if (parent == ::getpid()) children.push_back(pid);
  }
  return children;
}

// Two ranks of the tiny model (set by Bench), whose steps take milliseconds.
void two_tiny_ranks(ExperimentPanel* panel, const char* shard) {
  panel->batch_field()->setText("2");
  panel->ranks_field()->setValue(2);
  panel->shard_field()->setCurrentText(shard);
}

TEST(ExperimentPanel, RanksAndShardAreValidatedAtTheirFields) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->ranks_field()->setValue(2);
  panel->shard_field()->setCurrentText("optimizer");
  ASSERT_TRUE(panel->run_button()->isEnabled()) << panel->problem().toStdString();
  EXPECT_TRUE(panel->summary().startsWith("1 run on 2 ranks, optimizer sharded"))
      << panel->summary().toStdString();
  // Several runs: ranks train one.
  panel->policies_field()->setText("none; every:1");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().startsWith("Ranks: ranks train one run together"))
      << panel->problem().toStdString();
  EXPECT_TRUE(panel->ranks_field()->property("invalid").toBool());
  EXPECT_FALSE(panel->policies_field()->property("invalid").toBool());
  panel->ranks_field()->setValue(1);
  panel->shard_field()->setCurrentText("none");
  EXPECT_TRUE(panel->run_button()->isEnabled()) << "one process sweeps as before";
  // More ranks than this host allows.
  panel->policies_field()->setText("every:1");
  panel->ranks_field()->setValue(4096);
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("more than the limit")) << panel->problem().toStdString();
  EXPECT_TRUE(panel->ranks_field()->property("invalid").toBool());
  panel->ranks_field()->setValue(2);
  EXPECT_TRUE(panel->run_button()->isEnabled()) << panel->problem().toStdString();
  EXPECT_FALSE(panel->ranks_field()->property("invalid").toBool());
}

TEST(Window, RanksAndShardAreAsTheUserLeftThemAfterARestart) {
  QTemporaryDir dir;
  {
    MainWindow first(dir.filePath("runs.sqlite"));
    first.experiment_panel()->ranks_field()->setValue(3);
    first.experiment_panel()->shard_field()->setCurrentText("gradients");
    first.remember_form();
  }
  MainWindow second(dir.filePath("runs.sqlite"));
  EXPECT_EQ(second.experiment_panel()->ranks_field()->value(), 3);
  EXPECT_EQ(second.experiment_panel()->shard_field()->currentText(), "gradients");
  // A sweep spec (the default study) trains each point in one process.
  second.experiment_panel()->load_spec(rematlab::default_study_spec());
  EXPECT_EQ(second.experiment_panel()->ranks_field()->value(), 1);
  EXPECT_EQ(second.experiment_panel()->shard_field()->currentText(), "none");
}

TEST(MainWindow, ATwoRankRunDrawsAMemoryCurvePerRankAndIsRecordedWithBoth) {
  Bench bench;
  two_tiny_ranks(bench.panel, "optimizer");
  bench.panel->steps_field()->setValue(4);
  ASSERT_EQ(bench.run_sweep(), "ok") << bench.window.status_text().toStdString();
  const LiveCharts* charts = bench.window.charts();
  ASSERT_EQ(charts->run_count(), 2);
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(charts->points(LiveCharts::kMemory, rank), 4) << "rank " << rank;
    EXPECT_TRUE(
        charts->legend_name(LiveCharts::kMemory, rank).contains(QString("rank %1").arg(rank)))
        << charts->legend_name(LiveCharts::kMemory, rank).toStdString();
  }
  EXPECT_TRUE(children_of_this_process().empty()) << "a rank outlived the run";
  RunStore store = bench.reader();
  ASSERT_EQ(store.runs().size(), 1u);
  const rematlab::RunRecord run = store.runs()[0];
  EXPECT_EQ(run.status, RunStatus::kOk) << run.message;
  EXPECT_EQ(run.config.world_size, 2);
  EXPECT_EQ(run.config.shard, "optimizer");
  ASSERT_EQ(run.result.ranks.size(), 2u);
  for (const rematlab::RankResult& rank : run.result.ranks) {
    EXPECT_EQ(rank.step_peak_bytes.size(), 4u) << "rank " << rank.rank;
    EXPECT_GT(rank.optimizer_bytes, 0) << "rank " << rank.rank;
  }
  EXPECT_EQ(store.steps(run.id).size(), 4u);
  EXPECT_TRUE(bench.window.status_text().contains("1 run on 2 ranks recorded"))
      << bench.window.status_text().toStdString();
}

TEST(MainWindow, StopEndsEveryRankOfARunAndRecordsItCancelled) {
  Bench bench;
  two_tiny_ranks(bench.panel, "none");
  bench.panel->steps_field()->setValue(100000);
  QSignalSpy ended(&bench.window, &MainWindow::sweepEnded);
  bench.panel->run_button()->click();
  QElapsedTimer waited;
  waited.start();
  const LiveCharts* charts = bench.window.charts();
  while ((charts->run_count() < 2 || charts->points(LiveCharts::kMemory, 1) < 2) &&
         waited.elapsed() < kTimeoutMs && ended.isEmpty()) {
    QTest::qWait(20);
  }
  ASSERT_TRUE(ended.isEmpty()) << bench.window.status_text().toStdString();
  const std::vector<pid_t> ranks = children_of_this_process();
  ASSERT_EQ(ranks.size(), 2u);
  bench.panel->stop_button()->click();
  ASSERT_TRUE(ended.wait(30000));
  EXPECT_EQ(ended.takeFirst().at(0).toString(), "cancelled");
  for (const pid_t rank : ranks) EXPECT_NE(::kill(rank, 0), 0) << "rank pid " << rank << " lives";
  EXPECT_TRUE(children_of_this_process().empty());
  RunStore store = bench.reader();
  ASSERT_EQ(store.runs().size(), 1u);
  EXPECT_EQ(store.runs()[0].status, RunStatus::kCancelled) << store.runs()[0].message;
  const QString status = bench.window.status_text();
  EXPECT_TRUE(status.startsWith("Stopped the run on 2 ranks")) << status.toStdString();
}

TEST(MainWindow, EngineErrorSurfacesAsADialogAndTheWindowStaysUsable) {
  Bench bench;
  // Valid as a form (the file exists and can be read), fails in the engine: it is shorter than
  // one sequence.
  const QString text = bench.dir.filePath("short.txt");
  std::ofstream(text.toStdString()) << "too short";
  bench.panel->data_field()->setCurrentIndex(bench.panel->data_field()->findData("text"));
  bench.panel->data_file_field()->setText(text);
  QSignalSpy errors(&bench.window, &MainWindow::errorShown);
  ASSERT_EQ(bench.run_sweep(), "failed");
  ASSERT_GE(errors.count(), 1);
  EXPECT_TRUE(errors.takeFirst().at(0).toString().contains("fewer than seq_len"));
  bool dialog = false;
  for (auto* box : bench.window.findChildren<QMessageBox*>()) dialog = dialog || box->isVisible();
  EXPECT_TRUE(dialog);
  EXPECT_TRUE(bench.panel->run_button()->isEnabled());
  bench.panel->data_field()->setCurrentIndex(0);
  EXPECT_EQ(bench.run_sweep(), "ok");
  RunStore store = bench.reader();
  ASSERT_EQ(store.runs().size(), 2u);
  EXPECT_EQ(store.runs()[0].status, RunStatus::kFailed);
}

TEST(MainWindow, GradientCheckButtonGivesTheVerdict) {
  Bench bench;
  // none first: the check compares the first checkpointing policy, not none against none.
  bench.panel->policies_field()->setText("none; sublayer:1,2");
  QSignalSpy ended(&bench.window, &MainWindow::checkEnded);
  bench.panel->check_button()->click();
  EXPECT_FALSE(bench.panel->check_button()->isEnabled());
  ASSERT_TRUE(ended.wait(kTimeoutMs));
  const QList<QVariant> result = ended.takeFirst();
  EXPECT_TRUE(result.at(0).toBool());
  EXPECT_TRUE(result.at(1).toString().startsWith("identical: sublayer:1,2 against none"))
      << result.at(1).toString().toStdString();
  EXPECT_TRUE(bench.panel->check_button()->isEnabled());
}

TEST(MainWindow, ClosingDuringARunCancelsAndJoinsTheWorker) {
  QTemporaryDir dir;
  auto window = std::make_unique<MainWindow>(dir.filePath("runs.sqlite"));
  window->experiment_panel()->preset_field()->setCurrentText("tiny");
  window->experiment_panel()->steps_field()->setValue(100000);
  window->experiment_panel()->findChild<QSpinBox*>("threads")->setValue(1);
  window->experiment_panel()->run_button()->click();
  QTest::qWait(300);
  ASSERT_TRUE(window->is_running());
  QElapsedTimer timer;
  timer.start();
  window.reset();  // must cancel and join the worker, not crash or hang
  EXPECT_LT(timer.elapsed(), 10000);
  RunStore store(dir.filePath("runs.sqlite").toStdString(), StoreAccess::kReadOnly, false);
  ASSERT_EQ(store.runs().size(), 1u);
  EXPECT_EQ(store.runs()[0].status, RunStatus::kCancelled);
}

TEST(MainWindow, AFileThatIsNotADatabaseIsRefusedAndLeftAlone) {
  Bench bench;
  const QString notes = bench.dir.filePath("notes.txt");
  std::ofstream(notes.toStdString()) << "not a database\n";
  QSignalSpy errors(&bench.window, &MainWindow::errorShown);
  EXPECT_FALSE(bench.window.open_database(notes));
  ASSERT_EQ(errors.count(), 1);
  const QString refusal = errors.takeFirst().at(0).toString();
  EXPECT_TRUE(refusal.contains("not a RematLab database")) << refusal.toStdString();
  // The window's words: no command-line flag, no SQL.
  for (const char* word : {"--db", "PRAGMA", "SQLite", "application_id"}) {
    EXPECT_FALSE(refusal.contains(word)) << refusal.toStdString();
  }
  EXPECT_EQ(bench.window.database_path(), bench.db);
  std::ifstream in(notes.toStdString());
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "not a database");
}

TEST(MainWindow, DeleteExportAndPicturesWorkOnRealRuns) {
  Bench bench;
  bench.panel->policies_field()->setText("none; every:1");
  ASSERT_EQ(bench.run_sweep(), "ok");
  auto* runs = bench.window.runs_view();
  ASSERT_EQ(runs->row_count(), 2);
  const std::vector<int64_t> ids = runs->shown_ids();

  const QString csv = bench.dir.filePath("runs.csv");
  EXPECT_EQ(runs->export_runs_csv(csv, {}), 2);
  const QString steps = bench.dir.filePath("steps.csv");
  runs->export_steps_csv(steps, {ids[1]});
  std::ifstream steps_in(steps.toStdString());
  int lines = 0;
  for (std::string line; std::getline(steps_in, line);) ++lines;
  EXPECT_EQ(lines, 1 + 6);
  EXPECT_TRUE(QFile::exists(csv));

  bench.window.compare({ids[0], ids[1]});
  const QStringList images =
      bench.window.charts()->export_images(bench.dir.path(), "live") +
      bench.window.compare_view()->export_images(bench.dir.path(), "compare");
  EXPECT_EQ(images.size(), 18);  // 9 charts, PNG and PDF each
  for (const QString& image : images) EXPECT_GT(QFileInfo(image).size(), 0) << image.toStdString();

  EXPECT_TRUE(runs->delete_runs({ids[0]}, /*confirmed=*/true));
  EXPECT_EQ(runs->row_count(), 1);
  RunStore store = bench.reader();
  EXPECT_TRUE(store.steps(ids[0]).empty());
  EXPECT_EQ(store.steps(ids[1]).size(), 6u);
}

TEST(MainWindow, RestoresTheLastDatabase) {
  QTemporaryDir dir;
  const QString db = dir.filePath("remembered.sqlite");
  { MainWindow first(db); }
  MainWindow second;
  EXPECT_EQ(second.database_path(), db);
}

// Root may write any file; the write-protection tests need the permission bits to count, so the
// process gives up that privilege (one test per process under ctest, so nothing else is affected).
void respect_file_permissions() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  ASSERT_EQ(syscall(SYS_capget, &header, data), 0);
  for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH}) {
    data[cap / 32].effective &= ~(1u << (cap % 32));
  }
  ASSERT_EQ(syscall(SYS_capset, &header, data), 0);
}

TEST(MainWindow, AWriteProtectedDatabaseOpensReadOnlyWithWritingDisabled) {
  QTemporaryDir dir;
  const QString db = dir.filePath("protected.sqlite");
  {
    MainWindow window(db);
    window.experiment_panel()->preset_field()->setCurrentText("tiny");
    window.experiment_panel()->steps_field()->setValue(2);
    QSignalSpy ended(&window, &MainWindow::sweepEnded);
    window.experiment_panel()->run_button()->click();
    ASSERT_TRUE(ended.wait(kTimeoutMs));
  }  // every connection closed: the database is whole in its file
  respect_file_permissions();
  ASSERT_EQ(::chmod(db.toStdString().c_str(), 0444), 0);
  ASSERT_EQ(::chmod(dir.path().toStdString().c_str(), 0555), 0);
  std::ifstream before_stream(db.toStdString(), std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(before_stream)), {});
  {
    MainWindow window(db);
    EXPECT_EQ(window.database_path(), db);
    EXPECT_TRUE(window.database_read_only());
    EXPECT_EQ(window.runs_view()->row_count(), 1);  // browsable
    window.experiment_panel()->preset_field()->setCurrentText("tiny");
    EXPECT_FALSE(window.experiment_panel()->run_button()->isEnabled());
    EXPECT_TRUE(window.experiment_panel()->run_button()->toolTip().contains("write-protected"));
    QSignalSpy errors(&window, &MainWindow::errorShown);
    EXPECT_FALSE(window.runs_view()->delete_runs(window.runs_view()->shown_ids(), true));
    EXPECT_EQ(window.runs_view()->row_count(), 1);
  }
  ::chmod(dir.path().toStdString().c_str(), 0755);
  std::ifstream after_stream(db.toStdString(), std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(after_stream)), {}), before);
}

TEST(MainWindow, DeletingTheRunBeingTrainedIsRefusedWithTheReason) {
  Bench bench;
  bench.panel->steps_field()->setValue(100000);
  QSignalSpy ended(&bench.window, &MainWindow::sweepEnded);
  bench.panel->run_button()->click();
  QElapsedTimer waited;
  waited.start();
  while (bench.window.runs_view()->row_count() < 1 && waited.elapsed() < kTimeoutMs)
    QTest::qWait(20);
  QSignalSpy errors(&bench.window, &MainWindow::errorShown);
  EXPECT_FALSE(bench.window.runs_view()->delete_runs(bench.window.runs_view()->shown_ids(), true));
  ASSERT_EQ(errors.count(), 1);
  EXPECT_TRUE(errors.takeFirst().at(0).toString().contains("being trained"));
  EXPECT_EQ(bench.window.runs_view()->row_count(), 1);
  bench.panel->stop_button()->click();
  ASSERT_TRUE(ended.wait(60000));
}

// A Stop that arrives while the sweep is still queued behind other work must not be lost.
TEST(MainWindow, AStopBeforeTheQueuedSweepStartsStopsIt) {
  Bench bench;
  bench.panel->steps_field()->setValue(100000);
  rematlab::RunConfig slow = *bench.panel->first_config();
  slow.checkpoint = "every:1";
  slow.accum = 1000000;  // keeps the worker busy until it is stopped
  emit bench.window.startCheck(slow);
  QSignalSpy ended(&bench.window, &MainWindow::sweepEnded);
  bench.panel->run_button()->click();  // queued behind the check
  bench.panel->stop_button()->click();
  ASSERT_TRUE(ended.wait(30000)) << "the Stop was lost";
  EXPECT_TRUE(bench.window.status_text().contains("Stopped"))
      << bench.window.status_text().toStdString();
  EXPECT_TRUE(bench.reader().runs().empty());  // nothing ran
}

TEST(MainWindow, TheGradientCheckStopsOnStopAndOnClose) {
  Bench bench;
  bench.panel->policies_field()->setText("every:1");
  bench.panel->preset_field()->setCurrentText("small");
  QSignalSpy ended(&bench.window, &MainWindow::checkEnded);
  bench.panel->check_button()->click();
  QTest::qWait(300);
  QElapsedTimer timer;
  timer.start();
  bench.panel->stop_button()->click();
  ASSERT_TRUE(ended.wait(20000));
  EXPECT_LT(timer.elapsed(), 20000);
  EXPECT_FALSE(ended.takeFirst().at(0).toBool());
  EXPECT_TRUE(bench.window.status_text().contains("stopped"))
      << bench.window.status_text().toStdString();

  QTemporaryDir dir;
  auto window = std::make_unique<MainWindow>(dir.filePath("runs.sqlite"));
  window->experiment_panel()->preset_field()->setCurrentText("small");
  window->experiment_panel()->policies_field()->setText("every:1");
  // A thousand micro-batches: minutes, unless closing really stops it.
  window->experiment_panel()->findChild<QSpinBox*>("accum")->setValue(1000);
  window->experiment_panel()->check_button()->click();
  QTest::qWait(300);
  ASSERT_TRUE(window->is_running());
  timer.restart();
  window.reset();
  EXPECT_LT(timer.elapsed(), 20000);
}

TEST(MainWindow, ADatabaseErrorInASlotIsShownNotFatal) {
  Bench bench;
  {
    rematlab::Database other(bench.db.toStdString(), rematlab::Database::Mode::kReadWrite);
    other.exec("DROP TABLE probes; DROP TABLE timelines; DROP TABLE steps; DROP TABLE runs;");
  }
  QSignalSpy errors(&bench.window, &MainWindow::errorShown);
  for (auto* button : bench.window.runs_view()->findChildren<QPushButton*>()) {
    if (button->text() == "Refresh") button->click();
  }
  EXPECT_GE(errors.count(), 1);
  EXPECT_TRUE(bench.panel->isEnabled());
}

// ---- The hands-on test's findings (issue 18): each checked as a user would meet it. ----

// The window shown at a laptop's 1280×720, laid out as a user sees it.
void show_at(MainWindow& window, int width, int height) {
  window.resize(width, height);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  QApplication::processEvents();
}

// Where `widget` lies in `window`'s coordinates.
QRect rect_in(const QWidget* widget, const QWidget* window) {
  return QRect(widget->mapTo(window, QPoint(0, 0)), widget->size());
}

TEST(Window, RunStopAndTheStatusBarAreInViewAt1280x720) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  EXPECT_LE(bench.window.width(), 1280);  // no minimum size pushes it past the screen
  EXPECT_LE(bench.window.height(), 720);
  const QRect window = bench.window.rect();
  for (QWidget* widget : std::initializer_list<QWidget*>{
           bench.panel->run_button(), bench.panel->stop_button(), bench.panel->check_button(),
           bench.window.progress_bar(), bench.panel->problem_label()}) {
    EXPECT_TRUE(widget->isVisible());
    EXPECT_TRUE(window.contains(rect_in(widget, &bench.window)))
        << widget->metaObject()->className() << " lies outside the window";
  }
  // The fields scroll; the buttons do not.
  QScrollBar* scroll = bench.panel->scroll_area()->verticalScrollBar();
  ASSERT_GT(scroll->maximum(), 0) << "the form fits at 720 px: this test checks nothing";
  const QRect run_before = rect_in(bench.panel->run_button(), &bench.window);
  scroll->setValue(scroll->maximum());
  QApplication::processEvents();
  EXPECT_EQ(rect_in(bench.panel->run_button(), &bench.window), run_before);
}

TEST(Window, WithoutASavedSizeItFitsTheScreen) {
  rematlab::ui::WorkbenchSettings().set_geometry({});
  QTemporaryDir dir;
  MainWindow window(dir.filePath("runs.sqlite"));
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  const QRect screen = window.screen()->availableGeometry();
  EXPECT_TRUE(screen.contains(window.frameGeometry()))
      << "window " << window.width() << "×" << window.height() << " on a screen of "
      << screen.width() << "×" << screen.height();
  EXPECT_GE(window.width(), screen.width() / 2);  // and uses it
}

// A QWheelEvent as the pointer would send it over `widget`.
void turn_wheel(QWidget* widget, int notches) {
  const QPointF at(widget->width() / 2.0, widget->height() / 2.0);
  QWheelEvent wheel(at, widget->mapToGlobal(at), QPoint(), QPoint(0, -120 * notches), Qt::NoButton,
                    Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(widget, &wheel);
}

TEST(Window, TheWheelOverAnUnfocusedFieldScrollsThePanel) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  QScrollBar* scroll = bench.panel->scroll_area()->verticalScrollBar();
  ASSERT_GT(scroll->maximum(), 0);
  scroll->setValue(0);
  QSpinBox* steps = bench.panel->steps_field();
  ASSERT_FALSE(steps->hasFocus());
  const int value = steps->value();
  turn_wheel(steps, 2);
  EXPECT_EQ(steps->value(), value) << "the wheel changed a field the user only scrolled over";
  EXPECT_GT(scroll->value(), 0) << "the panel did not scroll";
  QComboBox* preset = bench.panel->preset_field();
  const int preset_index = preset->currentIndex();
  turn_wheel(preset, -1);
  EXPECT_EQ(preset->currentIndex(), preset_index);

  // A field the user clicked into takes the wheel.
  bench.window.activateWindow();
  ASSERT_TRUE(QTest::qWaitForWindowActive(&bench.window));
  steps->setFocus(Qt::MouseFocusReason);
  ASSERT_TRUE(steps->hasFocus());
  turn_wheel(steps, -1);  // up: one step more
  EXPECT_EQ(steps->value(), value + 1);
}

TEST(Window, AFieldErrorIsShownAtTheFieldInTheFormsWordsAndNothingMoves) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  ExperimentPanel* panel = bench.panel;
  QSpinBox* heads = panel->findChild<QSpinBox*>("heads");
  ASSERT_NE(heads, nullptr);
  const auto layout_now = [&] {
    std::vector<QRect> rects;
    for (QWidget* widget : std::initializer_list<QWidget*>{
             heads, panel->policies_field(), panel->steps_field(), panel->run_button(),
             panel->problem_label(), panel->scroll_area()}) {
      rects.push_back(rect_in(widget, &bench.window));
    }
    return rects;
  };
  const auto before = layout_now();
  ASSERT_TRUE(bench.window.start_action()->isEnabled());
  ASSERT_NE(panel->findChild<QSpinBox*>("d_model")->value() % 7, 0);
  heads->setValue(7);  // does not divide d_model
  QApplication::processEvents();
  const QString problem = panel->problem();
  EXPECT_TRUE(problem.startsWith("Heads: 7 heads do not divide d_model")) << problem.toStdString();
  for (const char* word : {"spec", "--", "base."}) {
    EXPECT_FALSE(problem.contains(word)) << problem.toStdString();
  }
  EXPECT_TRUE(heads->property("invalid").toBool());
  EXPECT_TRUE(heads->toolTip().startsWith(problem));
  EXPECT_EQ(panel->problem_label()->text(), problem);
  EXPECT_TRUE(layout_now() == before) << "the layout moved when the error appeared";
  // Every way to start is off, and none of them starts anything.
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_FALSE(panel->check_button()->isEnabled());
  EXPECT_FALSE(bench.window.start_action()->isEnabled());
  EXPECT_FALSE(bench.window.check_action()->isEnabled());
  QSignalSpy requested(panel, &ExperimentPanel::sweepRequested);
  bench.window.start_action()->trigger();
  panel->request_run();
  EXPECT_EQ(requested.count(), 0);
  EXPECT_FALSE(bench.window.is_running());

  heads->setValue(4);
  QApplication::processEvents();
  EXPECT_TRUE(panel->problem().isEmpty());
  EXPECT_FALSE(heads->property("invalid").toBool());
  EXPECT_TRUE(bench.window.start_action()->isEnabled());
  EXPECT_TRUE(layout_now() == before);
}

TEST(Window, TheSegmentsPreviewShowsEveryPolicyInFull) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  bench.panel->load_spec(rematlab::default_study_spec());  // four policies of a 12-block model
  QTest::qWait(50);                                        // the relayout is a posted event
  QLabel* preview = bench.panel->segments_label();
  for (const QString& policy : bench.panel->policies_field()->text().split(';')) {
    EXPECT_TRUE(preview->text().contains(policy.trimmed() + ": ")) << policy.toStdString();
  }
  // Laid out as tall as its wrapped text needs: no policy cut off at the bottom.
  EXPECT_GE(preview->height(), preview->heightForWidth(preview->width()));
}

TEST(FieldErrors, CoreErrorsAreSaidInTheFormsWords) {
  using rematlab::InvalidInput;
  using rematlab::ui::explain;
  const auto batch = explain(InvalidInput("spec: axes.batch[1]", "must be positive, got 0"));
  EXPECT_EQ(batch.key, "batch");
  EXPECT_EQ(batch.message(), "Micro-batch: must be positive, got 0");
  const auto budget = explain(InvalidInput("spec: max_batch.budget", "needs a budget"));
  EXPECT_EQ(budget.key, "budget");
  const auto kv = explain(
      InvalidInput("spec: axes (every:1 b8)", "--kv-heads 3 key/value heads do not divide 4"));
  EXPECT_EQ(kv.key, "kv_heads");
  EXPECT_EQ(kv.message(), "KV heads: 3 key/value heads do not divide 4");
}

TEST(Window, TheReasonOfAnOomRunIsShownAndWhatWasNotMeasuredIsBlank) {
  Bench bench;
  // A budget left in the field without the search still applies: the form says so.
  bench.panel->max_batch_box()->setChecked(true);
  bench.panel->budget_field()->setText("1KiB");
  EXPECT_FALSE(bench.panel->summary().contains("oom"));
  bench.panel->max_batch_box()->setChecked(false);
  EXPECT_TRUE(bench.panel->summary().contains("1KiB budget ends its run as oom"))
      << bench.panel->summary().toStdString();
  ASSERT_EQ(bench.run_sweep(), "oom");
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_FALSE(runs[0].message.empty());
  QAbstractItemModel* model = bench.window.runs_view()->table()->model();
  auto column = [&](const QString& name) {
    for (int c = 0; c < model->columnCount(); ++c) {
      if (model->headerData(c, Qt::Horizontal).toString() == name) return c;
    }
    return -1;
  };
  ASSERT_EQ(model->rowCount(), 1);
  ASSERT_GE(column("reason"), 0);
  const QString reason = QString::fromStdString(runs[0].message);
  EXPECT_EQ(model->index(0, column("reason")).data().toString(), reason);
  EXPECT_EQ(model->index(0, column("status")).data(Qt::ToolTipRole).toString(), reason);
  // The step above the budget was not completed: nothing it measured shows as a zero.
  if (runs[0].steps_recorded == 0) {
    for (const char* name : {"peak", "peak act", "tokens/s", "final loss"}) {
      EXPECT_TRUE(model->index(0, column(name)).data().toString().isEmpty()) << name;
    }
  }
}

TEST(Window, ADeletedRunLeavesCompare) {
  Bench bench;
  bench.panel->policies_field()->setText("none; every:1");
  ASSERT_EQ(bench.run_sweep(), "ok");
  const std::vector<int64_t> ids = bench.window.runs_view()->shown_ids();
  ASSERT_EQ(ids.size(), 2u);
  bench.window.compare({ids[0], ids[1]});
  ASSERT_EQ(bench.window.compare_view()->table()->rowCount(), 2);
  ASSERT_TRUE(bench.window.runs_view()->delete_runs({ids[0]}, /*confirmed=*/true));
  QTableWidget* table = bench.window.compare_view()->table();
  ASSERT_EQ(table->rowCount(), 1);
  EXPECT_TRUE(table->item(0, 0)->text().startsWith(QString("#%1 ").arg(ids[1])));
  EXPECT_EQ(bench.window.compare_view()->loss_chart()->graphCount(), 1);
  EXPECT_EQ(bench.window.compare_view()->comparison().pareto_front.size(), 1u);
}

TEST(Window, ANewRunIsShownAfterARestartWithAnOldFilter) {
  QTemporaryDir dir;
  const QString db = dir.filePath("runs.sqlite");
  qint64 old_experiment = 0;
  {
    Bench first;
    first.window.open_database(db);
    first.panel->set_experiment_name("old");
    first.panel->steps_field()->setValue(2);
    ASSERT_EQ(first.run_sweep(), "ok");
    const auto runs = RunStore(db.toStdString(), StoreAccess::kReadOnly, false).runs();
    ASSERT_EQ(runs.size(), 1u);
    ASSERT_TRUE(runs[0].experiment_id.has_value());
    old_experiment = *runs[0].experiment_id;
  }
  rematlab::ui::WorkbenchSettings().set_last_experiment(old_experiment);  // as a user left it
  MainWindow window(db);
  ASSERT_EQ(window.runs_view()->selected_experiment(), old_experiment);
  window.experiment_panel()->preset_field()->setCurrentText("tiny");
  window.experiment_panel()->set_experiment_name("new");
  window.experiment_panel()->steps_field()->setValue(2);
  window.experiment_panel()->findChild<QSpinBox*>("threads")->setValue(1);
  QSignalSpy ended(&window, &MainWindow::sweepEnded);
  window.experiment_panel()->run_button()->click();
  ASSERT_TRUE(ended.wait(kTimeoutMs));
  RunStore store(db.toStdString(), StoreAccess::kReadOnly, false);
  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 2u);
  const auto shown = window.runs_view()->shown_ids();
  EXPECT_NE(std::find(shown.begin(), shown.end(), runs[1].id), shown.end())
      << "the run just recorded is hidden by the restored filter";
}

TEST(Window, TheFormIsAsTheUserLeftItAfterARestart) {
  QTemporaryDir dir;
  {
    MainWindow first(dir.filePath("runs.sqlite"));
    ExperimentPanel* panel = first.experiment_panel();
    panel->preset_field()->setCurrentText("small");
    panel->policies_field()->setText("none; every:2");
    panel->steps_field()->setValue(37);
    panel->batch_field()->setText("2, 4");
    panel->budget_field()->setText("300MiB");
    panel->findChild<QSpinBox*>("accum")->setValue(3);
    first.remember_form();
  }
  MainWindow second(dir.filePath("runs.sqlite"));
  ExperimentPanel* panel = second.experiment_panel();
  EXPECT_EQ(panel->preset_field()->currentText(), "small");
  EXPECT_EQ(panel->policies_field()->text(), "none; every:2");
  EXPECT_EQ(panel->steps_field()->value(), 37);
  EXPECT_EQ(panel->batch_field()->text(), "2, 4");
  EXPECT_EQ(panel->budget_field()->text(), "300MiB");
  EXPECT_EQ(panel->findChild<QSpinBox*>("accum")->value(), 3);
}

TEST(Window, ANewDatabaseGetsItsExtensionAndItsPathIsShown) {
  Bench bench;
  ASSERT_TRUE(bench.window.new_database(bench.dir.filePath("mynew")));
  EXPECT_EQ(bench.window.database_path(), bench.dir.filePath("mynew.sqlite"));
  EXPECT_TRUE(QFile::exists(bench.dir.filePath("mynew.sqlite")));
  bool shown = false;
  for (auto* label : bench.window.statusBar()->findChildren<QLabel*>()) {
    shown = shown || label->text().contains(QDir::toNativeSeparators(bench.window.database_path()));
  }
  EXPECT_TRUE(shown) << "the database's path is not in the status bar";
}

TEST(Window, ExportsSayWhatWasWrittenWhereAndSkipEmptyCharts) {
  Bench bench;
  bench.panel->policies_field()->setText("none; every:1");
  ASSERT_EQ(bench.run_sweep(), "ok");
  rematlab::ui::RunsView* runs = bench.window.runs_view();
  const std::vector<int64_t> ids = runs->shown_ids();
  EXPECT_EQ(runs->export_scope(), "all 2 runs shown");
  const QString all = bench.dir.filePath("all.csv");
  ASSERT_TRUE(runs->export_to(all, /*steps=*/false));
  EXPECT_EQ(bench.window.status_text(),
            "Wrote 2 runs (all shown) to " + QDir::toNativeSeparators(all));
  runs->select_ids({ids[1]});
  EXPECT_EQ(runs->export_scope(), "the 1 selected run");
  const QString one = bench.dir.filePath("one.csv");
  ASSERT_TRUE(runs->export_to(one, /*steps=*/true));
  EXPECT_EQ(bench.window.status_text(),
            "Wrote the steps of 1 run (the selected ones) to " + QDir::toNativeSeparators(one));
  std::ifstream in(one.toStdString());
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 1 + 6);

  // Nothing compared yet: the Compare charts are empty and are not written.
  const QStringList written =
      bench.window.charts()->export_images(bench.dir.path(), "live") +
      bench.window.compare_view()->export_images(bench.dir.path(), "compare");
  EXPECT_EQ(written.size(), 8);  // the four live charts, PNG and PDF
  for (const QString& file : written) EXPECT_TRUE(file.contains("live-")) << file.toStdString();
  bench.window.charts_exported(bench.dir.path(), written);
  EXPECT_TRUE(bench.window.status_text().contains("live-loss.png"));
  EXPECT_TRUE(bench.window.status_text().contains(QDir::toNativeSeparators(bench.dir.path())));
}

TEST(Window, DeleteAsksWithNoAsTheDefault) {
  Bench bench;
  ASSERT_EQ(bench.run_sweep(), "ok");
  bool default_is_no = false;
  QTimer::singleShot(0, [&] {
    auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
    if (!box) return;
    default_is_no = box->defaultButton() == box->button(QMessageBox::No);
    box->defaultButton()->click();  // what Enter does
  });
  EXPECT_FALSE(bench.window.runs_view()->delete_runs(bench.window.runs_view()->shown_ids(), false));
  EXPECT_TRUE(default_is_no);
  EXPECT_EQ(bench.reader().runs().size(), 1u);
}

// True when `point` (pixels) is on one of `chart`'s plotted points inside the axes.
bool legend_covers_data(QCustomPlot* chart) {
  if (!chart->legend->visible()) return false;
  const QRect legend = chart->legend->outerRect();
  for (int g = 0; g < chart->graphCount(); ++g) {
    QCPGraph* graph = chart->graph(g);
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) {
      if (!std::isfinite(it->value)) continue;
      const QPointF pixel = graph->coordsToPixels(it->key, it->value);
      if (chart->axisRect()->rect().contains(pixel.toPoint()) && legend.contains(pixel.toPoint()))
        return true;
    }
  }
  return false;
}

TEST(Window, LegendsHideNoDataAndFitTheirCharts) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  bench.panel->policies_field()->setText("none; every:1; sublayer:1,2");
  bench.panel->budget_field()->setText("64MiB");  // the budget line too
  ASSERT_EQ(bench.run_sweep(), "ok");
  std::vector<int64_t> ids = bench.window.runs_view()->shown_ids();
  bench.window.compare(QList<qint64>(ids.begin(), ids.end()));
  QApplication::processEvents();
  std::vector<std::pair<const char*, QCustomPlot*>> charts = {
      {"loss", bench.window.charts()->plot(LiveCharts::kLoss)},
      {"memory", bench.window.charts()->plot(LiveCharts::kMemory)},
      {"throughput", bench.window.charts()->plot(LiveCharts::kThroughput)},
      {"timeline", bench.window.charts()->plot(LiveCharts::kTimeline)},
      {"pareto", bench.window.compare_view()->scatter_chart()},
      {"compare loss", bench.window.compare_view()->loss_chart()}};
  for (const auto& [name, chart] : charts) {
    for (QWidget* tab : {static_cast<QWidget*>(bench.window.charts()),
                         static_cast<QWidget*>(bench.window.compare_view())}) {
      if (tab->isAncestorOf(chart)) bench.window.tabs()->setCurrentWidget(tab);
    }
    QApplication::processEvents();
    chart->replot(QCustomPlot::rpImmediateRefresh);
    ASSERT_TRUE(chart->legend->visible()) << name;
    ASSERT_GT(chart->legend->itemCount(), 0) << name;
    EXPECT_FALSE(legend_covers_data(chart)) << name << ": the legend covers a plotted point";
    EXPECT_TRUE(chart->rect().contains(chart->legend->outerRect())) << name << ": legend cut";
    EXPECT_GT(chart->axisRect()->rect().height(), chart->legend->outerRect().height())
        << name << ": the legend is taller than its plot";
  }
  // Steps are whole numbers on every step axis.
  for (LiveCharts::Chart chart :
       {LiveCharts::kLoss, LiveCharts::kMemory, LiveCharts::kThroughput}) {
    for (double tick : bench.window.charts()->plot(chart)->xAxis->tickVector()) {
      EXPECT_EQ(tick, std::round(tick)) << "chart " << chart;
    }
  }
}

TEST(Window, GradientCheckWithoutACheckpointingPolicySaysSo) {
  Bench bench;
  bench.panel->policies_field()->setText("none");
  EXPECT_FALSE(bench.panel->check_button()->isEnabled());
  EXPECT_FALSE(bench.window.check_action()->isEnabled());
  EXPECT_TRUE(bench.panel->check_button()->toolTip().contains("No checkpointing policy"));
  EXPECT_FALSE(bench.panel->check_config().has_value());
  bench.panel->policies_field()->setText("none; none+disk; sublayer:1,2; every:1");
  ASSERT_TRUE(bench.panel->check_config().has_value());
  EXPECT_EQ(bench.panel->check_config()->checkpoint, "sublayer:1,2");
  EXPECT_TRUE(bench.panel->check_button()->isEnabled());
}

TEST(LiveCharts, ClearingForgetsTheLastSweepsAxesAndTitle) {
  LiveCharts charts;
  charts.begin_run(0, "run", 0.0);
  rematlab::StepMetrics step;
  step.loss = 5.0;
  step.peak_bytes = 64 << 20;
  for (; step.step < 40; ++step.step) charts.add_step(0, step);
  charts.show_timeline("#7 none b8", {{0.0, 1 << 20, rematlab::MemoryPhase::kForward}});
  QTest::qWait(100);  // the throttled replot rescales to the data
  ASSERT_GT(charts.plot(LiveCharts::kLoss)->xAxis->range().upper, 10.0);
  charts.clear();
  for (auto chart : {LiveCharts::kLoss, LiveCharts::kMemory, LiveCharts::kTimeline}) {
    EXPECT_EQ(charts.plot(chart)->xAxis->range().upper, 1.0) << chart;
    EXPECT_FALSE(charts.plot(chart)->legend->visible()) << chart;
  }
  auto* title = qobject_cast<QCPTextElement*>(
      charts.plot(LiveCharts::kTimeline)->plotLayout()->element(0, 0));
  ASSERT_NE(title, nullptr);
  EXPECT_FALSE(title->text().contains("#7"));
}

TEST(LiveCharts, ThroughputIsSmoothedWithTheRawCurveBehind) {
  LiveCharts charts;
  charts.set_smoothing(0.5);
  charts.begin_run(0, "run", 0.0);
  rematlab::StepMetrics step;
  step.loss = 1.0;
  for (double rate : {100.0, 300.0, 100.0}) {
    step.tokens_per_s = rate;
    charts.add_step(0, step);
    ++step.step;
  }
  QCustomPlot* plot = charts.plot(LiveCharts::kThroughput);
  ASSERT_EQ(plot->graphCount(), 2);
  QCPGraph* raw = plot->graph(0);
  QCPGraph* smoothed = plot->graph(1);
  EXPECT_EQ(raw->data()->at(1)->value, 300.0);
  EXPECT_EQ(smoothed->data()->at(1)->value, 0.5 * 100.0 + 0.5 * 300.0);
  EXPECT_EQ(smoothed->data()->at(2)->value, 0.5 * 200.0 + 0.5 * 100.0);
  EXPECT_NE(raw->pen().color(), smoothed->pen().color());  // the raw one is the faint one
  EXPECT_FALSE(plot->legend->hasItemWithPlottable(raw));
}

TEST(CompareView, SaysWhichLossCurvesCoincide) {
  auto record = [](int64_t id) {
    rematlab::RunRecord run;
    run.id = id;
    run.name = "run";
    run.status = RunStatus::kOk;
    return run;
  };
  auto curve = [](std::vector<double> losses) {
    std::vector<rematlab::StepMetrics> steps;
    for (std::size_t i = 0; i < losses.size(); ++i) {
      steps.emplace_back();
      steps.back().step = static_cast<int64_t>(i);
      steps.back().loss = losses[i];
    }
    return steps;
  };
  rematlab::ui::CompareView view;
  view.set_runs({record(1), record(2), record(3)},
                {{1, curve({3.0, 2.0})}, {2, curve({3.0, 2.5})}, {3, curve({3.0, 2.0})}});
  EXPECT_EQ(view.coincide_text(),
            "#3 has exactly the loss of #1: its curve (dashed) lies on top of it.");
  EXPECT_FALSE(view.loss_chart()->graph(1)->name().contains("coincides"));
  EXPECT_TRUE(view.loss_chart()->graph(2)->name().contains("coincides with #1"));
  view.set_runs({record(1), record(2)}, {{1, curve({3.0, 2.0})}, {2, curve({3.0, 2.5})}});
  EXPECT_TRUE(view.coincide_text().isEmpty());
}

TEST(LiveCharts, ANonFiniteLossIsAGapAndAMarkerNotAFalseValue) {
  LiveCharts charts;
  charts.begin_run(0, "run", 0.0);
  rematlab::StepMetrics step;
  for (double loss : {3.0, std::nan(""), 2.0}) {
    step.loss = loss;
    charts.add_step(0, step);
    ++step.step;
  }
  QCustomPlot* plot = charts.plot(LiveCharts::kLoss);
  QCPGraph* raw = plot->graph(0);
  QCPGraph* smoothed = plot->graph(1);
  QCPGraph* marker = plot->graph(2);
  EXPECT_TRUE(std::isnan(raw->data()->at(1)->value));
  EXPECT_TRUE(std::isnan(smoothed->data()->at(1)->value));
  EXPECT_TRUE(std::isfinite(smoothed->data()->at(2)->value));  // the NaN did not poison the EMA
  EXPECT_EQ(marker->dataCount(), 1);
  EXPECT_EQ(marker->data()->at(0)->key, 2.0);
}

TEST(CompareView, ADataParallelRunHasOneMemoryCurvePerRankFromItsRecord) {
  // A recorded two-rank run (its ranks' figures as the database keeps them) beside a plain run.
  rematlab::RunRecord parallel;
  parallel.id = 7;
  parallel.status = RunStatus::kOk;
  parallel.has_result = true;
  parallel.result.steps_completed = 3;
  parallel.config.world_size = 2;
  for (int rank = 0; rank < 2; ++rank) {
    rematlab::RankResult figures;
    figures.rank = rank;
    figures.step_peak_bytes = {(10 + rank) << 20, (20 + rank) << 20, (30 + rank) << 20};
    parallel.result.ranks.push_back(figures);
  }
  rematlab::RunRecord alone;
  alone.id = 8;
  alone.status = RunStatus::kOk;
  alone.has_result = true;
  alone.result.steps_completed = 2;
  std::vector<rematlab::StepMetrics> steps(2);
  steps[0].peak_bytes = int64_t{5} << 20;
  steps[1].step = 1;
  steps[1].peak_bytes = int64_t{6} << 20;

  rematlab::ui::CompareView view;
  view.set_runs({parallel, alone}, {{8, steps}});
  QCustomPlot* chart = view.step_memory_chart();
  ASSERT_EQ(chart->graphCount(), 3);
  for (int rank = 0; rank < 2; ++rank) {
    QCPGraph* curve = chart->graph(rank);
    EXPECT_TRUE(curve->name().endsWith(QString("rank %1").arg(rank)))
        << curve->name().toStdString();
    ASSERT_EQ(curve->dataCount(), 3);
    for (int step = 0; step < 3; ++step) {
      EXPECT_EQ(curve->data()->at(step)->key, step + 1);
      EXPECT_EQ(curve->data()->at(step)->value, 10.0 * (step + 1) + rank);  // MiB
    }
  }
  // The ranks of one run share its colour; the plain run has one curve of its steps.
  EXPECT_EQ(chart->graph(0)->pen().color(), chart->graph(1)->pen().color());
  EXPECT_NE(chart->graph(0)->pen().style(), chart->graph(1)->pen().style());
  ASSERT_EQ(chart->graph(2)->dataCount(), 2);
  EXPECT_EQ(chart->graph(2)->data()->at(1)->value, 6.0);
}

TEST(RunsView, AdvisorPanelShowsTheSelectedRunsFindingsOffTheGuiThread) {
  Bench bench;
  bench.panel->policies_field()->setText("none; selective");
  ASSERT_EQ(bench.run_sweep(), "ok");
  auto* runs = bench.window.runs_view();
  auto* advice = runs->advice_panel();
  const std::vector<int64_t> ids = runs->shown_ids();
  ASSERT_EQ(ids.size(), 2u);

  // Selecting the selective run: tiny uses fused attention, so selective keeps what none keeps.
  QSignalSpy shown(advice, &rematlab::ui::AdvicePanel::diagnosisShown);
  runs->select_ids({ids[1]});
  EXPECT_EQ(advice->run_id(), ids[1]);
  ASSERT_TRUE(shown.wait(kTimeoutMs));
  EXPECT_EQ(shown.takeFirst().at(0).toLongLong(), ids[1]);
  EXPECT_FALSE(advice->busy());
  EXPECT_TRUE(advice->finding_kinds().contains("memory_not_reduced"))
      << advice->finding_kinds().join(",").toStdString();
  ASSERT_GE(advice->findings_tree()->topLevelItemCount(), 1);
  // Each finding lists its evidence and, last, its next step.
  const QTreeWidgetItem* first = advice->findings_tree()->topLevelItem(0);
  ASSERT_GE(first->childCount(), 2);
  EXPECT_EQ(first->child(first->childCount() - 1)->text(0), "next step");
  // The title spans the panel; the labels leave the values at least 40 % of it.
  EXPECT_TRUE(first->isFirstColumnSpanned());
  const QTreeWidget* tree = advice->findings_tree();
  EXPECT_LE(tree->header()->sectionSize(0), std::max(80, tree->viewport()->width() * 3 / 5));

  // The none run: nothing to report, from its records and after replaying it.
  runs->select_ids({ids[0]});
  ASSERT_TRUE(shown.wait(kTimeoutMs));
  EXPECT_TRUE(advice->finding_kinds().isEmpty());
  EXPECT_TRUE(advice->status_text().contains("no findings")) << advice->status_text().toStdString();
  auto* replay = advice->findChild<QPushButton*>();
  ASSERT_NE(replay, nullptr);
  ASSERT_TRUE(replay->isEnabled());
  replay->click();
  EXPECT_TRUE(advice->busy());
  ASSERT_TRUE(shown.wait(kTimeoutMs));
  EXPECT_FALSE(advice->busy());
  EXPECT_TRUE(advice->finding_kinds().isEmpty());

  // Two runs selected: the panel waits for one.
  runs->select_ids(ids);
  EXPECT_EQ(advice->run_id(), 0);
}

}  // namespace

int main(int argc, char** argv) {
  // Settings and the default database go to a scratch home, never the user's.
  QTemporaryDir home;
  // Real widgets, no display needed (also when ctest lists the cases at build time), on a
  // 1280×720 screen: the smallest a user is expected to have, where everything must still fit.
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) {
    const QString screen = home.filePath("screen.json");
    std::ofstream(screen.toStdString())
        << R"({"screens": [{"name": "laptop", "x": 0, "y": 0, "width": 1280, "height": 720,)"
        << R"( "logicalDpi": 96, "dpr": 1}]})";
    qputenv("QT_QPA_PLATFORM", ("offscreen:configfile=" + screen).toUtf8());
  }
  qputenv("XDG_CONFIG_HOME", home.filePath("config").toUtf8());
  qputenv("XDG_DATA_HOME", home.filePath("data").toUtf8());
  // Data-parallel runs start their ranks with the CLI, which is not beside this test binary.
  if (qEnvironmentVariableIsEmpty("REMATLAB_CLI")) qputenv("REMATLAB_CLI", REMATLAB_CLI_PATH);
  QApplication app(argc, argv);
  QApplication::setOrganizationName("RematLabTests");
  ::testing::InitGoogleTest(&argc, argv);
  // Each test starts from a window never used before: no form, filter or size left by another.
  struct ForgetSettings : ::testing::EmptyTestEventListener {
    void OnTestStart(const ::testing::TestInfo&) override { QSettings().clear(); }
  };
  ::testing::UnitTest::GetInstance()->listeners().Append(new ForgetSettings);  // gtest owns it
  return RUN_ALL_TESTS();
}
