#include "experiment_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QThread>
#include <QVBoxLayout>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "model/model_config.h"
#include "runtime/runtime_info.h"
#include "sweep/sweep_spec.h"
#include "train/run_config.h"

namespace rematlab::ui {
namespace {

constexpr const char* kErrorStyle = "border: 1px solid #b00020;";

QSpinBox* spin(int minimum, int maximum, int value) {
  auto* box = new QSpinBox;
  box->setRange(minimum, maximum);
  box->setValue(value);
  return box;
}

// "a; b; c" → ["a", "b", "c"]; blank entries are dropped.
QStringList split_list(const QLineEdit* field, QChar separator) {
  QStringList items;
  for (const QString& item : field->text().split(separator)) {
    if (!item.trimmed().isEmpty()) items << item.trimmed();
  }
  return items;
}

}  // namespace

ExperimentPanel::ExperimentPanel(QWidget* parent) : QWidget(parent) {
  create_model_fields();
  create_training_fields();
  create_sweep_fields();
  create_actions();
  lay_out();
  connect_fields();
  apply_preset(preset_->currentText());
}

void ExperimentPanel::create_model_fields() {
  preset_ = new QComboBox;
  for (const auto& name : preset_names()) preset_->addItem(QString::fromStdString(name));
  layers_ = spin(1, 512, 2);
  d_model_ = spin(8, 16384, 64);
  heads_ = spin(1, 256, 4);
  arch_ = new QComboBox;
  arch_->addItem("gpt", "gpt");
  arch_->addItem("llama", "llama");
  arch_->setToolTip(
      "gpt: LayerNorm, GELU MLP, learned positions, biases.\n"
      "llama: RMSNorm, SwiGLU MLP, rotary positions, grouped-query attention, "
      "no biases.");
  kv_heads_ = spin(0, 256, 0);
  kv_heads_->setSpecialValueText("as many as heads");
  kv_heads_->setToolTip(
      "Key/value heads, each shared by heads/kv-heads query heads "
      "(grouped-query attention)");
  mlp_hidden_ = spin(0, 1000000, 0);
  mlp_hidden_->setSpecialValueText("the family's rule");
  mlp_hidden_->setToolTip("MLP inner width: 4·d_model for gpt, ⅔ of that (SwiGLU) for llama");
  tie_head_ = new QCheckBox("Output head is the token embedding");
  loss_chunks_ = new QLineEdit("0");
  loss_chunks_->setToolTip(
      "The head and loss in N slices of the tokens, each recomputed in "
      "backward, so the full logits never exist at once (0: whole; auto: "
      "vocabulary / 4·d_model)");
  seq_len_ = spin(2, 32768, 64);
  vocab_ = spin(2, 1000000, 256);
  attention_ = new QComboBox;
  attention_->addItems({"sdpa", "math"});
  attention_->setToolTip(
      "sdpa: LibTorch's fused attention. math: explicit QKᵀ-softmax-V, which "
      "keeps the s×s scores for backward.");
  dropout_ = new QDoubleSpinBox;
  dropout_->setRange(0.0, 0.95);
  dropout_->setSingleStep(0.05);
}

void ExperimentPanel::create_training_fields() {
  data_ = new QComboBox;
  data_->addItem("synthetic (Markov chain)", "synthetic");
  data_->addItem("synthetic (copy task)", "synthetic:copy");
  data_->addItem("text file", "text");
  data_file_ = new QLineEdit;
  data_file_->setPlaceholderText("a UTF-8 text file, read as bytes");
  data_file_->setEnabled(false);
  browse_ = new QPushButton("…");
  browse_->setEnabled(false);
  accum_ = spin(1, 4096, 1);
  accum_->setObjectName("accum");
  steps_ = spin(1, 10000000, 100);
  lr_ = new QDoubleSpinBox;
  lr_->setDecimals(6);
  lr_->setRange(1e-6, 1.0);
  lr_->setSingleStep(1e-4);
  lr_->setValue(1e-3);
  seed_ = spin(0, 2147483647, 0);
  threads_ = spin(0, 1024, QThread::idealThreadCount());
  threads_->setSpecialValueText("LibTorch default");
  threads_->setObjectName("threads");
  device_ = new QComboBox;
  device_->addItem("cpu");
  const RuntimeInfo runtime = probe_runtime(/*measure_matmul=*/false);
  for (int i = 0; i < runtime.cuda_devices; ++i) device_->addItem(QString("cuda:%1").arg(i));
}

void ExperimentPanel::create_sweep_fields() {
  name_ = new QLineEdit("workbench");
  name_->setToolTip("The experiment every run of this sweep is recorded under");
  policies_ = new QLineEdit("none");
  policies_->setToolTip(
      "Checkpoint policies to sweep, separated by ';' (POLICY+OFFLOAD adds an offload to one)\n"
      "none: keep every activation\n"
      "every:K: recompute segments of K blocks\n"
      "sublayer:A,F: a checkpoint before every A-th attention and every F-th MLP\n"
      "selective: recompute only the attention core (QKᵀ, softmax, ·V)\n"
      "schedule:P=K,…: every:K by training progress, e.g. schedule:0=2,0.5=5");
  offload_ = new QLineEdit("none");
  offload_->setToolTip(
      "Offload modes to sweep, separated by ',': none, disk, disk:DIR, host "
      "(CUDA). Offload needs a checkpoint policy; none+offload is skipped.");
  batch_ = new QLineEdit("8");
  batch_->setToolTip("Micro-batch sizes to sweep, separated by ','");
  precision_ = new QLineEdit("fp32");
  precision_->setToolTip("Precisions to sweep, separated by ',': fp32, bf16, fp16 (CUDA)");
  budget_ = new QLineEdit;
  budget_->setPlaceholderText("none (e.g. 512MiB)");
  budget_->setToolTip("A step whose peak memory is above the budget ends its run as oom");
  max_batch_ = new QCheckBox("Max batch under budget");
  max_batch_->setToolTip(
      "Instead of the batch sizes: find, for each combination, the largest "
      "batch whose step fits the budget (doubling, then bisection)");
  max_batch_limit_ = spin(1, 65536, 256);
  max_batch_limit_->setPrefix("up to ");
}

void ExperimentPanel::create_actions() {
  preview_ = new QLabel;
  preview_->setWordWrap(true);
  preview_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  runs_label_ = new QLabel;
  problem_label_ = new QLabel;
  problem_label_->setWordWrap(true);
  problem_label_->setStyleSheet("color: #b00020;");
  run_ = new QPushButton("Run");
  stop_ = new QPushButton("Stop");
  stop_->setEnabled(false);
  check_ = new QPushButton("Check gradients");
  check_->setToolTip(
      "One step under the first policy and under none, same seed and batch: are "
      "the gradients bit-identical?");
}

void ExperimentPanel::lay_out() {
  auto* model = new QFormLayout;
  model->addRow("Preset", preset_);
  model->addRow("Family", arch_);
  model->addRow("Blocks", layers_);
  model->addRow("d_model", d_model_);
  model->addRow("Heads", heads_);
  model->addRow("KV heads", kv_heads_);
  model->addRow("MLP width", mlp_hidden_);
  model->addRow("", tie_head_);
  model->addRow("Loss slices", loss_chunks_);
  model->addRow("Sequence", seq_len_);
  model->addRow("Vocabulary", vocab_);
  model->addRow("Attention", attention_);
  model->addRow("Dropout", dropout_);
  auto* data_row = new QHBoxLayout;
  data_row->addWidget(data_file_);
  data_row->addWidget(browse_);
  auto* training = new QFormLayout;
  training->addRow("Data", data_);
  training->addRow("Text file", data_row);
  training->addRow("Accumulation", accum_);
  training->addRow("Steps", steps_);
  training->addRow("Learning rate", lr_);
  training->addRow("Seed", seed_);
  training->addRow("Threads", threads_);
  training->addRow("Device", device_);
  auto* sweep = new QFormLayout;
  sweep->addRow("Experiment", name_);
  sweep->addRow("Policies", policies_);
  sweep->addRow("Segments", preview_);
  sweep->addRow("Offload", offload_);
  sweep->addRow("Micro-batch", batch_);
  sweep->addRow("Precision", precision_);
  sweep->addRow("Budget", budget_);
  auto* search_row = new QHBoxLayout;
  search_row->addWidget(max_batch_);
  search_row->addWidget(max_batch_limit_);
  sweep->addRow(search_row);

  auto group = [](const QString& title, QLayout* layout) {
    auto* box = new QGroupBox(title);
    box->setLayout(layout);
    return box;
  };
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_);
  buttons->addWidget(stop_);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(group("Model", model));
  layout->addWidget(group("Training", training));
  layout->addWidget(group("Sweep", sweep));
  layout->addWidget(runs_label_);
  layout->addWidget(problem_label_);
  layout->addLayout(buttons);
  layout->addWidget(check_);
  layout->addStretch();
}

void ExperimentPanel::connect_fields() {
  connect(preset_, &QComboBox::currentTextChanged, this, &ExperimentPanel::apply_preset);
  connect(arch_, &QComboBox::currentTextChanged, this, &ExperimentPanel::revalidate);
  connect(tie_head_, &QCheckBox::toggled, this, &ExperimentPanel::revalidate);
  connect(loss_chunks_, &QLineEdit::textChanged, this, &ExperimentPanel::revalidate);
  for (auto* box : {layers_, d_model_, heads_, kv_heads_, mlp_hidden_, seq_len_, vocab_, accum_,
                    steps_, seed_, threads_, max_batch_limit_}) {
    connect(box, &QSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
  }
  for (auto* box : {dropout_, lr_}) {
    connect(box, &QDoubleSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
  }
  for (auto* combo : {attention_, device_, data_}) {
    connect(combo, &QComboBox::currentTextChanged, this, &ExperimentPanel::revalidate);
  }
  for (auto* edit : {name_, policies_, offload_, batch_, precision_, budget_, data_file_}) {
    connect(edit, &QLineEdit::textChanged, this, &ExperimentPanel::revalidate);
  }
  connect(max_batch_, &QCheckBox::toggled, this, &ExperimentPanel::revalidate);
  connect(browse_, &QPushButton::clicked, this, [this] {
    const QString file = QFileDialog::getOpenFileName(this, "Training text");
    if (!file.isEmpty()) data_file_->setText(file);
  });
  connect(run_, &QPushButton::clicked, this, &ExperimentPanel::request_run);
  connect(stop_, &QPushButton::clicked, this, &ExperimentPanel::stopRequested);
  connect(check_, &QPushButton::clicked, this, [this] {
    if (auto config = first_config()) emit checkRequested(*config);
  });
}

void ExperimentPanel::set_read_only_reason(const QString& reason) {
  read_only_reason_ = reason;
  revalidate();
}

void ExperimentPanel::request_run() {
  if (running_ || !read_only_reason_.isEmpty()) return;
  if (auto json = spec()) emit sweepRequested(QString::fromStdString(json->dump()));
}

void ExperimentPanel::load_spec(const nlohmann::ordered_json& spec) {
  const auto base = spec.value("base", nlohmann::ordered_json::object());
  const auto axes = spec.value("axes", nlohmann::ordered_json::object());
  if (base.contains("preset")) preset_->setCurrentText(QString::fromStdString(base["preset"]));
  const std::pair<const char*, QSpinBox*> numbers[] = {
      {"layers", layers_},     {"d_model", d_model_},       {"heads", heads_},
      {"kv_heads", kv_heads_}, {"mlp_hidden", mlp_hidden_}, {"seq_len", seq_len_},
      {"vocab", vocab_},       {"accum", accum_},           {"steps", steps_},
      {"seed", seed_},         {"threads", threads_}};
  for (const auto& [key, box] : numbers) {
    if (base.contains(key) && base[key].is_number_integer()) box->setValue(base[key].get<int>());
  }
  if (base.contains("dropout")) dropout_->setValue(base["dropout"].get<double>());
  if (base.contains("arch") && base["arch"].is_string()) {
    arch_->setCurrentText(QString::fromStdString(base["arch"].get<std::string>()));
  }
  if (base.contains("tie_head") && base["tie_head"].is_boolean()) {
    tie_head_->setChecked(base["tie_head"].get<bool>());
  }
  if (base.contains("loss_chunks")) {
    const auto& chunks = base["loss_chunks"];
    loss_chunks_->setText(
        QString::fromStdString(chunks.is_string() ? chunks.get<std::string>() : chunks.dump()));
  }
  if (base.contains("lr")) lr_->setValue(base["lr"].get<double>());
  // Each axis field shows the axis, or the base's single value, or its default.
  auto list = [&](const char* key, const char* separator, const std::string& fallback) {
    const auto& values = axes.contains(key)   ? axes[key]
                         : base.contains(key) ? nlohmann::ordered_json::array({base[key]})
                                              : nlohmann::ordered_json::array({fallback});
    QStringList items;
    for (const auto& value : values) {
      items << QString::fromStdString(value.is_string() ? value.get<std::string>() : value.dump());
    }
    return items.join(separator);
  };
  policies_->setText(list("checkpoint", "; ", "none"));
  offload_->setText(list("offload", ", ", "none"));
  precision_->setText(list("precision", ", ", "fp32"));
  batch_->setText(list("batch", ", ", "8"));
  const bool search = spec.contains("max_batch");
  max_batch_->setChecked(search);
  if (search) {
    const auto& max_batch = spec["max_batch"];
    const auto& budget = max_batch["budget"];
    budget_->setText(
        QString::fromStdString(budget.is_string() ? budget.get<std::string>() : budget.dump()));
    if (max_batch.contains("limit")) max_batch_limit_->setValue(max_batch["limit"].get<int>());
  } else {
    const auto budget = base.value("budget", nlohmann::ordered_json());
    budget_->setText(budget.is_string()   ? QString::fromStdString(budget.get<std::string>())
                     : budget.is_number() ? QString::fromStdString(budget.dump())
                                          : QString());
  }
  if (spec.contains("name")) name_->setText(QString::fromStdString(spec["name"]));
  revalidate();
}

QString ExperimentPanel::experiment_name() const { return name_->text(); }
void ExperimentPanel::set_experiment_name(const QString& name) { name_->setText(name); }

void ExperimentPanel::apply_preset(const QString& name) {
  const ModelConfig model = model_preset(name.toStdString());
  {
    const QSignalBlocker arch_blocker(arch_);
    const QSignalBlocker tie_blocker(tie_head_);
    arch_->setCurrentText(QString::fromStdString(to_string(model.family)));
    tie_head_->setChecked(model.tie_head);
  }
  for (auto [box, value] : {std::pair{layers_, model.layers},
                            {d_model_, model.d_model},
                            {heads_, model.heads},
                            {kv_heads_, model.kv_heads},
                            {mlp_hidden_, model.mlp_hidden},
                            {seq_len_, model.seq_len},
                            {vocab_, model.vocab}}) {
    const QSignalBlocker blocker(box);
    box->setValue(static_cast<int>(value));
  }
  revalidate();
}

nlohmann::ordered_json ExperimentPanel::build_spec() const {
  nlohmann::ordered_json base = {
      {"preset", preset_->currentText().toStdString()},
      {"arch", arch_->currentText().toStdString()},
      {"layers", layers_->value()},
      {"d_model", d_model_->value()},
      {"heads", heads_->value()},
      {"kv_heads", kv_heads_->value()},
      {"mlp_hidden", mlp_hidden_->value()},
      {"tie_head", tie_head_->isChecked()},
      {"loss_chunks", loss_chunks_->text().trimmed().toStdString()},
      {"seq_len", seq_len_->value()},
      {"vocab", vocab_->value()},
      {"attention", attention_->currentText().toStdString()},
      {"dropout", dropout_->value()},
      {"accum", accum_->value()},
      {"steps", steps_->value()},
      {"lr", lr_->value()},
      {"seed", seed_->value()},
      {"threads", threads_->value()},
      {"device", device_->currentText().toStdString()},
      {"timeline", true},  // the live view shows the last step's memory by phase
  };
  const QString source = data_->currentData().toString();
  base["data"] = source == "text" ? "text:" + data_file_->text().trimmed().toStdString()
                                  : source.toStdString();
  if (!budget_->text().trimmed().isEmpty())
    base["budget"] = budget_->text().trimmed().toStdString();

  nlohmann::ordered_json axes = nlohmann::ordered_json::object();
  // One value goes to the base, several make an axis.
  auto add = [&](const char* key, const nlohmann::ordered_json& values, const char* field) {
    if (values.empty()) throw InvalidInput(field, "give at least one value");
    if (values.size() == 1) {
      base[key] = values[0];
    } else {
      axes[key] = values;
    }
  };
  nlohmann::ordered_json policies = nlohmann::ordered_json::array();
  for (const QString& p : split_list(policies_, ';')) policies.push_back(p.toStdString());
  add("checkpoint", policies, "spec: axes.checkpoint");
  nlohmann::ordered_json offloads = nlohmann::ordered_json::array();
  for (const QString& o : split_list(offload_, ',')) offloads.push_back(o.toStdString());
  add("offload", offloads, "spec: axes.offload");
  nlohmann::ordered_json precisions = nlohmann::ordered_json::array();
  for (const QString& p : split_list(precision_, ',')) precisions.push_back(p.toStdString());
  add("precision", precisions, "spec: axes.precision");
  nlohmann::ordered_json batches = nlohmann::ordered_json::array();
  for (const QString& b : split_list(batch_, ',')) {
    bool ok = false;
    const qlonglong value = b.toLongLong(&ok);
    if (!ok)
      throw InvalidInput("spec: axes.batch", "'" + b.toStdString() + "' is not a whole number");
    batches.push_back(value);
  }
  if (!max_batch_->isChecked()) add("batch", batches, "spec: axes.batch");

  nlohmann::ordered_json spec = {{"name", name_->text().trimmed().toStdString()}, {"base", base}};
  if (!axes.empty()) spec["axes"] = axes;
  if (max_batch_->isChecked()) {
    if (budget_->text().trimmed().isEmpty()) {
      throw InvalidInput("spec: max_batch.budget", "the max-batch search needs a budget");
    }
    spec["max_batch"] = {{"budget", budget_->text().trimmed().toStdString()},
                         {"limit", max_batch_limit_->value()}};
  }
  return spec;
}

std::optional<nlohmann::ordered_json> ExperimentPanel::spec() const {
  try {
    nlohmann::ordered_json json = build_spec();
    parse_sweep_spec(json);
    return json;
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}

std::optional<RunConfig> ExperimentPanel::first_config() const {
  try {
    return expand_sweep(parse_sweep_spec(build_spec())).front().config;
  } catch (const InvalidInput&) {
    return std::nullopt;
  }
}

QWidget* ExperimentPanel::field_for(const std::string& error_field) const {
  const std::pair<const char*, QWidget*> fields[] = {
      {"max_batch", budget_},    {"checkpoint", policies_},
      {"offload", offload_},     {"batch", batch_},
      {"precision", precision_}, {"budget", budget_},
      {"kv_heads", kv_heads_},   {"loss_chunks", loss_chunks_},
      {"arch", arch_},           {"heads", heads_},
      {"d_model", d_model_},     {"data", data_file_},
      {"dropout", dropout_},     {"name", name_},
  };
  for (const auto& [key, widget] : fields) {
    if (error_field.find(key) != std::string::npos) return widget;
  }
  return nullptr;
}

void ExperimentPanel::revalidate() {
  const bool text_data = data_->currentData().toString() == "text";
  data_file_->setEnabled(text_data);
  browse_->setEnabled(text_data);
  batch_->setEnabled(!max_batch_->isChecked());
  max_batch_limit_->setEnabled(max_batch_->isChecked());

  problem_.clear();
  QWidget* bad_field = nullptr;
  QStringList preview;
  for (const QString& policy : split_list(policies_, ';')) {
    try {
      const std::string text = split_policy_and_offload(policy.toStdString()).checkpoint;
      const auto plan = CheckpointPolicy::parse(text).plan_for(layers_->value(), 0.0);
      preview << policy + ": " + QString::fromStdString(plan.describe());
    } catch (const InvalidInput&) {
      preview << policy + ": —";
    }
  }
  preview_->setText(preview.join("\n"));
  try {
    std::vector<std::string> skipped;
    const auto points = expand_sweep(parse_sweep_spec(build_spec()), &skipped);
    QString runs = QString("%1 run%2").arg(points.size()).arg(points.size() == 1 ? "" : "s");
    if (!skipped.empty())
      runs += QString(" (%1 combination(s) of none with offload left out)").arg(skipped.size());
    runs_label_->setText(runs);
  } catch (const InvalidInput& error) {
    problem_ = QString::fromStdString(error.what());
    bad_field = field_for(error.field());
    runs_label_->clear();
  }
  for (QWidget* field : std::initializer_list<QWidget*>{
           policies_, offload_, batch_, precision_, budget_, heads_, kv_heads_, loss_chunks_, arch_,
           d_model_, data_file_, dropout_, name_}) {
    field->setStyleSheet(field == bad_field ? kErrorStyle : "");
  }
  problem_label_->setText(problem_);
  const bool can_record = read_only_reason_.isEmpty();
  run_->setEnabled(problem_.isEmpty() && !running_ && can_record);
  check_->setEnabled(problem_.isEmpty() && !running_);
  run_->setToolTip(!can_record          ? "Cannot run: " + read_only_reason_
                   : problem_.isEmpty() ? "Start the sweep (Ctrl+R)"
                                        : "Cannot run: " + problem_);
}

void ExperimentPanel::set_running(bool running) {
  running_ = running;
  stop_->setEnabled(running);
  revalidate();
}

}  // namespace rematlab::ui
