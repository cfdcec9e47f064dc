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
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
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
#include <QTextBlock>
#include <QTextDocument>
#include <QTimer>
#include <QTreeWidget>
#include <QWheelEvent>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>

#include "advice_panel.h"
#include "chart_legend.h"
#include "chart_style.h"
#include "common/errors.h"
#include "compare_view.h"
#include "experiment_panel.h"
#include "field_errors.h"
#include "live_charts.h"
#include "main_window.h"
#include "runs_view.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "store/sqlite_db.h"
#include "sweep/default_study.h"
#include "sweep/sweep_spec.h"
#include "window_bench.h"
#include "workbench_settings.h"

namespace {

using rematlab::RunConfig;
using rematlab::RunStatus;
using rematlab::RunStore;
using rematlab::RunWriter;
using rematlab::StoreAccess;
using rematlab::ui::ExperimentPanel;
using rematlab::ui::LiveCharts;
using rematlab::ui::MainWindow;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::kTimeoutMs;
using rematlab::ui::testing::rect_in;
using rematlab::ui::testing::show_at;

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

  // A RematLab database cut short is called damaged, still in the window's words (the CLI's
  // `sqlite3 … .recover` advice is not for this reader).
  const std::string cut = bench.dir.filePath("cut.sqlite").toStdString();
  {
    RunStore store(cut);
    RunWriter writer(cut);
    for (int i = 0; i < 20; ++i) writer.begin_run(std::nullopt, "run", RunConfig{});
  }
  std::string whole;
  {
    std::ifstream file(cut, std::ios::binary);
    whole.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(whole.size(), 8192u);
  ASSERT_FALSE(QFileInfo::exists(QString::fromStdString(cut + "-wal")));
  std::ofstream(cut, std::ios::binary | std::ios::trunc) << whole.substr(0, whole.size() / 2);
  EXPECT_FALSE(bench.window.open_database(QString::fromStdString(cut)));
  ASSERT_EQ(errors.count(), 1);
  const QString damaged = errors.takeFirst().at(0).toString();
  EXPECT_TRUE(damaged.contains("This file is a damaged RematLab database."))
      << damaged.toStdString();
  for (const char* word : {"--db", "sqlite3", "SQLite says"}) {
    EXPECT_FALSE(damaged.contains(word)) << damaged.toStdString();
  }
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

// A record a newer build wrote, with a setting this one cannot read: the runs table says which,
// on every cell of its row, rather than show the default as what the run trained with.
TEST(Window, ARunsSettingThisBuildCannotReadIsNamedInItsRowsTooltip) {
  rematlab::RunRecord run;
  run.id = 7;
  run.name = "adapted";
  run.status = rematlab::RunStatus::kOk;
  run.unread_config_fields = {"finetune", "lora_rank"};
  rematlab::ui::RunsTableModel model;
  model.set_runs({run, rematlab::RunRecord{}});
  for (int column = 0; column < model.columnCount(); ++column) {
    EXPECT_TRUE(model.index(0, column)
                    .data(Qt::ToolTipRole)
                    .toString()
                    .contains("could not read finetune, lora_rank and shows the default"))
        << column;
    EXPECT_FALSE(model.index(1, column).data(Qt::ToolTipRole).toString().contains("could not"));
  }
}

// Those names come from the record, which a hand edit can fill with anything: the tooltip names
// the first 8, each cut to 64 characters, counts the rest, and shows a name that looks like HTML
// as the text it is. Qt renders a tooltip whose first line holds a tag as rich text, so such a
// tooltip is given escaped; one whose first line is plain stays plain text.
TEST(Window, UnreadSettingNamesInTheRunsTooltipAreBoundedCutAndShownAsText) {
  rematlab::RunRecord run;
  run.id = 8;
  run.status = rematlab::RunStatus::kOk;
  run.unread_config_fields = {"<b>bold</b>", std::string(300, 'x')};
  for (int i = 0; i < 20; ++i) run.unread_config_fields.push_back("field" + std::to_string(i));
  rematlab::RunRecord named = run;
  named.id = 9;
  named.name = "plain";
  rematlab::ui::RunsTableModel model;
  model.set_runs({run, named});
  int name_column = -1;
  for (int c = 0; c < model.columnCount(); ++c) {
    if (model.headerData(c, Qt::Horizontal, Qt::DisplayRole).toString() == "name") name_column = c;
  }
  ASSERT_GE(name_column, 0);
  const QString listed = "could not read <b>bold</b>, " + QString(64, 'x') +
                         QString::fromUtf8("…") + ", field0, field1";
  // The id cell's tooltip starts with the unread line, tag and all: given as escaped rich text.
  const QString rich = model.index(0, 0).data(Qt::ToolTipRole).toString();
  EXPECT_TRUE(Qt::mightBeRichText(rich)) << rich.toStdString();
  EXPECT_FALSE(rich.contains("<b>bold")) << rich.toStdString();
  QTextDocument document;
  document.setHtml(rich);
  const QString shown = document.toPlainText();
  EXPECT_TRUE(shown.contains("a newer RematLab or a hand edit")) << shown.toStdString();
  EXPECT_TRUE(shown.contains(listed)) << shown.toStdString();
  EXPECT_TRUE(shown.contains("field5 and 14 more and shows the default")) << shown.toStdString();
  EXPECT_FALSE(shown.contains("field6")) << shown.toStdString();
  EXPECT_FALSE(shown.contains(QString(65, 'x'))) << shown.toStdString();
  // The name cell's starts with the run's plain name: plain text, the names as they are.
  const QString plain = model.index(1, name_column).data(Qt::ToolTipRole).toString();
  EXPECT_FALSE(Qt::mightBeRichText(plain)) << plain.toStdString();
  EXPECT_TRUE(plain.startsWith("plain\n")) << plain.toStdString();
  EXPECT_TRUE(plain.contains(listed)) << plain.toStdString();
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
