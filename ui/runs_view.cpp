#include "runs_view.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "advice_panel.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "elided_label.h"
#include "run/run_fields.h"
#include "store/csv_export.h"

namespace rematlab::ui {
namespace {

// What a user compares first comes first, so that a laptop's width shows it without scrolling
// sideways: which run, how it ended and why, and what it measured; then how it was set up.
enum Column {
  kId,
  kStatus,
  kName,
  kCheckpoint,
  kBatch,
  kPeak,
  kTokensPerS,
  kFinalLoss,
  kReason,
  kPeakActivation,
  kExperiment,
  kModel,
  kOffload,
  kPrecision,
  kSteps,
  kStarted,
  kColumns
};

const char* const kHeaders[kColumns] = {"id",      "status",    "name",       "checkpoint",
                                        "batch",   "peak",      "tokens/s",   "final loss",
                                        "reason",  "peak act",  "experiment", "model",
                                        "offload", "precision", "steps",      "started"};

// Columns whose text can be long are cut at this width (the whole text is in the tooltip).
constexpr int kLongColumnWidth = 200;

// "small (12×256, seq 256)": the preset and the shape it was trained with.
QString count_text(int64_t count, const char* one, const char* many) {
  return QString("%1 %2").arg(count).arg(count == 1 ? one : many);
}

// A row's tooltip: a cell cut to its column's width has its whole text (`cell`) here, then why
// the run ended so, then the recorded settings this build could not read.
QVariant run_tooltip(const RunRecord& run, const QString& cell) {
  QStringList lines;
  if (!cell.isEmpty()) lines << cell;
  if (!run.message.empty()) lines << QString::fromStdString(run.message);
  if (!run.unread_config_fields.empty()) {
    // Bounded and cut (unread_fields_text): a hand-edited record can name anything.
    lines << RunsTableModel::tr(
                 "Recorded with settings not known to this version (a newer RematLab or a hand "
                 "edit); this one could not read %1 and shows the default instead.")
                 .arg(QString::fromStdString(unread_fields_text(run.unread_config_fields)));
  }
  if (lines.isEmpty()) return {};
  return plain_tooltip(lines.join("\n"));
}

}  // namespace

void RunsTableModel::set_runs(std::vector<RunRecord> runs) {
  beginResetModel();
  runs_ = std::move(runs);
  endResetModel();
}

int RunsTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}

int RunsTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumns;
}

QVariant RunsTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || (role != Qt::DisplayRole && role != Qt::UserRole &&
                           role != Qt::TextAlignmentRole && role != Qt::ToolTipRole)) {
    return {};
  }
  const RunRecord& run = runs_.at(static_cast<std::size_t>(index.row()));
  const int column = index.column();
  if (role == Qt::ToolTipRole) {
    const bool long_text = column == kName || column == kExperiment || column == kModel;
    return run_tooltip(run, long_text ? data(index, Qt::DisplayRole).toString() : QString());
  }
  const bool numeric = column == kId || column == kBatch || column == kSteps || column == kPeak ||
                       column == kPeakActivation || column == kTokensPerS || column == kFinalLoss;
  if (role == Qt::TextAlignmentRole) {
    return numeric ? QVariant(Qt::AlignRight | Qt::AlignVCenter) : QVariant();
  }
  // Only what was measured is shown: a run that never trained has blanks, not zeros.
  const bool has = run.has_result && run.result.steps_completed > 0;
  // UserRole: the value to sort by (numbers as numbers).
  switch (column) {
    case kId:
      return static_cast<qlonglong>(run.id);
    case kExperiment:
      return QString::fromStdString(run.experiment);
    case kName:
      return QString::fromStdString(run.name);
    case kStatus:
      return QString::fromStdString(to_string(run.status));
    case kModel:
      return QString::fromStdString(describe_model(run.config));
    case kCheckpoint:
      return QString::fromStdString(run.config.checkpoint);
    case kOffload:
      return QString::fromStdString(run.config.offload);
    case kBatch:
      return run.config.batch > 0 ? QVariant(static_cast<qlonglong>(run.config.batch)) : QVariant();
    case kPrecision:
      return QString::fromStdString(to_string(run.config.precision));
    case kSteps:
      return static_cast<qlonglong>(run.steps_recorded);
    case kPeak:
    case kPeakActivation: {
      if (!has) return {};
      const int64_t bytes =
          column == kPeak ? run.result.peak_bytes : run.result.peak_activation_bytes;
      if (role == Qt::UserRole) return static_cast<qlonglong>(bytes);
      return QString::fromStdString(format_bytes(bytes));
    }
    case kTokensPerS:
      if (!has) return {};
      return role == Qt::UserRole ? QVariant(run.result.tokens_per_s)
                                  : QString::number(run.result.tokens_per_s, 'f', 0);
    case kFinalLoss:
      if (!has) return {};
      return role == Qt::UserRole ? QVariant(run.result.final_loss)
                                  : QString::number(run.result.final_loss, 'f', 4);
    case kStarted:
      return QString::fromStdString(run.started);
    case kReason:  // why it is not ok (oom, cancelled, failed …); blank for an ok run
      return QString::fromStdString(run.message);
    default:
      return {};
  }
}

QVariant RunsTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole || section >= kColumns) return {};
  return kHeaders[section];
}

RunsView::RunsView(QWidget* parent)
    : QWidget(parent),
      experiment_(new QComboBox),
      status_(new QComboBox),
      table_(new QTableView),
      model_(new RunsTableModel(this)),
      sorted_(new QSortFilterProxyModel(this)),
      compare_(new QPushButton("Compare selected")),
      delete_(new QPushButton("Delete selected…")),
      advice_(new AdvicePanel) {
  set_up_filters_and_table();
  auto* export_runs = new QPushButton("Export runs CSV…");
  export_runs->setToolTip("The selected runs, or every run shown when none is selected");
  auto* export_steps = new QPushButton("Export steps CSV…");
  export_steps->setToolTip(
      "Every step of the selected runs, or of every run shown when none is selected");
  auto* refresh_button = new QPushButton("Refresh");

  auto* filters = new QHBoxLayout;
  filters->addWidget(new QLabel("Experiment"));
  filters->addWidget(experiment_, 1);
  filters->addWidget(new QLabel("Status"));
  filters->addWidget(status_);
  filters->addWidget(refresh_button);
  auto* actions = new QHBoxLayout;
  actions->addWidget(compare_);
  actions->addWidget(delete_);
  actions->addStretch();
  actions->addWidget(export_runs);
  actions->addWidget(export_steps);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(filters);
  // The table takes the tab's whole width (its columns are what the tab is for), the advisor
  // the room under it, which the splitter lets the user change.
  auto* splitter = new QSplitter(Qt::Vertical);
  splitter->addWidget(table_);
  splitter->addWidget(advice_);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  splitter->setChildrenCollapsible(false);
  layout->addWidget(splitter, 1);
  layout->addLayout(actions);
  // One selected run: its findings; none or several: the panel waits for one.
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
    const std::vector<int64_t> ids = selected_ids();
    const qint64 id = ids.size() == 1 ? ids.front() : 0;
    if (id != advice_->run_id()) advice_->show_run(id);
  });

  auto refresh_reporting = [this] { reporting_errors([this] { refresh(); }); };
  connect(refresh_button, &QPushButton::clicked, this, refresh_reporting);
  connect(status_, &QComboBox::currentIndexChanged, this, refresh_reporting);
  connect(experiment_, &QComboBox::activated, this, [this, refresh_reporting] {
    refresh_reporting();
    emit experimentChanged(selected_experiment());
  });
  connect(compare_, &QPushButton::clicked, this, [this] {
    QList<qint64> ids;
    for (int64_t id : selected_ids()) ids << id;
    if (!ids.isEmpty()) emit compareRequested(ids);
  });
  connect(delete_, &QPushButton::clicked, this, [this] { delete_runs(selected_ids(), false); });
  connect(export_runs, &QPushButton::clicked, this, [this] { ask_and_export(false); });
  connect(export_steps, &QPushButton::clicked, this, [this] { ask_and_export(true); });
}

void RunsView::set_up_filters_and_table() {
  // A long experiment name must not widen the window: the list is as wide as the row allows.
  experiment_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  experiment_->setMinimumContentsLength(12);
  status_->addItem("any status", QString());
  for (RunStatus status : all_run_statuses()) {
    const QString name = QString::fromStdString(to_string(status));
    status_->addItem(name, name);
  }
  sorted_->setSourceModel(model_);
  sorted_->setSortRole(Qt::UserRole);
  table_->setModel(sorted_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(kId, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  // Every column as wide as its contents each time the runs are read (the long ones cut, whole
  // in the tooltip); the user may drag them in between; the last takes what is left.
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setTextElideMode(Qt::ElideRight);
  table_->verticalHeader()->hide();
  // Rows as tall as a line of text: a laptop's height shows more runs.
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 8);
}

template <typename Action>
bool RunsView::reporting_errors(Action&& action) {
  try {
    action();
    return true;
  } catch (const InvalidInput& error) {
    emit errorOccurred(QString::fromStdString(error.reason()));
  } catch (const std::exception& error) {
    emit errorOccurred(QString::fromStdString(error.what()));
  }
  return false;
}

void RunsView::set_store(RunStore* store) {
  store_ = store;
  advice_->set_database(store_ ? QString::fromStdString(store_->path()) : QString());
  const bool writable = store_ && !store_->read_only();
  delete_->setEnabled(writable);
  delete_->setToolTip(writable ? "Delete the selected runs with all their steps"
                               : "The database is write-protected: runs cannot be deleted");
  reporting_errors([this] { refresh(); });
}

void RunsView::refresh() {
  const qint64 experiment = selected_experiment();
  {
    const QSignalBlocker blocker(experiment_);
    experiment_->clear();
    experiment_->addItem("all experiments", qint64{0});
    if (store_) {
      for (const ExperimentRecord& record : store_->experiments()) {
        const QString text = QString("%1 · %2 (%3)")
                                 .arg(record.id)
                                 .arg(QString::fromStdString(record.name))
                                 .arg(count_text(record.runs, "run", "runs"));
        experiment_->addItem(text, static_cast<qint64>(record.id));
        // Whole in the tooltip: the field may be narrower than a long name.
        experiment_->setItemData(experiment_->count() - 1, text, Qt::ToolTipRole);
      }
    }
    const int index = experiment_->findData(experiment);
    experiment_->setCurrentIndex(index < 0 ? 0 : index);
  }
  const std::vector<int64_t> selection = selected_ids();
  RunFilter filter;
  if (selected_experiment() > 0) filter.experiment_id = selected_experiment();
  filter.status = parse_run_status(status_->currentData().toString().toStdString());
  model_->set_runs(store_ ? store_->runs(filter) : std::vector<RunRecord>{});
  table_->resizeColumnsToContents();
  for (int column : {kName, kReason, kExperiment, kModel}) {
    if (table_->horizontalHeader()->sectionSize(column) > kLongColumnWidth)
      table_->horizontalHeader()->resizeSection(column, kLongColumnWidth);
  }
  select_ids(selection);
  // A model reset clears the selection without a signal: the advisor follows what is selected
  // now, not a run that was deleted or filtered away.
  const std::vector<int64_t> selected = selected_ids();
  const qint64 shown = selected.size() == 1 ? selected.front() : 0;
  if (shown != advice_->run_id()) advice_->show_run(shown);
}

void RunsView::reveal(int64_t run_id) {
  if (!store_) return;
  const auto shown = shown_ids();
  if (std::find(shown.begin(), shown.end(), run_id) != shown.end()) return;
  reporting_errors([&] {
    const RunRecord run = store_->run(run_id);
    {
      const QSignalBlocker blocker(status_);
      status_->setCurrentIndex(0);  // any status
    }
    select_experiment(run.experiment_id.value_or(0));
    emit experimentChanged(selected_experiment());
  });
}

void RunsView::select_experiment(qint64 experiment_id) {
  const int index = experiment_->findData(experiment_id);
  experiment_->setCurrentIndex(index < 0 ? 0 : index);
  reporting_errors([this] { refresh(); });
}

qint64 RunsView::selected_experiment() const {
  return experiment_->count() ? experiment_->currentData().toLongLong() : 0;
}

std::vector<int64_t> RunsView::selected_ids() const {
  std::vector<int64_t> ids;
  if (!table_->selectionModel()) return ids;
  for (const QModelIndex& row : table_->selectionModel()->selectedRows()) {
    ids.push_back(model_->run_at(sorted_->mapToSource(row).row()).id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

void RunsView::select_ids(const std::vector<int64_t>& ids) {
  table_->clearSelection();
  for (int row = 0; row < model_->rowCount(); ++row) {
    if (std::find(ids.begin(), ids.end(), model_->run_at(row).id) == ids.end()) continue;
    const QModelIndex index = sorted_->mapFromSource(model_->index(row, 0));
    table_->selectionModel()->select(index,
                                     QItemSelectionModel::Select | QItemSelectionModel::Rows);
  }
}

bool RunsView::delete_runs(const std::vector<int64_t>& ids, bool confirmed) {
  if (!store_ || ids.empty()) return false;
  if (!confirmed) {
    // No is the default: Enter on a dialog that appeared unexpectedly must not delete anything.
    const auto answer =
        QMessageBox::question(this, "Delete runs",
                              QString("Delete %1 with all their steps? This cannot be undone.")
                                  .arg(count_text(static_cast<int64_t>(ids.size()), "run", "runs")),
                              QMessageBox::Yes | QMessageBox::No, QMessageBox::No);
    if (answer != QMessageBox::Yes) return false;
  }
  if (!reporting_errors([&] { store_->delete_runs(ids); })) return false;
  QList<qint64> deleted;
  for (int64_t id : ids) deleted << id;
  emit runsDeleted(deleted);
  reporting_errors([this] { refresh(); });
  return true;
}

RunFilter RunsView::export_filter(const std::vector<int64_t>& ids) const {
  RunFilter filter;
  filter.ids = ids;
  if (ids.empty()) {  // everything shown: the same filters as the table
    if (selected_experiment() > 0) filter.experiment_id = selected_experiment();
    filter.status = parse_run_status(status_->currentData().toString().toStdString());
  }
  return filter;
}

int RunsView::export_runs_csv(const QString& path, const std::vector<int64_t>& ids) const {
  const std::vector<RunRecord> runs = store_->runs(export_filter(ids));
  write_file_atomically(path.toStdString(), runs_csv(runs));
  return static_cast<int>(runs.size());
}

int RunsView::export_steps_csv(const QString& path, const std::vector<int64_t>& ids) const {
  const std::vector<RunRecord> runs = store_->runs(export_filter(ids));
  write_file_atomically(path.toStdString(), steps_csv(*store_, runs));
  return static_cast<int>(runs.size());
}

QString RunsView::export_scope() const {
  const std::size_t selected = selected_ids().size();
  return selected == 0
             ? QString("all %1 shown").arg(count_text(row_count(), "run", "runs"))
             : QString("the %1 selected %2").arg(selected).arg(selected == 1 ? "run" : "runs");
}

void RunsView::ask_and_export(bool steps) {
  if (!store_) return;
  // The scope is in the dialog's title and in the confirmation: never a silent subset.
  const QString path = QFileDialog::getSaveFileName(
      this, "Export " + QString(steps ? "the steps of " : "") + export_scope(),
      steps ? "steps.csv" : "runs.csv", "CSV (*.csv)");
  if (!path.isEmpty()) export_to(path, steps);
}

bool RunsView::export_to(const QString& path, bool steps) {
  if (!store_) return false;
  const std::vector<int64_t> selected = selected_ids();
  try {
    const int written = steps ? export_steps_csv(path, selected) : export_runs_csv(path, selected);
    emit exported(QString("Wrote %1%2 (%3) to %4")
                      .arg(steps ? "the steps of " : "")
                      .arg(count_text(written, "run", "runs"))
                      .arg(selected.empty() ? "all shown" : "the selected ones")
                      .arg(QDir::toNativeSeparators(path)));
    return true;
  } catch (const InvalidInput& error) {
    emit errorOccurred("Could not export: " + QString::fromStdString(error.reason()));
  } catch (const std::exception& error) {
    emit errorOccurred("Could not export: " + QString::fromStdString(error.what()));
  }
  return false;
}

int RunsView::row_count() const { return model_->rowCount(); }

std::vector<int64_t> RunsView::shown_ids() const {
  std::vector<int64_t> ids;
  for (int row = 0; row < model_->rowCount(); ++row) ids.push_back(model_->run_at(row).id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace rematlab::ui
