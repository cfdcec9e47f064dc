// Runs side by side: the article's table (strategy, batch, peak memory, tokens/s and the change
// against a chosen baseline run, MFU and HFU), bar charts of peak activation memory and tokens/s, a memory
// versus throughput scatter with the Pareto front marked, and the loss curves overlaid.
#pragma once

#include <QWidget>

#include <map>
#include <vector>

#include "store/run_store.h"

class QComboBox;
class QCustomPlot;
class QTableWidget;

namespace rematlab::ui {

class CompareView : public QWidget {
  Q_OBJECT

 public:
  explicit CompareView(QWidget* parent = nullptr);

  // `steps` holds each run's steps by run id (for the loss curves).
  void set_runs(std::vector<RunRecord> runs, std::map<int64_t, std::vector<StepMetrics>> steps);
  void set_baseline(int index);  // into the runs given
  QStringList export_images(const QString& directory, const QString& name) const;

  QTableWidget* table() const { return table_; }
  // Indices (into the runs given) on the Pareto front: no other run has both less peak memory
  // and more tokens/s.
  std::vector<int> pareto_front() const;

 private:
  void rebuild();

  std::vector<RunRecord> runs_;
  std::map<int64_t, std::vector<StepMetrics>> steps_;
  QComboBox* baseline_;
  QTableWidget* table_;
  QCustomPlot* memory_bars_;
  QCustomPlot* throughput_bars_;
  QCustomPlot* scatter_;
  QCustomPlot* losses_;
};

}  // namespace rematlab::ui
