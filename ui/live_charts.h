// The live view: four charts — loss and throughput (each raw, faint, under its moving average),
// device memory (peak and live per step, the budget as a line), and the memory timeline of the
// last recorded step coloured by phase. Every run of a sweep is its own curve in its own colour,
// named in the legend; a run whose loss curve is exactly another's says that it coincides.
// Replots are merged by a single-shot timer (at most ~30 a second) and QCustomPlot's adaptive
// sampling keeps curves of 100,000 points fluid.
#pragma once

#include <QTimer>
#include <QWidget>
#include <vector>

#include "metatypes.h"

class QCustomPlot;
class QCPGraph;
class QDoubleSpinBox;

namespace rematlab::ui {

class LiveCharts : public QWidget {
  Q_OBJECT

 public:
  enum Chart { kLoss, kMemory, kThroughput, kTimeline };

  explicit LiveCharts(QWidget* parent = nullptr);

  // Forgets every curve (a new sweep begins).
  void clear();
  // Starts run `index`'s curves, named `label`; `budget_bytes` > 0 draws the budget line.
  void begin_run(int index, const QString& label, double budget_bytes);
  void add_step(int index, const rematlab::StepMetrics& step);
  // Shows one step's memory over time, each phase in its own colour.
  void show_timeline(const QString& label, const Timeline& timeline);
  // Run `index` has ended: when its loss curve is exactly an earlier run's (exact recomputation
  // trains identically), its legend says so, since the curves hide each other.
  void finish_run(int index);
  // Exponential-moving-average weight of the smoothed curves, in [0, 1); recomputes them.
  void set_smoothing(double weight);

  QCustomPlot* plot(Chart chart) const;
  // Saves every chart as NAME-loss.png/.pdf etc. in `directory`; returns the files written.
  QStringList export_images(const QString& directory, const QString& name) const;

  // For tests: runs with curves, and the points of run `index` in `chart`'s main curve.
  int run_count() const { return static_cast<int>(runs_.size()); }
  int points(Chart chart, int index) const;
  int replots() const { return replots_; }
  QString legend_name(Chart chart, int index) const;

 private:
  struct RunCurves {
    QCPGraph* loss = nullptr;
    QCPGraph* smoothed = nullptr;
    QCPGraph* diverged = nullptr;  // markers where the loss was NaN or infinite
    QCPGraph* peak = nullptr;
    QCPGraph* live = nullptr;
    QCPGraph* throughput = nullptr;
    QCPGraph* throughput_smoothed = nullptr;
    QString label;
    double ema = 0.0;
    bool has_ema = false;
    double throughput_ema = 0.0;
    bool has_throughput_ema = false;
  };

  RunCurves* curves(int index);
  void schedule_replot();
  void replot_now();

  QCustomPlot* loss_plot_;
  QCustomPlot* memory_plot_;
  QCustomPlot* throughput_plot_;
  QCustomPlot* timeline_plot_;
  QDoubleSpinBox* smoothing_box_;
  QCPGraph* budget_line_ = nullptr;
  std::vector<std::pair<int, RunCurves>> runs_;  // by run index, in start order
  double smoothing_ = 0.9;
  double last_step_ = 1.0;
  QTimer replot_timer_;
  int replots_ = 0;
};

// The colour run `index` has in every chart of the window.
QColor run_colour(int index);

}  // namespace rematlab::ui
