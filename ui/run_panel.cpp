#include "run_panel.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QThread>
#include <QVBoxLayout>

#include "checkpoint/checkpoint_policy.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "model/model_config.h"

namespace rematlab::ui {
namespace {

QSpinBox* spin(int minimum, int maximum, int value) {
  auto* box = new QSpinBox;
  box->setRange(minimum, maximum);
  box->setValue(value);
  return box;
}

}  // namespace

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
  preset_ = new QComboBox;
  for (const auto& name : preset_names()) preset_->addItem(QString::fromStdString(name));
  layers_ = spin(1, 512, 2);
  d_model_ = spin(8, 16384, 64);
  heads_ = spin(1, 256, 4);
  seq_len_ = spin(2, 32768, 64);
  attention_ = new QComboBox;
  attention_->addItems({"sdpa", "math"});
  attention_->setToolTip("sdpa: LibTorch's fused attention. math: explicit QKᵀ-softmax-V, which "
                         "keeps the s×s scores for backward.");
  dropout_ = new QDoubleSpinBox;
  dropout_->setRange(0.0, 0.95);
  dropout_->setSingleStep(0.05);
  batch_ = spin(1, 65536, 8);
  accum_ = spin(1, 4096, 1);
  steps_ = spin(1, 10000000, 100);
  precision_ = new QComboBox;
  precision_->addItems({"fp32", "bf16"});
  threads_ = spin(0, 1024, QThread::idealThreadCount());
  threads_->setSpecialValueText("LibTorch default");
  checkpoint_ = new QLineEdit("none");
  checkpoint_->setToolTip(
      "none: keep every activation\n"
      "every:K: recompute segments of K blocks\n"
      "sublayer:A,F: a checkpoint before every A-th attention and every F-th MLP\n"
      "selective: recompute only the attention core (QKᵀ, softmax, ·V)\n"
      "schedule:P=K,…: every:K by training progress, e.g. schedule:0=2,0.5=5");
  budget_ = new QLineEdit;
  budget_->setPlaceholderText("none (e.g. 512MiB)");
  preview_ = new QLabel;
  preview_->setWordWrap(true);
  preview_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  problem_label_ = new QLabel;
  problem_label_->setWordWrap(true);
  problem_label_->setStyleSheet("color: #b00020;");
  run_ = new QPushButton("Run");
  stop_ = new QPushButton("Stop");
  stop_->setEnabled(false);
  check_ = new QPushButton("Check gradients");
  check_->setToolTip("One step under this policy and under none, same seed and batch: are the "
                     "gradients bit-identical?");

  auto* form = new QFormLayout;
  form->addRow("Preset", preset_);
  form->addRow("Blocks", layers_);
  form->addRow("d_model", d_model_);
  form->addRow("Heads", heads_);
  form->addRow("Sequence", seq_len_);
  form->addRow("Attention", attention_);
  form->addRow("Dropout", dropout_);
  form->addRow("Micro-batch", batch_);
  form->addRow("Accumulation", accum_);
  form->addRow("Steps", steps_);
  form->addRow("Precision", precision_);
  form->addRow("Threads", threads_);
  form->addRow("Checkpoint", checkpoint_);
  form->addRow("Segments", preview_);
  form->addRow("Budget", budget_);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_);
  buttons->addWidget(stop_);
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(form);
  layout->addWidget(problem_label_);
  layout->addLayout(buttons);
  layout->addWidget(check_);
  layout->addStretch();

  connect(preset_, &QComboBox::currentTextChanged, this, &RunPanel::apply_preset);
  for (auto* box : {layers_, d_model_, heads_, seq_len_, batch_, accum_, steps_, threads_}) {
    connect(box, &QSpinBox::valueChanged, this, &RunPanel::revalidate);
  }
  connect(dropout_, &QDoubleSpinBox::valueChanged, this, &RunPanel::revalidate);
  for (auto* combo : {attention_, precision_}) {
    connect(combo, &QComboBox::currentTextChanged, this, &RunPanel::revalidate);
  }
  for (auto* edit : {checkpoint_, budget_}) {
    connect(edit, &QLineEdit::textChanged, this, &RunPanel::revalidate);
  }
  connect(run_, &QPushButton::clicked, this, [this] {
    if (auto config = this->config()) emit runRequested(*config);
  });
  connect(stop_, &QPushButton::clicked, this, &RunPanel::stopRequested);
  connect(check_, &QPushButton::clicked, this, [this] {
    if (auto config = this->config()) emit checkRequested(*config);
  });
  apply_preset(preset_->currentText());
}

void RunPanel::apply_preset(const QString& name) {
  const ModelConfig model = model_preset(name.toStdString());
  for (auto [box, value] : {std::pair{layers_, model.layers}, {d_model_, model.d_model},
                            {heads_, model.heads}, {seq_len_, model.seq_len}}) {
    const QSignalBlocker blocker(box);
    box->setValue(static_cast<int>(value));
  }
  revalidate();
}

std::optional<RunConfig> RunPanel::config() const {
  RunConfig config;
  config.preset = preset_->currentText().toStdString();
  config.model = model_preset(config.preset);
  config.model.layers = layers_->value();
  config.model.d_model = d_model_->value();
  config.model.heads = heads_->value();
  config.model.seq_len = seq_len_->value();
  config.model.dropout = dropout_->value();
  config.model.attention = parse_attention(attention_->currentText().toStdString());
  config.batch = batch_->value();
  config.accum = accum_->value();
  config.steps = steps_->value();
  config.precision = parse_precision(precision_->currentText().toStdString());
  config.threads = threads_->value();
  config.checkpoint = checkpoint_->text().trimmed().toStdString();
  try {
    const QString budget = budget_->text().trimmed();
    if (!budget.isEmpty()) config.budget_bytes = parse_byte_size(budget.toStdString(), "Budget");
    validate(config);
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
  return config;
}

void RunPanel::revalidate() {
  problem_.clear();
  QLineEdit* bad_field = nullptr;
  try {
    const auto plan = CheckpointPolicy::parse(checkpoint_->text().trimmed().toStdString())
                          .plan_for(layers_->value(), 0.0);
    preview_->setText(QString::fromStdString(plan.describe()));
  } catch (const InvalidInput& error) {
    preview_->setText("—");
    problem_ = QString::fromStdString(error.what());
    bad_field = checkpoint_;
  }
  if (problem_.isEmpty()) {
    try {
      RunConfig probe;
      probe.model.d_model = d_model_->value();
      probe.model.heads = heads_->value();
      validate(probe.model);
      const QString budget = budget_->text().trimmed();
      if (!budget.isEmpty()) parse_byte_size(budget.toStdString(), "Budget");
    } catch (const InvalidInput& error) {
      problem_ = QString::fromStdString(error.what());
      if (error.field() == "Budget") bad_field = budget_;
    }
  }
  for (auto* edit : {checkpoint_, budget_}) {
    edit->setStyleSheet(edit == bad_field ? "border: 1px solid #b00020;" : "");
  }
  problem_label_->setText(problem_);
  run_->setEnabled(problem_.isEmpty() && !running_);
  check_->setEnabled(problem_.isEmpty() && !running_);
  run_->setToolTip(problem_.isEmpty() ? "Start the run" : "Cannot run: " + problem_);
}

void RunPanel::set_running(bool running) {
  running_ = running;
  stop_->setEnabled(running);
  revalidate();
}

}  // namespace rematlab::ui
