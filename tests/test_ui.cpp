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
#include <QLineEdit>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <cmath>
#include <fstream>

#include "compare_view.h"
#include "experiment_panel.h"
#include "live_charts.h"
#include "main_window.h"
#include "runs_view.h"
#include "store/run_store.h"
#include "store/sqlite_db.h"
#include "sweep/default_study.h"
#include "sweep/sweep_spec.h"

namespace {

using rematlab::RunStatus;
using rematlab::RunStore;
using rematlab::StoreAccess;
using rematlab::ui::ExperimentPanel;
using rematlab::ui::LiveCharts;
using rematlab::ui::MainWindow;

constexpr int kTimeoutMs = 120000;

// A window on a fresh database in its own directory.
struct Bench {
  QTemporaryDir dir;
  QString db = dir.filePath("runs.sqlite");
  MainWindow window{db};
  ExperimentPanel* panel = window.experiment_panel();

  Bench() {
    panel->preset_field()->setCurrentText("tiny");
    panel->policies_field()->setText("none");
    panel->steps_field()->setValue(6);
    panel->findChild<QSpinBox*>("threads")->setValue(1);
  }
  RunStore reader() const { return RunStore(db.toStdString(), StoreAccess::kReadOnly, false); }
  // Clicks Run and waits for the sweep to end; returns the last run's status.
  QString run_sweep() {
    QSignalSpy ended(&window, &MainWindow::sweepEnded);
    panel->run_button()->click();
    EXPECT_TRUE(window.is_running());
    if (!ended.wait(kTimeoutMs)) return "timeout";
    return ended.takeFirst().at(0).toString();
  }
};

TEST(ExperimentPanel, InvalidPolicyDisablesRunWithTheReasonAtTheField) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->policies_field()->setText("none; every:0");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("every:0")) << panel->problem().toStdString();
  EXPECT_TRUE(panel->run_button()->toolTip().contains("every:0"));
  EXPECT_FALSE(panel->policies_field()->styleSheet().isEmpty());  // marked at the field
  panel->policies_field()->setText("none; sublayer:1,2");
  EXPECT_TRUE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().isEmpty());
  EXPECT_TRUE(panel->policies_field()->styleSheet().isEmpty());
}

TEST(ExperimentPanel, BadBatchListAndMissingBudgetAreNamed) {
  Bench bench;
  ExperimentPanel* panel = bench.panel;
  panel->batch_field()->setText("8, lots");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("lots"));
  EXPECT_FALSE(panel->batch_field()->styleSheet().isEmpty());
  panel->batch_field()->setText("8, 16");
  EXPECT_TRUE(panel->run_button()->isEnabled());
  panel->max_batch_box()->setChecked(true);
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("budget"));
  panel->budget_field()->setText("64MiB");
  EXPECT_TRUE(panel->run_button()->isEnabled());
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
  EXPECT_EQ(charts->plot(LiveCharts::kThroughput)->graphCount(), 2);
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
  bench.panel->steps_field()->setValue(3);
  EXPECT_EQ(bench.run_sweep(), "ok");  // and it runs again
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
  bench.panel->policies_field()->setText("sublayer:1,2");
  QSignalSpy ended(&bench.window, &MainWindow::checkEnded);
  bench.panel->check_button()->click();
  EXPECT_FALSE(bench.panel->check_button()->isEnabled());
  ASSERT_TRUE(ended.wait(kTimeoutMs));
  const QList<QVariant> result = ended.takeFirst();
  EXPECT_TRUE(result.at(0).toBool());
  EXPECT_TRUE(result.at(1).toString().startsWith("identical"))
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
  EXPECT_TRUE(errors.takeFirst().at(0).toString().contains("not a RematLab database"));
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
  runs->export_runs_csv(csv, {});
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

}  // namespace

int main(int argc, char** argv) {
  // Real widgets, no display needed (also when ctest lists the cases at build time).
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  // Settings and the default database go to a scratch home, never the user's.
  QTemporaryDir home;
  qputenv("XDG_CONFIG_HOME", home.filePath("config").toUtf8());
  qputenv("XDG_DATA_HOME", home.filePath("data").toUtf8());
  QApplication app(argc, argv);
  QApplication::setOrganizationName("RematLabTests");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
