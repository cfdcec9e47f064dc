// The Live tab's charts (issue 25): the smoothed curves are bias-corrected and the legend says
// which line is raw; a run's first step is drawn at once; memory curves that coincide say so; a
// run that ends other than ok says how and why above the charts; a max-batch run is named by the
// batch it trains once the search has found it.
#include <qcustomplot.h>

#include <QApplication>
#include <QCheckBox>
#include <QElapsedTimer>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QTest>
#include <cmath>

#include "chart_legend.h"
#include "chart_style.h"
#include "live_charts.h"
#include "window_bench.h"

namespace {

using rematlab::StepMetrics;
using rematlab::ui::LiveCharts;
using rematlab::ui::testing::Bench;
using rematlab::ui::testing::kTimeoutMs;

void add_losses(LiveCharts& charts, int index, const std::vector<double>& losses,
                int64_t peak_bytes = 64 << 20) {
  StepMetrics step;
  step.peak_bytes = peak_bytes;
  step.tokens_per_s = 1000.0;
  for (double loss : losses) {
    step.loss = loss;
    charts.add_step(index, step);
    ++step.step;
  }
}

// The debiased moving average written out: each value weighted by weight^(age), divided by the
// weights' sum (what TensorBoard's smoothing computes).
double weighted_mean(const std::vector<double>& values, double weight) {
  double sum = 0.0, weights = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double w = std::pow(weight, static_cast<double>(values.size() - 1 - i));
    sum += w * values[i];
    weights += w;
  }
  return sum / weights;
}

TEST(LiveCharts, TheSmoothedLossIsBiasCorrectedAndTheLegendSaysWhichLineIsRaw) {
  LiveCharts charts;
  charts.begin_run(0, "none b8", 0.0);
  const std::vector<double> losses = {5.5, 5.2, 4.87};
  add_losses(charts, 0, losses);
  QCPGraph* raw = charts.plot(LiveCharts::kLoss)->graph(0);
  QCPGraph* smoothed = charts.plot(LiveCharts::kLoss)->graph(1);
  ASSERT_EQ(smoothed->dataCount(), 3);
  // The first point is the first loss, not a tenth of it or a value pulled towards zero.
  EXPECT_DOUBLE_EQ(smoothed->data()->at(0)->value, 5.5);
  for (std::size_t n = 1; n <= losses.size(); ++n) {
    const std::vector<double> first(losses.begin(), losses.begin() + static_cast<long>(n));
    EXPECT_NEAR(smoothed->data()->at(static_cast<int>(n) - 1)->value, weighted_mean(first, 0.9),
                1e-12)
        << "after " << n << " steps";
  }
  // Without the correction the average started at the first loss ends at 5.47 here.
  EXPECT_LT(smoothed->data()->at(2)->value, 5.2);
  // Changing the weight recomputes the curve the same way.
  charts.set_smoothing(0.5);
  EXPECT_NEAR(smoothed->data()->at(2)->value, weighted_mean(losses, 0.5), 1e-12);
  // The shared legend names the run once and says which line is each step's own value.
  const QStringList legend = charts.legend()->texts();
  EXPECT_TRUE(legend.contains("none b8")) << legend.join(" | ").toStdString();
  EXPECT_TRUE(legend.contains("each step (raw)")) << legend.join(" | ").toStdString();
  EXPECT_TRUE(legend.contains("smoothed")) << legend.join(" | ").toStdString();
  EXPECT_NE(raw->pen().color(), smoothed->pen().color());
  EXPECT_TRUE(rematlab::ui::chart_title(charts.plot(LiveCharts::kLoss)).contains("faint"));
}

// Pixels of exactly `colour` in the chart drawn at 400×300.
int pixels_of(QCustomPlot* chart, QColor colour) {
  const QImage image = chart->toPixmap(400, 300).toImage();
  int count = 0;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) count += image.pixelColor(x, y) == colour ? 1 : 0;
  }
  return count;
}

TEST(LiveCharts, TheFirstStepIsDrawnBeforeThereIsALine) {
  LiveCharts charts;
  charts.begin_run(0, "run", 0.0);
  const QColor colour = rematlab::ui::run_colour(0);
  QCustomPlot* loss = charts.plot(LiveCharts::kLoss);
  QCustomPlot* memory = charts.plot(LiveCharts::kMemory);
  ASSERT_EQ(pixels_of(loss, colour), 0);  // nothing drawn in the run's colour yet
  add_losses(charts, 0, {5.0});
  QTest::qWait(100);  // the throttled replot sets the axes round the point
  EXPECT_GT(pixels_of(loss, colour), 4) << "one step draws nothing";
  EXPECT_GT(pixels_of(memory, colour), 4) << "one step draws nothing";
  add_losses(charts, 0, {4.0, 3.0});
  // With a line to draw, the points are not marked (100,000 markers would be slow).
  EXPECT_EQ(loss->graph(1)->scatterStyle().shape(), QCPScatterStyle::ssNone);
}

TEST(LiveCharts, MemoryCurvesThatCoincideSaySoAsTheLossDoes) {
  LiveCharts charts;
  charts.begin_run(0, "none b8", 0.0);
  charts.begin_run(1, "selective b8", 0.0);
  add_losses(charts, 0, {5.0, 4.0, 3.0}, 64 << 20);
  // Another loss, and a peak 5 KiB higher (the RNG state a recomputed segment keeps): less than
  // a pixel, so the curves hide each other all the same.
  add_losses(charts, 1, {5.0, 4.5, 3.5}, (64 << 20) + 5056);
  charts.finish_run(0);
  charts.finish_run(1);
  EXPECT_TRUE(charts.legend_name(LiveCharts::kMemory, 1).contains("coincides with none b8"))
      << charts.legend_name(LiveCharts::kMemory, 1).toStdString();
  EXPECT_FALSE(charts.legend_name(LiveCharts::kLoss, 1).contains("coincides"));
  EXPECT_FALSE(charts.legend_name(LiveCharts::kMemory, 0).contains("coincides"));
  EXPECT_TRUE(charts.legend()->texts().contains("selective b8 (memory coincides with none b8)"))
      << charts.legend()->texts().join(" | ").toStdString();
  QCustomPlot* memory = charts.plot(LiveCharts::kMemory);
  EXPECT_EQ(memory->graph(2)->pen().style(), Qt::DashLine);  // run 1's peak, over run 0's
  // A real difference is not called a coincidence.
  charts.begin_run(2, "every:1 b8", 0.0);
  add_losses(charts, 2, {5.0, 4.0, 3.0}, 40 << 20);
  charts.finish_run(2);
  EXPECT_EQ(charts.legend_name(LiveCharts::kLoss, 2), "every:1 b8 (coincides with none b8)");
  EXPECT_EQ(charts.legend_name(LiveCharts::kMemory, 2), "every:1 b8");
  EXPECT_TRUE(charts.legend()->texts().contains("every:1 b8 (loss coincides with none b8)"))
      << charts.legend()->texts().join(" | ").toStdString();
}

TEST(LiveCharts, ARunThatDidNotEndOkSaysHowAndWhyAboveTheCharts) {
  LiveCharts charts;
  charts.begin_run(0, "none b8", 1024.0);
  charts.finish_run(0, rematlab::RunStatus::kOom,
                    "step 0 peaked at 6.71 MiB, above the budget of 1.00 KiB", 12);
  EXPECT_EQ(charts.notice_text(),
            "Run #12 (none b8) ended oom before its first step: step 0 peaked at 6.71 MiB, above "
            "the budget of 1.00 KiB");
  EXPECT_TRUE(charts.findChild<QLabel*>("live-notice")->isVisibleTo(&charts));
  EXPECT_TRUE(charts.legend()->texts().contains("none b8 — oom"))
      << charts.legend()->texts().join(" | ").toStdString();
  charts.clear();
  EXPECT_TRUE(charts.notice_text().isEmpty());
  EXPECT_FALSE(charts.findChild<QLabel*>("live-notice")->isVisibleTo(&charts));
  EXPECT_TRUE(charts.legend()->texts().isEmpty());
}

TEST(MainWindow, AMaxBatchRunIsNamedByTheBatchItTrains) {
  Bench bench;
  bench.panel->max_batch_box()->setChecked(true);
  bench.panel->budget_field()->setText("64MiB");
  bench.panel->steps_field()->setValue(40);
  const LiveCharts* charts = bench.window.charts();
  QString before_training, during_training;
  QTimer poll;
  QObject::connect(&poll, &QTimer::timeout, [&] {
    if (charts->run_count() == 0) return;
    const QString name = charts->legend_name(LiveCharts::kLoss, 0);
    if (charts->points(LiveCharts::kLoss, 0) == 0 && before_training.isEmpty()) {
      before_training = name;
    } else if (charts->points(LiveCharts::kLoss, 0) >= 2 && during_training.isEmpty()) {
      during_training = name;
    }
  });
  poll.start(5);
  ASSERT_EQ(bench.run_sweep(), "ok") << bench.window.status_text().toStdString();
  poll.stop();
  const auto runs = bench.reader().runs();
  ASSERT_EQ(runs.size(), 1u);
  const QString trained = QString("none b%1 (max)").arg(runs[0].config.batch);
  ASSERT_GT(runs[0].config.batch, 0);
  EXPECT_TRUE(before_training.contains("b=max")) << before_training.toStdString();
  EXPECT_EQ(during_training, trained);
  EXPECT_EQ(charts->legend_name(LiveCharts::kLoss, 0), trained);
  EXPECT_TRUE(charts->legend()->texts().contains(trained))
      << charts->legend()->texts().join(" | ").toStdString();
  const QString timeline = rematlab::ui::chart_title(charts->plot(LiveCharts::kTimeline));
  EXPECT_TRUE(timeline.endsWith(trained)) << timeline.toStdString();
  EXPECT_FALSE(timeline.contains("b=max")) << timeline.toStdString();
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
  // Bias-corrected: each rate weighted 0.5^age, divided by the weights' sum.
  EXPECT_DOUBLE_EQ(smoothed->data()->at(0)->value, 100.0);
  EXPECT_DOUBLE_EQ(smoothed->data()->at(1)->value, (0.5 * 100.0 + 300.0) / 1.5);
  EXPECT_DOUBLE_EQ(smoothed->data()->at(2)->value, (0.25 * 100.0 + 0.5 * 300.0 + 100.0) / 1.75);
  EXPECT_NE(raw->pen().color(), smoothed->pen().color());  // the raw one is the faint one
  EXPECT_FALSE(plot->legend->hasItemWithPlottable(raw));
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

}  // namespace
