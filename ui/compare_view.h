// Runs side by side: the article's table (strategy, batch, peak memory, tokens/s and the change
// against a chosen baseline run, MFU and HFU), bar charts of peak activation memory and tokens/s,
// a memory versus throughput scatter with the Pareto front marked, the loss curves overlaid, and
// every step's peak memory: one curve per rank for a data-parallel run (each rank's figures are
// in its record), one per run otherwise; and for runs of several ranks, where each rank's step
// went (computing, a pipeline's bubble and transfers, the experts' all-to-all, other collectives:
// rank_time_chart.h), and on the loss chart's right axis each mixture of experts' per-step expert
// load. A run
// has one colour everywhere: the table, with each run's swatch, is the tab's one legend of runs
// (the titles say what line styles and markers mean); only the ranks' chart keys its fills, which
// no title has room for. A loss or memory curve that lies on an earlier run's says so. Ratios, the
// front and the warnings come from core's one comparison (store/run_comparison.h).
#pragma once

#include <QWidget>
#include <map>
#include <vector>

#include "chart_style.h"
#include "store/run_comparison.h"
#include "store/run_store.h"

class QComboBox;
class QCPGraph;
class QCustomPlot;
class QLabel;
class QTableWidget;

namespace rematlab::ui {

class ElidedLabel;

class CompareView : public QWidget {
  Q_OBJECT

 public:
  explicit CompareView(QWidget* parent = nullptr);

  // `steps` holds each run's steps by run id (for the loss curves).
  void set_runs(std::vector<RunRecord> runs, std::map<int64_t, std::vector<StepMetrics>> steps);
  // Drops runs that no longer exist (deleted in the Runs tab).
  void remove_runs(const QList<qint64>& ids);
  void set_baseline(int index);  // into the runs given
  QStringList export_images(const QString& directory, const QString& name) const;
  // The files export_images would write now (the charts that have data).
  QStringList image_files(const QString& directory, const QString& name) const;

  QTableWidget* table() const { return table_; }
  QCustomPlot* step_memory_chart() const { return step_memory_; }
  QCustomPlot* rank_time_chart() const { return rank_time_; }
  const RunComparison& comparison() const { return comparison_; }
  QString warnings_text() const;
  // Which runs' loss curves lie exactly on an earlier run's (said above the charts).
  QString coincide_text() const;
  QCustomPlot* loss_chart() const { return losses_; }
  QCustomPlot* scatter_chart() const { return scatter_; }
  QCustomPlot* activation_chart() const { return memory_bars_; }

 protected:
  void resizeEvent(QResizeEvent* event) override;

 private:
  void rebuild();
  void fill_table();
  void fill_bars();
  void fill_scatter();
  void fill_losses();
  void fill_step_memory();
  // Each mixture-of-experts run's per-step expert load on the loss chart's right axis, dotted;
  // whether any run had one.
  bool add_expert_loads();
  // The table as tall as its rows, up to a quarter of the tab.
  void fit_table();
  // Every chart under the name its exported file takes.
  std::vector<NamedChart> named_charts() const;

  std::vector<RunRecord> runs_;
  std::map<int64_t, std::vector<StepMetrics>> steps_;
  RunComparison comparison_;
  QComboBox* baseline_;
  QLabel* warnings_;
  ElidedLabel* coincide_;
  QStringList coincide_lines_;
  std::vector<int> coinciding_;   // per run: the earlier run whose loss it repeats, or -1
  std::vector<int> same_memory_;  // per run: the earlier run whose step peaks it repeats, or -1
  QTableWidget* table_;
  QCustomPlot* memory_bars_;
  QCustomPlot* throughput_bars_;
  QCustomPlot* scatter_;
  QCustomPlot* losses_;
  QCustomPlot* step_memory_;
  QCustomPlot* rank_time_;
};

}  // namespace rematlab::ui
