// Failures said where the user looks (issue 25): a run that ends oom is said in the status bar,
// above the Live charts and by the advisor, with its reason and what would fit; quitting during
// a run stops it when the question opens and records it cancelled.
#include <QApplication>
#include <QElapsedTimer>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTest>
#include <QTreeWidget>

#include "advice_panel.h"
#include "live_charts.h"
#include "runs_view.h"
#include "window_bench.h"

namespace {

using rematlab::RunStatus;
using rematlab::RunStore;
using rematlab::StoreAccess;
using rematlab::ui::AdvicePanel;
using rematlab::ui::LiveCharts;
using rematlab::ui::MainWindow;
using rematlab::ui::testing::advise;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::kTimeoutMs;
using rematlab::ui::testing::show_at;

// The text of every row of the advisor's findings, evidence and next steps.
QString advice_text(AdvicePanel* advice) {
  QStringList lines;
  const QTreeWidget* tree = advice->findings_tree();
  for (int i = 0; i < tree->topLevelItemCount(); ++i) {
    const QTreeWidgetItem* finding = tree->topLevelItem(i);
    lines << finding->text(0);
    for (int j = 0; j < finding->childCount(); ++j) {
      lines << finding->child(j)->text(0) + ": " + finding->child(j)->text(1);
    }
  }
  return lines.join("\n");
}

TEST(WindowFailures, AnOomRunIsSaidInTheStatusBarAboveTheChartsAndByTheAdvisor) {
  Bench bench;
  bench.panel->budget_field()->setText("1KiB");
  ASSERT_EQ(bench.run_sweep(), "oom");
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  const QString reason = QString::fromStdString(runs[0].message);
  ASSERT_FALSE(reason.isEmpty());
  const QString ended = QString("run #%1 ended oom: %2").arg(runs[0].id).arg(reason);
  // The status bar leads with it, not with "Sweep done"; the bar says a run was not ok.
  const QString status = bench.window.status_text();
  EXPECT_TRUE(status.startsWith("R" + ended.mid(1))) << status.toStdString();
  EXPECT_EQ(bench.window.progress_bar()->text(), "1 not ok");
  // The Live tab, whose charts stay empty, says why.
  const QString notice = bench.window.charts()->notice_text();
  EXPECT_TRUE(notice.contains(QString("Run #%1 (none b8) ended oom").arg(runs[0].id)))
      << notice.toStdString();
  EXPECT_TRUE(notice.contains(reason)) << notice.toStdString();
  // The advisor says how it ended and what would fit, in the form's words.
  AdvicePanel* advice = advise(bench, runs[0].id);
  EXPECT_TRUE(advice->finding_kinds().contains("did_not_finish"))
      << advice->finding_kinds().join(",").toStdString();
  const QString said = advice_text(advice);
  EXPECT_TRUE(said.contains(ended.mid(1))) << said.toStdString();
  EXPECT_TRUE(said.contains("next step: Budget ")) << said.toStdString();
  EXPECT_TRUE(said.contains("the smallest that fits batch 8")) << said.toStdString();
  EXPECT_FALSE(said.contains("--")) << said.toStdString();
  EXPECT_FALSE(advice->status_text().contains("no findings"));
}

TEST(WindowFailures, APlanThatFitsNoBudgetIsSaidWithTheSmallestThatFits) {
  Bench bench;
  bench.panel->policies_field()->setText("plan:1KiB");
  bench.panel->steps_field()->setValue(2);
  ASSERT_EQ(bench.run_sweep(), "oom") << bench.window.status_text().toStdString();
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_TRUE(runs[0].request.plan.has_value());
  const QString reason = QString::fromStdString(runs[0].message);
  EXPECT_TRUE(reason.contains("no checkpoint plan fits")) << reason.toStdString();
  EXPECT_TRUE(bench.window.status_text().contains(reason))
      << bench.window.status_text().toStdString();
  EXPECT_TRUE(bench.window.charts()->notice_text().contains(reason));
  AdvicePanel* advice = advise(bench, runs[0].id);
  const QString said = advice_text(advice);
  EXPECT_TRUE(said.contains("smallest budget a plan fits")) << said.toStdString();
  EXPECT_TRUE(said.contains("next step: Policies plan:")) << said.toStdString();
}

TEST(WindowFailures, QuittingDuringARunStopsItWhenAskedAndRecordsItCancelled) {
  QTemporaryDir dir;
  const QString db = dir.filePath("runs.sqlite");
  MainWindow window(db);
  window.experiment_panel()->preset_field()->setCurrentText("tiny");
  window.experiment_panel()->steps_field()->setValue(100000);
  window.experiment_panel()->findChild<QSpinBox*>("threads")->setValue(1);
  show_at(window, 1280, 720);
  // "Stay": the run was stopped when the question opened, and stays stopped.
  for (const QString answer : {"Stay", "Quit"}) {
    QSignalSpy ended(&window, &MainWindow::sweepEnded);
    window.experiment_panel()->run_button()->click();
    QElapsedTimer waited;
    waited.start();
    while (window.charts()->points(LiveCharts::kLoss, 0) < 2 && waited.elapsed() < kTimeoutMs)
      QTest::qWait(20);
    QString question;
    bool stopped_while_asked = false;
    QTimer poll;
    QObject::connect(&poll, &QTimer::timeout, [&] {
      auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
      if (!box) return;
      question = box->text();
      // Nothing trains on behind the question: the sweep ends while it is open.
      if (ended.isEmpty() && waited.elapsed() < kTimeoutMs) return;
      stopped_while_asked = !ended.isEmpty();
      poll.stop();
      for (QAbstractButton* button : box->buttons()) {
        if (button->text().startsWith(answer)) button->click();
      }
    });
    waited.restart();
    poll.start(20);
    window.close();
    EXPECT_TRUE(stopped_while_asked) << answer.toStdString();
    EXPECT_TRUE(question.contains("recorded as cancelled")) << question.toStdString();
    ASSERT_EQ(ended.count(), 1);
    EXPECT_EQ(ended.takeFirst().at(0).toString(), "cancelled");
    EXPECT_FALSE(window.is_running());
    EXPECT_EQ(window.isVisible(), answer == "Stay");
  }
  RunStore store(db.toStdString(), StoreAccess::kReadOnly, false);
  const auto runs = store.runs();
  ASSERT_EQ(runs.size(), 2u);
  for (const auto& run : runs) EXPECT_EQ(run.status, RunStatus::kCancelled) << run.id;
}

}  // namespace
