// Live curves: loss (raw and smoothed), device memory (peak per step, live at step end, the
// budget as a line) and throughput. Every run gets its own colour; replots are merged by a
// single-shot timer so a fast run never floods the event loop.
#pragma once

#include <QTimer>
#include <QWidget>

#include <vector>

#include "train/step_metrics.h"

class QCustomPlot;
class QCPGraph;

namespace rematlab::ui {

class LiveCharts : public QWidget {
  Q_OBJECT

 public:
  explicit LiveCharts(QWidget* parent = nullptr);

  // Starts new curves for a run named `label`; `budget_bytes` > 0 draws the budget line.
  void begin_run(const QString& label, double budget_bytes);
  void add_step(const rematlab::StepMetrics& step);
  // Exponential-moving-average weight of the smoothed loss, in [0, 1).
  void set_smoothing(double weight);

  // For tests: points in the current run's loss curve, and replots done so far.
  int loss_points() const;
  int replots() const { return replots_; }

 private:
  struct RunCurves {
    QCPGraph* loss = nullptr;
    QCPGraph* smoothed = nullptr;
    QCPGraph* peak = nullptr;
    QCPGraph* live = nullptr;
    QCPGraph* throughput = nullptr;
    double ema = 0.0;
    bool has_ema = false;
  };

  void schedule_replot();
  void replot_now();

  QCustomPlot* loss_plot_;
  QCustomPlot* memory_plot_;
  QCustomPlot* throughput_plot_;
  QCPGraph* budget_line_ = nullptr;
  std::vector<RunCurves> runs_;
  double smoothing_ = 0.9;
  QTimer replot_timer_;
  int replots_ = 0;
};

}  // namespace rematlab::ui
