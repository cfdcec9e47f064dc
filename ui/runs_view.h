// Every run in the open database: a sortable table, filtered by experiment and status, with
// multi-select to compare, delete (after confirmation) and export as CSV. Reads through core's
// RunStore; the window owns the store.
#pragma once

#include <QAbstractTableModel>
#include <QWidget>
#include <vector>

#include "store/run_store.h"

class QComboBox;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace rematlab::ui {

class AdvicePanel;

class RunsTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  using QAbstractTableModel::QAbstractTableModel;
  void set_runs(std::vector<RunRecord> runs);
  const RunRecord& run_at(int row) const { return runs_.at(static_cast<std::size_t>(row)); }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  std::vector<RunRecord> runs_;
};

class RunsView : public QWidget {
  Q_OBJECT

 public:
  explicit RunsView(QWidget* parent = nullptr);

  // The store to read (nullptr: none open). Not owned.
  void set_store(RunStore* store);
  // Re-reads the runs (after a run lands, or a filter changes). Throws what the store throws.
  void refresh();
  void select_experiment(qint64 experiment_id);  // 0: all
  qint64 selected_experiment() const;

  std::vector<int64_t> selected_ids() const;
  void select_ids(const std::vector<int64_t>& ids);
  // Deletes the runs; asks first unless `confirmed`. Returns whether they were deleted; a refusal
  // (a run still training, a read-only database) is reported through errorOccurred.
  bool delete_runs(const std::vector<int64_t>& ids, bool confirmed);
  // CSV through core's exporter, of `ids` (empty: every run the table shows, by its filters);
  // returns how many runs were written. Throws InvalidInput when the file cannot be written.
  int export_runs_csv(const QString& path, const std::vector<int64_t>& ids) const;
  int export_steps_csv(const QString& path, const std::vector<int64_t>& ids) const;
  // Makes the run visible: when the filters hide it, they change to its experiment, any status.
  void reveal(int64_t run_id);

  // Writes the selected runs (all shown when none is selected) or their steps to `path`; says what
  // was written where through exported(), or why not through errorOccurred().
  bool export_to(const QString& path, bool steps);
  // "the 2 selected runs" or "all 14 runs shown": what an export writes.
  QString export_scope() const;

  int row_count() const;
  std::vector<int64_t> shown_ids() const;  // in id order
  QTableView* table() const { return table_; }
  // The advisor's findings for the one selected run, beside the table.
  AdvicePanel* advice_panel() const { return advice_; }

 public slots:
  // Asks for a file and writes the selected runs (all shown when none is selected) or their steps;
  // the dialog's title names the scope and exported() says what was written where.
  void ask_and_export(bool steps);

 signals:
  void compareRequested(const QList<qint64>& ids);
  void experimentChanged(qint64 experiment_id);
  void runsDeleted(const QList<qint64>& ids);
  void errorOccurred(const QString& message);
  void exported(const QString& message);

 private:
  // The status filter's choices and the table's model, sorting and sizing.
  void set_up_filters_and_table();

  RunStore* store_ = nullptr;
  QComboBox* experiment_;
  QComboBox* status_;
  QTableView* table_;
  RunsTableModel* model_;
  QSortFilterProxyModel* sorted_;
  // Runs `action`, turning any error into errorOccurred: a slot must never let one escape.
  template <typename Action>
  bool reporting_errors(Action&& action);
  RunFilter export_filter(const std::vector<int64_t>& ids) const;

  QPushButton* compare_;
  QPushButton* delete_;
  AdvicePanel* advice_;
};

}  // namespace rematlab::ui
