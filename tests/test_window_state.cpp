// What the window holds and how it is reached (issue 25): opening another database leaves
// nothing of the last one on screen; chart exports name what they draw, ask before replacing
// files and say what they wrote; the tabs switch from anywhere with the usual shortcuts, a click
// on a tab keeps the focus there, and a preset that would replace edited values asks first.
#include <qcustomplot.h>

#include <QApplication>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QLineEdit>
#include <QMessageBox>
#include <QProgressBar>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabBar>
#include <QTabWidget>
#include <QTableWidget>
#include <QTest>
#include <QThread>
#include <QTimer>
#include <fstream>

#include "advice_panel.h"
#include "chart_legend.h"
#include "chart_style.h"
#include "compare_view.h"
#include "elided_label.h"
#include "live_charts.h"
#include "model/model_config.h"
#include "plan_strip.h"
#include "plan_view.h"
#include "runs_view.h"
#include "window_bench.h"

namespace {

using rematlab::ui::LiveCharts;
using rematlab::ui::MainWindow;
using rematlab::ui::PlanView;
using rematlab::ui::testing::answer_next_dialog;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::kTimeoutMs;
using rematlab::ui::testing::show_at;

QString profile_the_form(Bench& bench) {
  QSignalSpy ended(&bench.window, &MainWindow::profileEnded);
  bench.window.plan_view()->profile_button()->click();
  if (!ended.wait(kTimeoutMs)) return {};
  return ended.takeFirst().at(0).toString();
}

TEST(WindowState, OpeningAnotherDatabaseLeavesNothingOfTheLastOne) {
  Bench bench;
  bench.panel->policies_field()->setText("none; every:1");
  bench.panel->budget_field()->setText("64MiB");
  ASSERT_EQ(bench.run_sweep(), "ok");
  const std::vector<int64_t> ids = bench.window.runs_view()->shown_ids();
  bench.window.compare(QList<qint64>(ids.begin(), ids.end()));
  bench.window.runs_view()->select_ids({ids[0]});
  ASSERT_FALSE(profile_the_form(bench).isEmpty());  // tiny's plan in the Plan tab
  PlanView* plan = bench.window.plan_view();
  ASSERT_FALSE(plan->strip()->recomputed().empty());
  // The form now says small, and another database is opened.
  bench.panel->preset_field()->setCurrentText("small");
  ASSERT_TRUE(bench.window.open_database(bench.dir.filePath("other.sqlite")));

  const LiveCharts* live = bench.window.charts();
  EXPECT_EQ(live->run_count(), 0);
  for (auto chart :
       {LiveCharts::kLoss, LiveCharts::kMemory, LiveCharts::kThroughput, LiveCharts::kTimeline}) {
    EXPECT_FALSE(rematlab::ui::chart_has_data(live->plot(chart))) << chart;
  }
  EXPECT_TRUE(live->legend()->texts().isEmpty());
  EXPECT_EQ(rematlab::ui::chart_title(live->plot(LiveCharts::kTimeline)),
            "Memory in the last recorded step");
  // Compare: no rows, and no "#1" tick left on its bar charts.
  EXPECT_EQ(bench.window.compare_view()->table()->rowCount(), 0);
  QCustomPlot* bars = bench.window.compare_view()->activation_chart();
  EXPECT_EQ(bars->xAxis->ticker().dynamicCast<QCPAxisTickerText>(), nullptr);
  bars->replot(QCustomPlot::rpImmediateRefresh);
  for (const QString& label : bars->xAxis->tickVectorLabels()) {
    EXPECT_FALSE(label.startsWith("#")) << label.toStdString();
  }
  // Runs and advisor: this database's (none), no run advised.
  EXPECT_EQ(bench.window.runs_view()->row_count(), 0);
  EXPECT_EQ(bench.window.runs_view()->advice_panel()->run_id(), 0);
  // Plan: nothing of tiny's profile.
  EXPECT_FALSE(plan->configuration().has_value());
  EXPECT_TRUE(plan->strip()->recomputed().empty());
  EXPECT_FALSE(plan->current_plan().has_value());
  EXPECT_TRUE(plan->budget_field()->text().isEmpty()) << "the last profile's budget is left";
  // Status and progress: nothing of the last sweep.
  EXPECT_TRUE(bench.window.status_text().startsWith("Opened "))
      << bench.window.status_text().toStdString();
  EXPECT_EQ(bench.window.progress_bar()->value(), 0);

  // Back to the first: the Plan tab shows the profile of what the form trains where it has one.
  bench.panel->preset_field()->setCurrentText("tiny");
  ASSERT_TRUE(bench.window.open_database(bench.db));
  ASSERT_TRUE(plan->configuration().has_value());
  EXPECT_EQ(plan->configuration()->preset, "tiny");
}

QDateTime written_at(const QString& file) { return QFileInfo(file).lastModified(); }

TEST(WindowState, ChartExportsNameWhatTheyDrawAskBeforeReplacingAndSayWhatTheyWrote) {
  Bench bench;
  bench.panel->policies_field()->setText("none; every:1");
  ASSERT_EQ(bench.run_sweep(), "ok");
  const std::vector<int64_t> ids = bench.window.runs_view()->shown_ids();
  bench.window.compare(QList<qint64>(ids.begin(), ids.end()));
  const QString folder = bench.dir.filePath("charts");
  ASSERT_TRUE(QDir().mkpath(folder));
  bench.window.export_charts_to(folder);
  // Nine charts have data; the Plan tab's has none (nothing is profiled): said as left out.
  EXPECT_TRUE(bench.window.status_text().startsWith("Wrote 9 charts (PNG and PDF) to " +
                                                    QDir::toNativeSeparators(folder) +
                                                    ", 1 empty chart left out: "))
      << bench.window.status_text().toStdString();
  const QString loss = QDir(folder).filePath("live-loss.png");
  ASSERT_TRUE(QFileInfo::exists(loss));
  const QDateTime first = written_at(loss);
  QThread::msleep(1100);  // file times have a second's resolution on some file systems

  // A second export into the same folder asks; keeping the files writes nothing.
  QString asked;
  answer_next_dialog("Keep", &asked);
  bench.window.export_charts_to(folder);
  EXPECT_TRUE(asked.contains("18 of the files to write are already in")) << asked.toStdString();
  EXPECT_EQ(written_at(loss), first);
  EXPECT_TRUE(bench.window.status_text().startsWith("Nothing exported"))
      << bench.window.status_text().toStdString();
  answer_next_dialog("Replace");
  bench.window.export_charts_to(folder);
  EXPECT_GT(written_at(loss), first);
  EXPECT_TRUE(bench.window.status_text().startsWith("Wrote 9 charts"));

  // The Plan tab's own export: one chart asked, one written, nothing "left out"; its legend
  // names the budget line and the plan at the budget.
  ASSERT_FALSE(profile_the_form(bench).isEmpty());
  PlanView* plan = bench.window.plan_view();
  ASSERT_TRUE(plan->current_plan().has_value());
  const auto [budget, star] = plan->export_names();
  EXPECT_EQ(budget, "the budget, " + plan->budget_field()->text() + " (dashed line)");
  EXPECT_TRUE(star.contains(QString::fromStdString(plan->current_plan()->plan.canonical())))
      << star.toStdString();
  EXPECT_TRUE(plan->chart()->legend->hasItemWithPlottable(plan->budget_key_graph()));
  EXPECT_TRUE(plan->chart()->legend->hasItemWithPlottable(plan->chosen_graph()));
  const QString plan_folder = bench.dir.filePath("plan");
  ASSERT_TRUE(QDir().mkpath(plan_folder));
  ASSERT_TRUE(plan->export_chart_to(plan_folder));
  EXPECT_EQ(bench.window.status_text(), "Wrote 1 chart (PNG and PDF) to " +
                                            QDir::toNativeSeparators(plan_folder) +
                                            ": plan-frontier.png, plan-frontier.pdf");
  // Again into the same folder: asked, kept, and said so.
  answer_next_dialog("Keep");
  EXPECT_FALSE(plan->export_chart_to(plan_folder));
  EXPECT_EQ(bench.window.status_text(), "Nothing exported: the files already in " +
                                            QDir::toNativeSeparators(plan_folder) + " were kept");
  // The legend is the screen's again after the export.
  EXPECT_NE(plan->budget_key_graph()->name(), budget);
}

TEST(WindowState, TheTabsSwitchFromAnywhereAndAClickedTabKeepsTheFocus) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  bench.window.activateWindow();
  ASSERT_TRUE(QTest::qWaitForWindowActive(&bench.window));
  QTabWidget* tabs = bench.window.tabs();
  QLineEdit* policies = bench.panel->policies_field();
  policies->setFocus(Qt::MouseFocusReason);
  ASSERT_TRUE(policies->hasFocus());
  ASSERT_EQ(tabs->currentIndex(), 0);
  QTest::keyClick(policies, Qt::Key_Tab, Qt::ControlModifier);
  EXPECT_EQ(tabs->currentIndex(), 1);
  QTest::keyClick(policies, Qt::Key_PageDown, Qt::ControlModifier);
  EXPECT_EQ(tabs->currentIndex(), 2);
  QTest::keyClick(policies, Qt::Key_PageUp, Qt::ControlModifier);
  EXPECT_EQ(tabs->currentIndex(), 1);
  QTest::keyClick(policies, Qt::Key_Backtab, Qt::ControlModifier | Qt::ShiftModifier);
  EXPECT_EQ(tabs->currentIndex(), 0);
  QTest::keyClick(policies, Qt::Key_4, Qt::ControlModifier);
  EXPECT_EQ(tabs->currentIndex(), 3);
  EXPECT_EQ(policies->text(), "none") << "a shortcut typed into the field";

  // A click on a tab puts the focus there: the next arrow key turns the tabs, not the Preset the
  // user was in before.
  QComboBox* preset = bench.panel->preset_field();
  preset->setFocus(Qt::MouseFocusReason);
  QTabBar* bar = tabs->tabBar();
  QTest::mouseClick(bar, Qt::LeftButton, {}, bar->tabRect(1).center());
  EXPECT_EQ(tabs->currentIndex(), 1);
  EXPECT_TRUE(bar->hasFocus());
  QTest::keyClick(QApplication::focusWidget(), Qt::Key_Right);
  EXPECT_EQ(tabs->currentIndex(), 2);
  EXPECT_EQ(preset->currentText(), "tiny");
}

TEST(WindowState, APresetThatWouldReplaceEditedValuesAsksFirst) {
  Bench bench;
  show_at(bench.window, 1280, 720);
  QComboBox* preset = bench.panel->preset_field();
  QSpinBox* layers = bench.panel->findChild<QSpinBox*>("layers");
  QSpinBox* d_model = bench.panel->findChild<QSpinBox*>("d_model");
  ASSERT_EQ(preset->currentText(), "tiny");
  layers->setValue(3);
  d_model->setValue(96);
  const int small = preset->findText("small");
  ASSERT_GE(small, 0);
  // Keeping: the form is as the user left it, the preset too.
  QString asked;
  answer_next_dialog("Keep", &asked);
  preset->setCurrentIndex(small);
  EXPECT_TRUE(asked.contains("Blocks 3 → ")) << asked.toStdString();
  EXPECT_TRUE(asked.contains("d_model 96 → ")) << asked.toStdString();
  EXPECT_EQ(preset->currentText(), "tiny");
  EXPECT_EQ(layers->value(), 3);
  EXPECT_EQ(d_model->value(), 96);
  // Using it: the preset's values.
  answer_next_dialog("Use small");
  preset->setCurrentIndex(small);
  EXPECT_EQ(preset->currentText(), "small");
  const rematlab::ModelConfig expected = rematlab::model_preset("small");
  EXPECT_EQ(layers->value(), expected.layers);
  EXPECT_EQ(d_model->value(), expected.d_model);
  // Unedited, a preset changes without a question.
  QString unexpected;
  answer_next_dialog("Use", &unexpected, 1000);
  preset->setCurrentText("tiny");
  EXPECT_TRUE(unexpected.isEmpty()) << unexpected.toStdString();
  EXPECT_EQ(layers->value(), rematlab::model_preset("tiny").layers);
  QTest::qWait(1100);  // the watch for a question ends
}

TEST(Window, ANewDatabaseGetsItsExtensionAndItsPathIsShown) {
  Bench bench;
  ASSERT_TRUE(bench.window.new_database(bench.dir.filePath("mynew")));
  EXPECT_EQ(bench.window.database_path(), bench.dir.filePath("mynew.sqlite"));
  EXPECT_TRUE(QFile::exists(bench.dir.filePath("mynew.sqlite")));
  // In the status bar, elided in the middle where it is long, whole in its tooltip.
  const rematlab::ui::ElidedLabel* label = bench.window.database_label();
  EXPECT_TRUE(bench.window.statusBar()->isAncestorOf(label));
  EXPECT_TRUE(label->text().contains(QDir::toNativeSeparators(bench.window.database_path())));
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
  bench.window.charts_exported(bench.dir.path(), written, 9);
  EXPECT_TRUE(bench.window.status_text().contains("5 empty charts left out"))
      << bench.window.status_text().toStdString();
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

}  // namespace
