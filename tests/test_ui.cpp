#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <QSpinBox>

#include "live_charts.h"
#include "main_window.h"
#include "run_panel.h"

namespace {

using rematlab::ui::MainWindow;

TEST(RunPanel, InvalidPolicyDisablesRunWithTheReason) {
  MainWindow window;
  auto* panel = window.run_panel();
  panel->checkpoint_field()->setText("every:0");
  EXPECT_FALSE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().contains("every:0")) << panel->problem().toStdString();
  EXPECT_TRUE(panel->run_button()->toolTip().contains("every:0"));
  panel->checkpoint_field()->setText("sublayer:1,2");
  EXPECT_TRUE(panel->run_button()->isEnabled());
  EXPECT_TRUE(panel->problem().isEmpty());
}

TEST(MainWindow, RunsInTheWorkerAndDrawsEveryStep) {
  MainWindow window;
  auto* panel = window.run_panel();
  panel->steps_field()->setValue(6);
  panel->checkpoint_field()->setText("every:1");
  QSignalSpy ended(&window, &MainWindow::runEnded);
  panel->run_button()->click();
  EXPECT_TRUE(window.is_running());
  EXPECT_FALSE(panel->run_button()->isEnabled());
  ASSERT_TRUE(ended.wait(120000));
  EXPECT_EQ(ended.takeFirst().at(0).toString(), "ok");
  EXPECT_EQ(window.charts()->loss_points(), 6);
  QTest::qWait(100);  // let the throttled replot fire
  EXPECT_GE(window.charts()->replots(), 1);
  EXPECT_TRUE(panel->run_button()->isEnabled());
}

TEST(MainWindow, StopCancelsTheRunAndTheWindowKeepsWorking) {
  MainWindow window;
  auto* panel = window.run_panel();
  panel->steps_field()->setValue(100000);
  QSignalSpy ended(&window, &MainWindow::runEnded);
  panel->run_button()->click();
  QTest::qWait(300);
  panel->stop_button()->click();
  ASSERT_TRUE(ended.wait(60000));
  EXPECT_EQ(ended.takeFirst().at(0).toString(), "cancelled");
  EXPECT_LT(window.charts()->loss_points(), 100000);
  EXPECT_FALSE(window.is_running());
}

TEST(MainWindow, GradientCheckButtonGivesTheVerdict) {
  MainWindow window;
  auto* panel = window.run_panel();
  panel->checkpoint_field()->setText("sublayer:1,2");
  QSignalSpy ended(&window, &MainWindow::checkEnded);
  panel->check_button()->click();
  EXPECT_FALSE(panel->check_button()->isEnabled());
  ASSERT_TRUE(ended.wait(120000));
  const QList<QVariant> result = ended.takeFirst();
  EXPECT_TRUE(result.at(0).toBool());
  EXPECT_TRUE(result.at(1).toString().startsWith("identical")) << result.at(1).toString().toStdString();
  EXPECT_TRUE(panel->check_button()->isEnabled());
}

TEST(MainWindow, ClosingDuringARunJoinsTheWorker) {
  auto window = std::make_unique<MainWindow>();
  window->run_panel()->steps_field()->setValue(100000);
  window->run_panel()->run_button()->click();
  QTest::qWait(200);
  ASSERT_TRUE(window->is_running());
  QElapsedTimer timer;
  timer.start();
  window.reset();  // must cancel and join the worker, not crash or hang
  EXPECT_LT(timer.elapsed(), 10000);
}

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  // Real widgets, no display needed (also when ctest lists the cases at build time).
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
