#include "runs_view.h"

#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

#include "common/byte_size.h"
#include "common/errors.h"
#include "store/csv_export.h"

namespace rematlab::ui {
namespace {

enum Column {
  kId, kExperiment, kName, kStatus, kCheckpoint, kOffload, kBatch, kPrecision, kSteps, kPeak,
  kPeakActivation, kTokensPerS, kFinalLoss, kStarted, kColumns
};

const char* const kHeaders[kColumns] = {"id",        "experiment", "name",      "status",
                                        "checkpoint", "offload",   "batch",     "precision",
                                        "steps",      "peak",      "peak act",  "tokens/s",
                                        "final loss", "started"};

const char* const kStatuses[] = {"running", "ok",          "oom",   "cancelled",
                                 "diverged", "interrupted", "failed"};

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
                           role != Qt::TextAlignmentRole)) {
    return {};
  }
  const RunRecord& run = runs_.at(static_cast<std::size_t>(index.row()));
  const auto& c = run.config;
  const auto& s = run.summary;
  auto text = [](const nlohmann::json& object, const char* key) {
    return QString::fromStdString(object.is_object() ? object.value(key, std::string()) : "");
  };
  auto number = [](const nlohmann::json& object, const char* key) -> QVariant {
    if (!object.is_object() || !object.contains(key) || !object.at(key).is_number()) return {};
    return object.at(key).get<double>();
  };
  const int column = index.column();
  const bool numeric = column == kId || column == kBatch || column == kSteps || column == kPeak ||
                       column == kPeakActivation || column == kTokensPerS || column == kFinalLoss;
  if (role == Qt::TextAlignmentRole) {
    return numeric ? QVariant(Qt::AlignRight | Qt::AlignVCenter) : QVariant();
  }
  // UserRole: the value to sort by (numbers as numbers).
  switch (column) {
    case kId: return static_cast<qlonglong>(run.id);
    case kExperiment: return QString::fromStdString(run.experiment);
    case kName: return QString::fromStdString(run.name);
    case kStatus: return QString::fromStdString(run.status);
    case kCheckpoint: return text(c, "checkpoint");
    case kOffload: return text(c, "offload");
    case kBatch: return number(c, "batch").isValid() ? QVariant(static_cast<qlonglong>(c.value("batch", int64_t{0}))) : QVariant();
    case kPrecision: return text(c, "precision");
    case kSteps: return static_cast<qlonglong>(run.steps_recorded);
    case kPeak:
    case kPeakActivation: {
      const QVariant bytes = number(s, column == kPeak ? "peak_bytes" : "peak_activation_bytes");
      if (role == Qt::UserRole || !bytes.isValid()) return bytes;
      return QString::fromStdString(format_bytes(static_cast<int64_t>(bytes.toDouble())));
    }
    case kTokensPerS: {
      const QVariant rate = number(s, "tokens_per_s");
      return role == Qt::UserRole || !rate.isValid() ? rate : QString::number(rate.toDouble(), 'f', 0);
    }
    case kFinalLoss: {
      const QVariant loss = number(s, "final_loss");
      return role == Qt::UserRole || !loss.isValid() ? loss : QString::number(loss.toDouble(), 'f', 4);
    }
    case kStarted: return QString::fromStdString(run.started);
    default: return {};
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
      delete_(new QPushButton("Delete selected…")) {
  status_->addItem("any status", QString());
  for (const char* status : kStatuses) status_->addItem(status, QString(status));
  sorted_->setSourceModel(model_);
  sorted_->setSortRole(Qt::UserRole);
  table_->setModel(sorted_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(kId, Qt::AscendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->verticalHeader()->hide();
  auto* export_runs = new QPushButton("Export runs CSV…");
  auto* export_steps = new QPushButton("Export steps CSV…");
  export_steps->setToolTip("Every step of the selected runs (all runs shown when none is selected)");
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
  layout->addWidget(table_, 1);
  layout->addLayout(actions);

  connect(refresh_button, &QPushButton::clicked, this, &RunsView::refresh);
  connect(status_, &QComboBox::currentIndexChanged, this, &RunsView::refresh);
  connect(experiment_, &QComboBox::activated, this, [this] {
    refresh();
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

void RunsView::set_store(RunStore* store) {
  store_ = store;
  refresh();
}

void RunsView::refresh() {
  const qint64 experiment = selected_experiment();
  {
    const QSignalBlocker blocker(experiment_);
    experiment_->clear();
    experiment_->addItem("all experiments", qint64{0});
    if (store_) {
      for (const ExperimentRecord& record : store_->experiments()) {
        experiment_->addItem(QString("%1 · %2 (%3 runs)")
                                 .arg(record.id)
                                 .arg(QString::fromStdString(record.name))
                                 .arg(record.runs),
                             static_cast<qint64>(record.id));
      }
    }
    const int index = experiment_->findData(experiment);
    experiment_->setCurrentIndex(index < 0 ? 0 : index);
  }
  const std::vector<int64_t> selection = selected_ids();
  RunFilter filter;
  if (selected_experiment() > 0) filter.experiment_id = selected_experiment();
  filter.status = status_->currentData().toString().toStdString();
  model_->set_runs(store_ ? store_->runs(filter) : std::vector<RunRecord>{});
  select_ids(selection);
}

void RunsView::select_experiment(qint64 experiment_id) {
  const int index = experiment_->findData(experiment_id);
  experiment_->setCurrentIndex(index < 0 ? 0 : index);
  refresh();
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
    table_->selectionModel()->select(index, QItemSelectionModel::Select | QItemSelectionModel::Rows);
  }
}

bool RunsView::delete_runs(const std::vector<int64_t>& ids, bool confirmed) {
  if (!store_ || ids.empty()) return false;
  if (!confirmed) {
    const auto answer = QMessageBox::question(
        this, "Delete runs",
        QString("Delete %1 run(s) with all their steps? This cannot be undone.").arg(ids.size()));
    if (answer != QMessageBox::Yes) return false;
  }
  store_->delete_runs(ids);
  refresh();
  return true;
}

void RunsView::export_runs_csv(const QString& path, const std::vector<int64_t>& ids) const {
  RunFilter filter;
  filter.ids = ids;
  if (ids.empty() && selected_experiment() > 0) filter.experiment_id = selected_experiment();
  write_file_atomically(path.toStdString(), runs_csv(store_->runs(filter)));
}

void RunsView::export_steps_csv(const QString& path, const std::vector<int64_t>& ids) const {
  RunFilter filter;
  filter.ids = ids;
  if (ids.empty() && selected_experiment() > 0) filter.experiment_id = selected_experiment();
  write_file_atomically(path.toStdString(), steps_csv(*store_, store_->runs(filter)));
}

void RunsView::ask_and_export(bool steps) {
  if (!store_) return;
  const QString path = QFileDialog::getSaveFileName(
      this, steps ? "Export steps" : "Export runs", steps ? "steps.csv" : "runs.csv", "CSV (*.csv)");
  if (path.isEmpty()) return;
  try {
    steps ? export_steps_csv(path, selected_ids()) : export_runs_csv(path, selected_ids());
  } catch (const std::exception& error) {
    QMessageBox::warning(this, "Export", QString::fromStdString(error.what()));
  }
}

int RunsView::row_count() const { return model_->rowCount(); }

std::vector<int64_t> RunsView::shown_ids() const {
  std::vector<int64_t> ids;
  for (int row = 0; row < model_->rowCount(); ++row) ids.push_back(model_->run_at(row).id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace rematlab::ui
