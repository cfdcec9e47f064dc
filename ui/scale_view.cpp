#include "scale_view.h"

#include <qcustomplot.h>

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QThread>
#include <QToolTip>

#include "advice_words.h"
#include "chart_style.h"
#include "common/errors.h"
#include "estimate/architecture.h"
#include "estimate/fine_tuning.h"
#include "layout/gpu_catalog.h"
#include "layout/layout_export.h"
#include "layout/layout_rules.h"
#include "memory_bar.h"
#include "units.h"

namespace rematlab::ui {
namespace {

const char* const kExports[] = {"Megatron-LM", "torchtitan", "DeepSpeed", "RematLab run"};

QSpinBox* spin(int minimum, int maximum, int value, const QString& tip) {
  auto* box = new QSpinBox;
  box->setRange(minimum, maximum);
  box->setValue(value);
  box->setToolTip(tip);
  return box;
}

// A bad field as the tab's labels name it ("GPUs: 12 GPUs are not whole nodes of 8").
QString said_by_field(const InvalidInput& error) {
  static const std::pair<const char*, const char*> kFieldLabels[] = {
      {"--gpus", "GPUs"},
      {"--gpus-per-node", "Per node"},
      {"--seq-len", "Sequence"},
      {"--global-batch", "Global batch"},
      {"--host-memory", "Host GiB"},
      {"--base-precision", "Train"},
      {"--finetune", "Train"},
      {"--bucket-size", "Buckets"}};
  for (const auto& [flag, label] : kFieldLabels) {
    if (error.field() == flag) return QString(label) + ": " + in_form_words(error.reason_words());
  }
  return QString::fromStdString(error.what());
}

}  // namespace

ScaleView::ScaleView(QWidget* parent)
    : QWidget(parent),
      model_(new QComboBox),
      gpu_(new QComboBox),
      gpus_(spin(1, 1 << 16, 64, "GPUs in all")),
      per_node_(spin(1, 64, 8, "GPUs per node (tensor parallelism stays inside one)")),
      seq_len_(spin(16, 1 << 20, 4096, "Tokens per sequence")),
      global_batch_(spin(1, 1 << 20, 1024, "Sequences per optimizer step")),
      host_gib_(spin(1, 1 << 20, 2048, "Host memory per node, GiB (what offloading may use)")),
      precision_(new QComboBox),
      train_(new QComboBox),
      buckets_(new QLineEdit),
      runnable_here_(new QCheckBox("Only what RematLab runs")),
      balanced_split_(new QCheckBox("Balance the stages")),
      plan_button_(new QPushButton("Plan")),
      status_(new QLabel),
      chart_(make_chart("Layouts: tokens/s against memory per GPU", "memory per GPU (GiB)",
                        "tokens/s")),
      grid_(new QTableWidget),
      bar_(new MemoryBar),
      list_(new QTableWidget),
      export_choice_(new QComboBox),
      export_text_(new QPlainTextEdit),
      copy_(new QPushButton("Copy")),
      save_(new QPushButton("Save…")),
      try_(new QPushButton("Try it here")) {
  for (const auto& name : estimate::architecture_names()) {
    model_->addItem(QString::fromStdString(name));
  }
  model_->setCurrentText("llama2-70b");
  for (const auto& kind : layout::gpu_catalog()) {
    gpu_->addItem(QString::fromStdString(kind.name));
    gpu_->setItemData(gpu_->count() - 1, QString::fromStdString(kind.description), Qt::ToolTipRole);
  }
  gpu_->setCurrentText("a100-80gb");
  // A GPU kind comes in its usual server: its GPUs per node and host memory, which the user
  // may still change.
  auto follow_gpu = [this] {
    const layout::GpuKind& kind = layout::gpu_kind(gpu_->currentText().toStdString());
    per_node_->setValue(static_cast<int>(kind.gpus_per_node));
    host_gib_->setValue(static_cast<int>(kind.host_memory_bytes >> 30));
  };
  follow_gpu();
  connect(gpu_, &QComboBox::currentTextChanged, this, follow_gpu);
  precision_->addItems({"bf16", "fp32"});
  // Fine-tuning as `layout --finetune lora` plans it, with run's default adapters (rank 16 on
  // every projection); the base in the precision each item names.
  train_->addItem("full");
  for (const char* base : {"fp32", "bf16", "int8", "nf4"}) {
    train_->addItem(QString("LoRA %1").arg(base), QString(base));
  }
  train_->setToolTip(
      "Train every parameter, or rank-16 LoRA adapters on every projection of a frozen base "
      "stored in fp32, bf16, int8 or nf4 (one tensor rank, no sharded base)");
  for (const char* name : kExports) export_choice_->addItem(name);
  build();
  connect(plan_button_, &QPushButton::clicked, this, &ScaleView::plan);
  connect(list_, &QTableWidget::currentCellChanged, this,
          [this](int row, int, int, int) { choose(row); });
  connect(export_choice_, &QComboBox::currentIndexChanged, this, &ScaleView::show_export);
  connect(copy_, &QPushButton::clicked, this,
          [this] { QApplication::clipboard()->setText(export_body_); });
  connect(save_, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, "Save the layout as");
    if (!path.isEmpty()) save_export(path);
  });
  connect(try_, &QPushButton::clicked, this, &ScaleView::try_here);
  connect(chart_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
    const QString text = describe_point_at(event->position());
    if (text.isEmpty()) {
      QToolTip::hideText();
    } else {
      QToolTip::showText(event->globalPosition().toPoint(), text, chart_);
    }
  });
  show_answer();
}

QGridLayout* ScaleView::build_fields() {
  auto* fields = new QGridLayout;
  const std::pair<const char*, QWidget*> rows[] = {
      {"Model", model_},       {"GPU", gpu_},
      {"GPUs", gpus_},         {"Per node", per_node_},
      {"Sequence", seq_len_},  {"Global batch", global_batch_},
      {"Host GiB", host_gib_}, {"Precision", precision_},
      {"Train", train_}};
  // Three fields a row: the tab must fit beside the form on a 1024-pixel screen.
  int index = 0;
  for (const auto& [label, field] : rows) {
    fields->addWidget(new QLabel(label), index / 3, (index % 3) * 2);
    fields->addWidget(field, index / 3, (index % 3) * 2 + 1);
    ++index;
  }
  // The buckets share the checkbox's row under the fields: the tab no taller for them.
  buckets_->setPlaceholderText("40M values");
  buckets_->setToolTip(
      "The data ranks' gradient buckets, in bytes of the planned gradients (16-bit; fp32 under "
      "fp32), e.g. 100MB: how many collectives reduce them, and what sharded gradients hold "
      "whole at once. Empty: 40M values, Megatron-LM's default. Exports and Try it here give "
      "the same values");
  fields->addWidget(new QLabel("Buckets"), 3, 0);
  fields->addWidget(buckets_, 3, 1);
  // The two boxes side by side over the other columns, so neither widens a column of fields.
  auto* boxes = new QHBoxLayout;
  boxes->addWidget(runnable_here_);
  boxes->addWidget(balanced_split_);
  boxes->addStretch(1);
  fields->addLayout(boxes, 3, 2, 1, 4);
  balanced_split_->setToolTip(
      "Split each pipeline's blocks by their predicted times, a heavy head's stage holding "
      "fewer (layout --pp-split balanced); unchecked: the middle stages equal and the rest at "
      "the ends. Try it here then has the form balance its own model's stages by measured "
      "times");
  runnable_here_->setToolTip(
      "Search only layouts RematLab's engine runs: no context parallelism, a pipeline "
      "without sharded parameters or offload, model states on the GPUs");
  fields->addWidget(plan_button_, 0, 6, 4, 1);
  plan_button_->setToolTip("Evaluate every layout of these GPUs for this model and batch");
  return fields;
}

void ScaleView::build() {
  QGridLayout* fields = build_fields();
  status_->setWordWrap(true);

  grid_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  // Room for "TP 8" even before a search fills the grid (the corner button gets a width too).
  grid_->verticalHeader()->setMinimumWidth(grid_->fontMetrics().horizontalAdvance("TP 16") + 12);
  grid_->setToolTip(
      "Fastest fitting layout's tokens/s for each tensor (rows; a mixture of experts: "
      "expert degrees, then tensor degrees) × pipeline (columns) degree; — where none fits");
  list_->setColumnCount(6);
  list_->setHorizontalHeaderLabels(
      {"layout", "checkpoint", "GiB per GPU", "tokens/s", "MFU %", "fits / lacks"});
  list_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  list_->setSelectionBehavior(QAbstractItemView::SelectRows);
  list_->setSelectionMode(QAbstractItemView::SingleSelection);
  list_->horizontalHeader()->setStretchLastSection(true);
  list_->verticalHeader()->hide();
  export_text_->setReadOnly(true);
  export_text_->setLineWrapMode(QPlainTextEdit::WidgetWidth);
  try_->setToolTip("Give the form this layout's degrees, sharding and policy (on its own model)");

  auto* right = new QSplitter(Qt::Vertical);
  right->addWidget(grid_);
  right->addWidget(bar_);
  right->setChildrenCollapsible(false);
  right->setStretchFactor(0, 1);  // the grid takes what the bar does not need
  right->setStretchFactor(1, 0);
  grid_->setMinimumHeight(90);
  auto* charts = new QSplitter;
  charts->setChildrenCollapsible(false);
  charts->addWidget(chart_);
  charts->addWidget(right);
  charts->setStretchFactor(0, 3);
  charts->setStretchFactor(1, 2);

  auto* export_row = new QHBoxLayout;
  export_row->addWidget(new QLabel("Export as"));
  export_row->addWidget(export_choice_);
  export_row->addWidget(copy_);
  export_row->addWidget(save_);
  export_row->addStretch(1);
  export_row->addWidget(try_);
  auto* bottom = new QWidget;
  auto* bottom_layout = new QVBoxLayout(bottom);
  bottom_layout->setContentsMargins(0, 0, 0, 0);
  bottom_layout->addWidget(list_, 1);
  bottom_layout->addLayout(export_row);
  bottom_layout->addWidget(export_text_, 1);
  auto* split = new QSplitter(Qt::Vertical);
  split->setChildrenCollapsible(false);
  split->addWidget(charts);
  split->addWidget(bottom);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);

  auto* layout = new QVBoxLayout(this);
  layout->addLayout(fields);
  layout->addWidget(status_);
  layout->addWidget(split, 1);
}

layout::LayoutRequest ScaleView::read_request() const {
  layout::LayoutRequest request;
  request.arch = estimate::architecture_preset(model_->currentText().toStdString());
  request.arch.seq_len = seq_len_->value();
  request.cluster.gpu = layout::gpu_kind(gpu_->currentText().toStdString());
  request.cluster.gpus = gpus_->value();
  request.cluster.gpus_per_node = per_node_->value();
  request.cluster.host_memory_bytes = static_cast<int64_t>(host_gib_->value()) << 30;
  request.global_batch = global_batch_->value();
  request.precision = precision_->currentText() == "fp32" ? Precision::kFp32 : Precision::kBf16;
  const QString buckets = buckets_->text().trimmed();
  if (!buckets.isEmpty()) request.set_bucket_size(buckets.toStdString());  // after the precision
  const QString base = train_->currentData().toString();
  if (!base.isEmpty()) {
    request.arch.lora = default_lora_options(estimate::to_model_config(request.arch).family);
    request.arch.lora.base = parse_base_precision(base.toStdString());
  }
  request.top = 10;
  request.engine_only = runnable_here_->isChecked();
  request.fixed.pp_split_balanced = balanced_split_->isChecked();
  estimate::validate(request.arch);
  layout::validate(request);
  return request;
}

bool ScaleView::plan() {
  if (search_) return false;  // one search at a time: Plan is disabled meanwhile
  layout::LayoutRequest request;
  try {
    request = read_request();
  } catch (const InvalidInput& error) {
    request_.reset();
    answer_.reset();
    show_answer();
    status_->setText(said_by_field(error));
    return false;
  }
  // The search takes from milliseconds to tens of seconds (a million GPUs): off the window's
  // thread, which shows its answer when it ends.
  struct Outcome {
    std::optional<layout::LayoutAnswer> answer;
    QString error;
  };
  auto outcome = std::make_shared<Outcome>();
  search_ = QThread::create([request, outcome, cancel = cancel_search_] {
    try {
      outcome->answer = layout::search_layouts(request, cancel.get());
    } catch (const layout::SearchCancelled&) {
      // The view is going: nothing to show.
    } catch (const std::exception& error) {
      outcome->error = QString::fromStdString(error.what());
    }
  });
  connect(search_, &QThread::finished, this, [this, request, outcome] {
    search_->deleteLater();
    search_ = nullptr;
    plan_button_->setEnabled(true);
    request_.reset();
    answer_ = std::move(outcome->answer);
    if (answer_) request_ = request;
    show_answer();
    if (!answer_) status_->setText(outcome->error);
    emit searchFinished(answer_.has_value());
  });
  plan_button_->setEnabled(false);
  status_->setText("Searching every layout…");
  search_->start();
  return true;
}

ScaleView::~ScaleView() {
  if (!search_) return;
  cancel_search_->store(true);
  search_->wait();  // stops at its next layout: its answer has nowhere to go
  delete search_;
}

QString ScaleView::status() const { return status_->text(); }

void ScaleView::show_answer() {
  listed_.clear();
  if (answer_) listed_ = answer_->best.empty() ? answer_->nearest : answer_->best;
  if (!answer_) {
    status_->setText("Choose a model, GPUs and a batch, then Plan.");
  } else {
    int64_t fitting = 0;
    for (const auto& point : answer_->points) fitting += point.fits ? 1 : 0;
    QString text = QString("%1 layouts evaluated, %2 fit (%3 s).")
                       .arg(answer_->points.size())
                       .arg(fitting)
                       .arg(answer_->search_s, 0, 'f', 2);
    if (answer_->best.empty()) text += " Nothing fits: the nearest are listed with what they lack.";
    if (answer_->best.empty() && !answer_->with_more_host.empty()) {
      const auto& more = answer_->with_more_host.front();
      text += QString(" With %1 GiB of host memory per node, %2 would fit (%3 tokens/s).")
                  .arg(gib(more.host_bytes * request_->cluster.node_gpus()))
                  .arg(QString::fromStdString(layout::layout_name(more.layout)))
                  .arg(more.tokens_per_s, 0, 'f', 0);
    }
    status_->setText(text);
  }
  fill_list();
  draw_frontier();
  fill_grid();
  chosen_row_ = listed_.empty() ? -1 : 0;
  if (chosen_row_ == 0) list_->selectRow(0);
  draw_memory_bar();
  show_export();
}

void ScaleView::fill_list() {
  list_->setRowCount(static_cast<int>(listed_.size()));
  for (int row = 0; row < static_cast<int>(listed_.size()); ++row) {
    const auto& each = listed_[static_cast<size_t>(row)];
    const QString cells[] = {QString::fromStdString(layout::layout_name(each.layout)),
                             QString::fromStdString(each.layout.checkpoint_text()),
                             gib(each.memory.total()),
                             QString::number(each.tokens_per_s, 'f', 0),
                             QString::number(100.0 * each.mfu, 'f', 1),
                             each.fits ? "fits" : QString::fromStdString(each.reason)};
    for (int column = 0; column < 6; ++column) {
      auto* item = new QTableWidgetItem(cells[column]);
      item->setToolTip(cells[column]);
      list_->setItem(row, column, item);
    }
  }
  list_->resizeColumnsToContents();
}

const layout::LayoutEvaluation* ScaleView::chosen() const {
  if (chosen_row_ < 0 || chosen_row_ >= static_cast<int>(listed_.size())) return nullptr;
  return &listed_[static_cast<size_t>(chosen_row_)];
}

void ScaleView::choose(int row) {
  if (row == chosen_row_) return;
  chosen_row_ = row;
  if (row >= 0 && list_->currentRow() != row) list_->selectRow(row);
  draw_memory_bar();
  show_export();
}

QString ScaleView::export_text() const { return export_text_->toPlainText(); }

void ScaleView::show_export() {
  const layout::LayoutEvaluation* layout = chosen();
  const bool have = layout != nullptr && request_.has_value();
  copy_->setEnabled(have);
  save_->setEnabled(have);
  if (!have) {
    export_text_->clear();
    export_body_.clear();
    try_->setEnabled(false);
    return;
  }
  layout::LayoutExport out;
  switch (export_choice_->currentIndex()) {
    case 1:
      out = layout::torchtitan_toml(*request_, *layout);
      break;
    case 2:
      out = layout::deepspeed_json(*request_, *layout);
      break;
    case 3:
      out = layout::rematlab_run(*request_, *layout);
      break;
    default:
      out = layout::megatron_arguments(*request_, *layout);
  }
  // Copy and Save take the export alone (a JSON file must parse); the notes are shown under it.
  export_body_ = QString::fromStdString(out.text);
  QString text = export_body_;
  for (const auto& unsaid : out.unsaid) {
    text +=
        QString(text.isEmpty() ? "" : "\n") + "# no equivalent: " + QString::fromStdString(unsaid);
  }
  export_text_->setPlainText(text);
  copy_->setEnabled(!export_body_.isEmpty());  // nothing to give where the tool has no equivalent
  save_->setEnabled(!export_body_.isEmpty());
  // The form has no expert ranks (`run --ep` does): an EP layout the engine runs is run from
  // its export.
  const bool engine_runs = layout->fits && layout->engine_lacks.empty();
  const bool experts = layout->layout.ep > 1;
  try_->setEnabled(engine_runs && !experts);
  try_->setToolTip(!engine_runs ? "RematLab's engine cannot run this layout yet"
                   : experts    ? "The form has no expert ranks yet: run RematLab's export (--ep)"
                             : "Give the form this layout's degrees, sharding and policy (on its "
                               "own model)");
}

bool ScaleView::save_export(const QString& path) {
  QSaveFile file(path);  // whole or not at all
  if (!file.open(QIODevice::WriteOnly) || file.write(export_body_.toUtf8()) < 0 || !file.commit()) {
    status_->setText("Could not save " + path + ": " + file.errorString());
    return false;
  }
  status_->setText("Saved the " + export_choice_->currentText() + " export to " + path);
  return true;
}

void ScaleView::try_here() {
  const layout::LayoutEvaluation* layout = chosen();
  if (!layout || !layout->engine_lacks.empty() || layout->layout.ep > 1) return;
  TrialLayout trial;
  trial.ranks = static_cast<int>(layout->layout.tp * layout->layout.pp * layout->layout.dp);
  trial.tensor_ranks = static_cast<int>(layout->layout.tp);
  trial.sequence_parallel = layout->layout.sp;
  trial.pipeline_stages = static_cast<int>(layout->layout.pp);
  trial.virtual_stages = static_cast<int>(layout->layout.vp);
  trial.accum = static_cast<int>(layout->layout.accum);
  trial.shard = QString::fromStdString(to_string(layout::engine_shard(layout->layout)));
  std::vector<std::string> unsaid;  // a policy per stage is RematLab's own (stages:…)
  trial.policy = QString::fromStdString(layout::rematlab_policy(layout->layout, unsaid));
  // The engine balances under one policy for every stage, not a list of them.
  trial.balanced_split = request_->fixed.pp_split_balanced && trial.policy.indexOf("stages:") != 0;
  trial.offload_host = layout->layout.offload == layout::Offload::kActivations;
  if (layout->layout.dp > 1) trial.bucket_bytes = request_->engine_bucket_bytes();
  emit tryRequested(trial);
}

}  // namespace rematlab::ui
