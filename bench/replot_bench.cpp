// How long the live view takes to redraw with 100,000 points per curve: the window's own
// LiveCharts filled with four runs of 100,000 steps each (loss raw + smoothed, memory peak +
// live, throughput), each chart replotted immediately many times, with QCustomPlot's adaptive
// sampling on (as the window uses it) and off, side by side in one process.
//
//   QT_QPA_PLATFORM=offscreen build/bench/replot_bench [points] [replots]
#include <qcustomplot.h>

#include <QApplication>
#include <QElapsedTimer>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "live_charts.h"

namespace {

using rematlab::ui::LiveCharts;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Median milliseconds per immediate replot of every chart in the view.
double time_replots(LiveCharts& charts, int replots) {
  std::vector<double> samples;
  for (int i = 0; i < replots; ++i) {
    QElapsedTimer timer;
    timer.start();
    for (auto chart : {LiveCharts::kLoss, LiveCharts::kMemory, LiveCharts::kThroughput}) {
      charts.plot(chart)->replot(QCustomPlot::rpImmediateRefresh);
    }
    samples.push_back(static_cast<double>(timer.nsecsElapsed()) / 1e6);
  }
  return median(samples);
}

void set_adaptive_sampling(LiveCharts& charts, bool enabled) {
  for (auto chart : {LiveCharts::kLoss, LiveCharts::kMemory, LiveCharts::kThroughput}) {
    for (int g = 0; g < charts.plot(chart)->graphCount(); ++g) {
      charts.plot(chart)->graph(g)->setAdaptiveSampling(enabled);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  const int points = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int replots = argc > 2 ? std::atoi(argv[2]) : 30;
  constexpr int kRuns = 4;

  LiveCharts charts;
  charts.resize(1400, 900);
  charts.show();
  for (int run = 0; run < kRuns; ++run) {
    charts.begin_run(run, QString("run %1").arg(run), 2.0 * 1024 * 1024 * 1024);
    rematlab::StepMetrics step;
    step.total_steps = points;
    for (int i = 0; i < points; ++i) {
      step.step = i;
      // Noisy, like real loss and throughput curves: sampling must keep the spikes visible.
      step.loss = 5.0 * std::exp(-i / 20000.0) + 0.3 * std::sin(i * 0.37 + run) + 1.0;
      step.tokens_per_s = 30000.0 + 3000.0 * std::sin(i * 0.11 + run) + (i % 997 == 0 ? 20000 : 0);
      step.peak_bytes = static_cast<int64_t>((500 + 40 * run + (i % 50)) * 1048576.0);
      step.current_bytes = step.peak_bytes / 3;
      charts.add_step(run, step);
    }
  }
  for (auto chart : {LiveCharts::kLoss, LiveCharts::kMemory, LiveCharts::kThroughput}) {
    charts.plot(chart)->rescaleAxes();
  }
  time_replots(charts, 3);  // warm caches and fonts
  const double sampled = time_replots(charts, replots);
  set_adaptive_sampling(charts, false);
  const double unsampled = time_replots(charts, std::max(3, replots / 5));
  std::printf("%d runs x %d points per curve (%d curves), %d replots, 1400x900 offscreen\n", kRuns,
              points, kRuns * 5, replots);
  std::printf("| adaptive sampling | ms per replot of loss+memory+throughput | replots/s |\n");
  std::printf("|---|---|---|\n");
  std::printf("| on (the window) | %.1f | %.0f |\n", sampled, 1000.0 / sampled);
  std::printf("| off | %.1f | %.0f |\n", unsampled, 1000.0 / unsampled);
  std::printf("ratio off/on: %.1f\n", unsampled / sampled);
  return 0;
}
