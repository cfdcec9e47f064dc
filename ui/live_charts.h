// The live view: four charts — loss and throughput (each step's value faint, under its
// bias-corrected moving average), device memory (peak and live per step, the budget as a line),
// and the memory timeline of the last recorded step coloured by phase. Every run of a sweep is
// its own curve in the same colour in every chart, named once in the tab's shared legend (which
// also says which line is raw); a run whose loss or memory curve is exactly another's says that
// it coincides, and a run that ends other than ok says how and why above the charts.
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
class QLabel;

namespace rematlab::ui {

class ChartLegend;

class LiveCharts : public QWidget {
  Q_OBJECT

 public:
  enum Chart { kLoss, kMemory, kThroughput, kTimeline };

  explicit LiveCharts(QWidget* parent = nullptr);

  // Forgets every curve and message (a new sweep begins, another database is opened).
  void clear();
  // Starts run `index`'s curves, named `label`; `budget_bytes` > 0 draws the budget line.
  void begin_run(int index, const QString& label, double budget_bytes);
  // Names run `index` anew (a max-batch run, once its batch is found).
  void rename_run(int index, const QString& label);
  void add_step(int index, const rematlab::StepMetrics& step);
  // Shows one step's memory over time, each phase in its own colour.
  void show_timeline(const QString& label, const Timeline& timeline);
  // Run `index` has ended with `status` (ok, oom, failed, …; `message` says why when not ok) and
  // was recorded as `run_id` (0: not recorded). A run that did not end ok is said above the
  // charts and in the legend; one whose loss or memory curve is exactly an earlier run's (exact
  // recomputation trains identically) says so in the legend, since the curves hide each other.
  void finish_run(int index, RunStatus status = RunStatus::kOk, const QString& message = {},
                  qint64 run_id = 0);
  // Exponential-moving-average weight of the smoothed curves, in [0, 1); recomputes them.
  void set_smoothing(double weight);

  QCustomPlot* plot(Chart chart) const;
  ChartLegend* legend() const { return legend_; }
  // What the tab says above the charts about runs that did not end ok ("" when all did).
  QString notice_text() const;
  // Saves every chart as NAME-loss.png/.pdf etc. in `directory`; returns the files written.
  QStringList export_images(const QString& directory, const QString& name) const;
  // The files export_images would write now (the charts that have data).
  QStringList image_files(const QString& directory, const QString& name) const;

  // For tests: runs with curves, and the points of run `index` in `chart`'s main curve.
  int run_count() const { return static_cast<int>(runs_.size()); }
  int points(Chart chart, int index) const;
  int replots() const { return replots_; }
  // The name run `index`'s curve of `chart` has (in exported legends).
  QString legend_name(Chart chart, int index) const;

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  // A bias-corrected exponential moving average, as TensorBoard smooths: the average of zero
  // weight so far is divided out, so the first points are not pulled towards the first value.
  struct Smoother {
    double sum = 0.0;
    double weight_left = 1.0;  // weight^n after n values
    bool has() const { return weight_left < 1.0; }
    double add(double value, double weight);
    double value() const { return has() ? sum / (1.0 - weight_left) : 0.0; }
  };
  struct RunCurves {
    QCPGraph* loss = nullptr;
    QCPGraph* smoothed = nullptr;
    QCPGraph* diverged = nullptr;  // markers where the loss was NaN or infinite
    QCPGraph* peak = nullptr;
    QCPGraph* live = nullptr;
    QCPGraph* throughput = nullptr;
    QCPGraph* throughput_smoothed = nullptr;
    QString label;
    QString ending;       // "oom", "failed", …; empty while running or when it ended ok
    QString loss_twin;    // the earlier run whose loss curve this one repeats exactly
    QString memory_twin;  // the earlier run whose memory curve this one repeats exactly
    Smoother loss_average;
    Smoother throughput_average;
  };

  RunCurves* curves(int index);
  void name_curves(RunCurves& run);
  void update_legend();
  void update_notice();
  void schedule_replot();
  void replot_now();

  QCustomPlot* loss_plot_;
  QCustomPlot* memory_plot_;
  QCustomPlot* throughput_plot_;
  QCustomPlot* timeline_plot_;
  QDoubleSpinBox* smoothing_box_;
  ChartLegend* legend_;
  QLabel* notice_;
  QStringList endings_;  // one line per run that did not end ok
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
