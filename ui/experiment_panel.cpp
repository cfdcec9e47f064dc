#include "experiment_panel.h"

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QStyle>
#include <QThread>
#include <QVBoxLayout>

#include "checkpoint/checkpoint_policy.h"
#include "common/errors.h"
#include "field_errors.h"
#include "model/model_config.h"
#include "run/run_config.h"
#include "runtime/runtime_info.h"
#include "sweep/sweep_spec.h"
#include "wheel_guard.h"

namespace rematlab::ui {
namespace {

QSpinBox* spin(int minimum, int maximum, int value) {
  auto* box = new QSpinBox;
  box->setRange(minimum, maximum);
  box->setValue(value);
  return box;
}

}  // namespace

ExperimentPanel::ExperimentPanel(QWidget* parent) : QWidget(parent) {
  create_model_fields();
  create_finetune_fields();
  create_training_fields();
  create_sweep_fields();
  create_actions();
  lay_out();
  connect_fields();
  apply_preset(preset_->currentText());
}

void ExperimentPanel::create_model_fields() {
  open_model_config_ = new QPushButton("Open config.json…");
  open_model_config_->setObjectName("open_model_config");
  open_model_config_->setToolTip(
      "A Hugging Face model configuration (llama, mistral, qwen2, qwen3, gpt2) as the model's "
      "shape");
  model_source_ = new QLabel;
  model_source_->setObjectName("model_source");
  model_source_->setWordWrap(true);
  model_source_->hide();  // until a configuration is opened
  model_source_->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Minimum);
  preset_ = new QComboBox;
  // As wide as a usual name; a longer one (mistral-7b-v0.3) is elided rather than widening the
  // form (its list shows every name whole).
  preset_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  preset_->setMinimumContentsLength(11);
  for (const auto& name : preset_names()) preset_->addItem(QString::fromStdString(name));
  layers_ = spin(1, 512, 2);
  d_model_ = spin(8, 16384, 64);
  heads_ = spin(1, 256, 4);
  heads_->setObjectName("heads");
  d_model_->setObjectName("d_model");
  layers_->setObjectName("layers");
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
  tie_head_ = new QCheckBox("Tied output head");
  tie_head_->setToolTip("The output head is the token embedding (weight tying)");
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
  create_attention_fields();
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
  data_file_->setToolTip("A UTF-8 text file, read as bytes (Data: text file)");
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
  // "cuda": the current GPU for one process; for several ranks, cuda:LOCAL_RANK each.
  if (runtime.cuda_devices > 0) device_->addItem("cuda");
  for (int i = 0; i < runtime.cuda_devices; ++i) device_->addItem(QString("cuda:%1").arg(i));
  create_rank_fields();
}

// How the ranks split the run: data, tensor and pipeline parallelism, and what they shard.
void ExperimentPanel::create_rank_fields() {
  ranks_ = spin(1, 4096, 1);
  ranks_->setObjectName("ranks");
  ranks_->setToolTip(
      "Ranks on this host, one process each: every rank (every group of Tensor ranks) trains "
      "its own micro-batch and the gradients are averaged (1: one process). Several ranks "
      "train one run, and the live view shows each rank's memory.");
  tensor_ranks_ = spin(1, 4096, 1);
  tensor_ranks_->setObjectName("tp");
  tensor_ranks_->setToolTip(
      "Tensor parallelism: of the ranks, how many split every layer of one model between them "
      "(attention heads, MLP width, vocabulary); Ranks must be a multiple (1: none)");
  sequence_parallel_ = new QCheckBox("Sequence parallel");
  sequence_parallel_->setObjectName("sequence_parallel");
  sequence_parallel_->setToolTip(
      "With tensor ranks: the activations between the layers (residual stream, norms) split "
      "along the sequence too");
  pipeline_stages_ = spin(1, 4096, 1);
  pipeline_stages_->setObjectName("pp");
  pipeline_stages_->setToolTip(
      "Pipeline parallelism: of the ranks, how many run a share of the blocks each, one after "
      "another, the step's micro-batches (Accumulation, at least one a stage) passing through "
      "them in 1F1B order; Ranks a multiple of it, each pipeline of them a data rank (1: none)");
  virtual_stages_ = spin(1, 512, 1);  // at most one chunk a block
  virtual_stages_->setObjectName("virtual_stages");
  virtual_stages_->setToolTip(
      "Pipeline parallelism: model chunks per stage, run in the interleaved 1F1B order: a "
      "smaller bubble for more sends and a little more memory on the first stage "
      "(Accumulation a multiple of the stages; 1: plain 1F1B)");
  pipeline_split_ = new QLineEdit;
  pipeline_split_->setObjectName("pp_split");
  pipeline_split_->setPlaceholderText("the rule's");
  pipeline_split_->setToolTip(
      "Pipeline parallelism: the blocks of each stage (with virtual stages, of each chunk in "
      "chain order), e.g. 8,4; balanced: chosen when the run starts from the blocks' measured "
      "times; empty: the middle stages equal and the rest at the ends");
  shard_ = new QComboBox;
  shard_->addItems({"none", "optimizer", "gradients", "parameters"});
  shard_->setToolTip(
      "What the ranks split between them instead of each holding it whole (with tensor "
      "ranks, the ranks holding the same part of the model):\n"
      "none: every rank holds every model state\n"
      "optimizer: each rank keeps and updates 1/N of the optimizer state\n"
      "gradients: that, and each rank receives only its 1/N of the gradients\n"
      "parameters: that, and each rank keeps 1/N of the weights, gathering each layer whole "
      "only while it runs");
  bucket_size_ = new QLineEdit;
  bucket_size_->setObjectName("bucket_size");
  bucket_size_->setPlaceholderText("25MiB");
  bucket_size_->setToolTip(
      "Data parallelism: the gradients the data ranks sum in one collective, in bytes of fp32 "
      "gradients (KiB, MiB, …): larger buckets take fewer collectives; with Shard gradients a "
      "rank holds about one bucket whole at once (empty: 25 MiB)");
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
      "schedule:P=K,…: every:K by training progress, e.g. schedule:0=2,0.5=5\n"
      "keep:LIST: every:1, but the listed projections' outputs (qkv, attn-out, mlp-in, and with "
      "experts router, expert-out; matmul: "
      "all) are saved, not recomputed");
  offload_ = new QLineEdit("none");
  offload_->setToolTip(
      "Offload modes to sweep, separated by ',': none, disk, disk:DIR, host "
      "(CUDA). Offload needs a checkpoint policy; none+offload is skipped.");
  batch_ = new QLineEdit("8");
  batch_->setToolTip("Micro-batch sizes to sweep, separated by ','");
  precision_ = new QLineEdit("fp32");
  precision_->setObjectName("precision");
  precision_->setToolTip("Precisions to sweep, separated by ',': fp32, bf16, fp16 (CUDA)");
  budget_ = new QLineEdit;
  budget_->setPlaceholderText("none (e.g. 512MiB)");
  budget_->setToolTip("A step whose peak memory is above the budget ends its run as oom");
  max_batch_ = new QCheckBox("Max batch under budget");
  max_batch_->setToolTip(
      "Instead of the batch sizes: find, for each combination, the largest "
      "batch whose step fits the budget (doubling, then bisection)");
  max_batch_limit_ = spin(1, 65536, 256);
  max_batch_limit_->setObjectName("max_batch_limit");
  max_batch_limit_->setPrefix("up to ");
}

void ExperimentPanel::create_actions() {
  // A fixed height that scrolls: a preview that grew and shrank as policies were typed moved
  // every field under it, and a click aimed at one landed in another.
  preview_ = new QPlainTextEdit;
  preview_->setObjectName("segments-preview");
  preview_->setReadOnly(true);
  preview_->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::TextSelectableByKeyboard);
  preview_->setFocusPolicy(Qt::ClickFocus);  // Tab goes from Policies on to Offload
  preview_->setFrameShape(QFrame::StyledPanel);
  preview_->setFixedHeight(5 * preview_->fontMetrics().lineSpacing() + 8);
  preview_->setToolTip("The segments each policy makes of the model (scroll for more)");
  notation_ =
      new QLabel("aN, mN: attention, MLP of block N · [ … ] a segment · * recomputed in backward");
  notation_->setWordWrap(true);
  notation_->setStyleSheet("color: #606060; font-size: small;");
  runs_label_ = new QLabel;
  runs_label_->setWordWrap(true);
  problem_label_ = new QLabel;
  problem_label_->setWordWrap(true);
  problem_label_->setStyleSheet("color: #b00020;");
  problem_label_->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  run_ = new QPushButton("Run");
  run_->setDefault(true);
  stop_ = new QPushButton("Stop");
  stop_->setEnabled(false);
  check_ = new QPushButton("Check gradients");
  check_->setToolTip(
      "One step under the first checkpointing policy and under none, same seed and batch: are "
      "the gradients bit-identical?");
  error_mark_ = new QAction(style()->standardIcon(QStyle::SP_MessageBoxWarning), QString(), this);
}

QLayout* ExperimentPanel::sweep_fields() {
  auto* sweep_top = new QFormLayout;
  sweep_top->addRow("Experiment", name_);
  sweep_top->addRow("Policies", policies_);
  auto* sweep_rest = new QFormLayout;
  sweep_rest->addRow("Offload", offload_);
  sweep_rest->addRow("Micro-batch", batch_);
  sweep_rest->addRow("Precision", precision_);
  sweep_rest->addRow("Budget", budget_);
  auto* search_row = new QHBoxLayout;
  search_row->addWidget(max_batch_);
  search_row->addWidget(max_batch_limit_);
  sweep_rest->addRow(search_row);
  auto* sweep = new QVBoxLayout;
  sweep->addLayout(sweep_top);
  sweep->addWidget(preview_);
  sweep->addWidget(notation_);
  sweep->addLayout(sweep_rest);
  return sweep;
}

QLayout* ExperimentPanel::model_fields() {
  auto* model = new QFormLayout;
  model->addRow("Preset", preset_);
  model->addRow("", open_model_config_);
  model->addRow(model_source_);
  model->addRow("Family", arch_);
  model->addRow("Blocks", layers_);
  model->addRow("d_model", d_model_);
  model->addRow("Heads", heads_);
  model->addRow("KV heads", kv_heads_);
  add_attention_rows(*model);
  model->addRow("MLP width", mlp_hidden_);
  model->addRow("", tie_head_);
  model->addRow("Loss slices", loss_chunks_);
  model->addRow("Sequence", seq_len_);
  model->addRow("Vocabulary", vocab_);
  model->addRow("Attention", attention_);
  model->addRow("Dropout", dropout_);
  return model;
}

QLayout* ExperimentPanel::training_fields() {
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
  training->addRow("Ranks", ranks_);
  training->addRow("Shard", shard_);
  training->addRow("Buckets", bucket_size_);
  training->addRow("Tensor ranks", tensor_ranks_);
  training->addRow("", sequence_parallel_);
  training->addRow("Pipeline stages", pipeline_stages_);
  training->addRow("Virtual stages", virtual_stages_);
  training->addRow("Stage split", pipeline_split_);
  return training;
}

QLayout* ExperimentPanel::footer() {
  // The footer never scrolls and never changes height: the lines for the summary and for a
  // problem are reserved, so a message appearing moves neither the fields nor the buttons.
  const int line = fontMetrics().lineSpacing();
  runs_label_->setFixedHeight(2 * line + 2);
  problem_label_->setFixedHeight(3 * line + 2);
  auto* buttons = new QHBoxLayout;
  buttons->addWidget(run_, 1);
  buttons->addWidget(stop_, 1);
  buttons->addWidget(check_);
  auto* footer = new QVBoxLayout;
  footer->setContentsMargins(8, 4, 8, 6);
  footer->addWidget(runs_label_);
  footer->addWidget(problem_label_);
  footer->addLayout(buttons);
  return footer;
}

void ExperimentPanel::lay_out() {
  auto group = [](const QString& title, QLayout* layout) {
    auto* box = new QGroupBox(title);
    box->setLayout(layout);
    return box;
  };
  auto* form = new QWidget;
  auto* fields = new QVBoxLayout(form);
  fields->addWidget(group("Sweep", sweep_fields()));
  fields->addWidget(group("Model", model_fields()));
  fields->addWidget(group("Fine-tuning", finetune_fields()));
  fields->addWidget(group("Training", training_fields()));
  fields->addStretch();
  scroll_ = new QScrollArea;
  scroll_->setWidget(form);
  scroll_->setWidgetResizable(true);
  scroll_->setFrameShape(QFrame::NoFrame);
  scroll_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  scroll_->setMinimumWidth(form->sizeHint().width() +
                           style()->pixelMetric(QStyle::PM_ScrollBarExtent) + 4);
  WheelGuard::install(scroll_, form);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addWidget(scroll_, 1);
  layout->addLayout(footer());
}

void ExperimentPanel::connect_fields() {
  connect(preset_, &QComboBox::currentTextChanged, this, &ExperimentPanel::on_preset_chosen);
  connect(open_model_config_, &QPushButton::clicked, this, &ExperimentPanel::open_model_config);
  connect(arch_, &QComboBox::currentTextChanged, this, &ExperimentPanel::revalidate);
  connect(tie_head_, &QCheckBox::toggled, this, &ExperimentPanel::revalidate);
  connect_attention_fields();
  connect(sequence_parallel_, &QCheckBox::toggled, this, &ExperimentPanel::revalidate);
  connect(loss_chunks_, &QLineEdit::textChanged, this, &ExperimentPanel::revalidate);
  for (auto* box :
       {layers_, d_model_, heads_, kv_heads_, mlp_hidden_, seq_len_, vocab_, accum_, steps_, seed_,
        threads_, ranks_, tensor_ranks_, pipeline_stages_, virtual_stages_, max_batch_limit_}) {
    connect(box, &QSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
  }
  for (auto* box : {dropout_, lr_}) {
    connect(box, &QDoubleSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
  }
  connect(lora_alpha_, &QDoubleSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
  connect(lora_rank_, &QSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
  connect(lora_targets_, &QLineEdit::textChanged, this, &ExperimentPanel::revalidate);
  for (auto* combo : {attention_, device_, data_, shard_, finetune_, base_precision_}) {
    connect(combo, &QComboBox::currentTextChanged, this, &ExperimentPanel::revalidate);
  }
  for (auto* edit : {name_, policies_, offload_, batch_, precision_, budget_, data_file_,
                     pipeline_split_, bucket_size_}) {
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
    if (auto config = check_config()) emit checkRequested(*config);
  });
}

void ExperimentPanel::set_read_only_reason(const QString& reason) {
  read_only_reason_ = reason;
  revalidate();
}

void ExperimentPanel::request_run() {
  if (!can_start()) return;
  if (auto json = spec()) emit sweepRequested(QString::fromStdString(json->dump()));
}

QString ExperimentPanel::experiment_name() const { return name_->text(); }
void ExperimentPanel::set_experiment_name(const QString& name) { name_->setText(name); }

QWidget* ExperimentPanel::field_for(const QString& key) const {
  const std::pair<const char*, QWidget*> fields[] = {
      {"name", name_},
      {"preset", preset_},
      {"arch", arch_},
      {"layers", layers_},
      {"d_model", d_model_},
      {"heads", heads_},
      {"kv_heads", kv_heads_},
      {"head_dim", head_width_},
      {"sliding_window", sliding_window_},
      {"rope_theta", rope_theta_},
      {"qkv_bias", qkv_bias_},
      {"qk_norm", qk_norm_},
      {"mlp_hidden", mlp_hidden_},
      {"loss_chunks", loss_chunks_},
      {"seq_len", seq_len_},
      {"vocab", vocab_},
      {"attention", attention_},
      {"dropout", dropout_},
      {"data", data_file_},
      {"accum", accum_},
      {"steps", steps_},
      {"lr", lr_},
      {"seed", seed_},
      {"threads", threads_},
      {"device", device_},
      {"ranks", ranks_},
      {"shard", shard_},
      {"bucket_size", bucket_size_},
      {"tp", tensor_ranks_},
      {"sequence_parallel", sequence_parallel_},
      {"pp", pipeline_stages_},
      {"virtual_stages", virtual_stages_},
      {"pp_split", pipeline_split_},
      {"finetune", finetune_},
      {"lora_rank", lora_rank_},
      {"lora_alpha", lora_alpha_},
      {"lora_targets", lora_targets_},
      {"base_precision", base_precision_},
      {"checkpoint", policies_},
      {"offload", offload_},
      {"batch", batch_},
      {"precision", precision_},
      {"budget", budget_},
  };
  for (const auto& [name, widget] : fields) {
    if (key == QLatin1String(name)) return widget;
  }
  return nullptr;
}

void ExperimentPanel::revalidate() {
  remember_field_help();
  const bool text_data = data_->currentData().toString() == "text";
  data_file_->setEnabled(text_data);
  browse_->setEnabled(text_data);
  batch_->setEnabled(!max_batch_->isChecked());
  enable_finetune_fields();
  enable_attention_fields();
  max_batch_limit_->setEnabled(max_batch_->isChecked());
  update_preview();

  problem_.clear();
  check_problem_.clear();
  QWidget* bad_field = nullptr;
  try {
    std::vector<std::string> skipped;
    const auto points = expand_sweep(parse_sweep_spec(build_spec()), &skipped);
    check_data_parallel(points);
    QString runs = points.size() == 1 ? QString("1 run") : QString("%1 runs").arg(points.size());
    if (data_parallel()) {
      runs += QString(" on %1 rank%2").arg(ranks()).arg(ranks() == 1 ? "" : "s");
      if (shard() != "none") runs += QString(", %1 sharded").arg(shard());
      if (tensor_ranks() > 1) {
        runs += QString(", layers split over %1%2")
                    .arg(tensor_ranks())
                    .arg(sequence_parallel() ? " with the sequence" : "");
      }
      if (pipeline_stages() > 1) {
        runs += QString(", blocks over %1 stages").arg(pipeline_stages());
        if (virtual_stages() > 1) runs += QString(" of %1 chunks").arg(virtual_stages());
        if (!pipeline_split().isEmpty()) runs += QString(" split %1").arg(pipeline_split());
      }
    }
    if (!skipped.empty()) {
      runs += skipped.size() == 1
                  ? QString(" (1 combination of none with offload left out)")
                  : QString(" (%1 combinations of none with offload left out)").arg(skipped.size());
    }
    // A budget without the search still ends every step above it as oom: say so, always.
    const QString budget = budget_->text().trimmed();
    if (!budget.isEmpty() && !max_batch_->isChecked()) {
      runs += QString(" · a step above the %1 budget ends its run as oom").arg(budget);
    }
    runs_label_->setText(runs);
    show_parameters(points.front().config);
    const bool checkpoints = std::any_of(points.begin(), points.end(), [](const SweepPoint& p) {
      return p.config.checkpoint != "none";
    });
    if (!checkpoints) {
      check_problem_ =
          "No checkpointing policy to check: every policy is none (add one, e.g. every:1)";
    }
  } catch (const InvalidInput& error) {
    const FieldError explained = explain(error);
    problem_ = explained.message();
    bad_field = field_for(explained.key);
    runs_label_->clear();
    show_parameters(std::nullopt);
  }
  mark_field(bad_field);
  problem_label_->setText(problem_);
  problem_label_->setToolTip(problem_);
  const bool can_record = read_only_reason_.isEmpty();
  run_->setEnabled(can_start());
  check_->setEnabled(can_check());
  run_->setToolTip(!can_record          ? "Cannot run: " + read_only_reason_
                   : problem_.isEmpty() ? "Start the sweep (Ctrl+R)"
                                        : "Cannot run: " + problem_);
  check_->setToolTip(!problem_.isEmpty() ? "Cannot check: " + problem_
                     : !check_problem_.isEmpty()
                         ? check_problem_
                         : "One step under the first checkpointing policy and under none, same "
                           "seed and batch: are the gradients bit-identical?");
  emit actionsChanged();
}

int ExperimentPanel::ranks() const { return ranks_->value(); }
QString ExperimentPanel::shard() const { return shard_->currentText(); }
QString ExperimentPanel::bucket_size() const { return bucket_size_->text().trimmed(); }

RankLayout ExperimentPanel::rank_layout() const {
  return {ranks(),           shard(),          tensor_ranks(),   sequence_parallel(),
          pipeline_stages(), virtual_stages(), pipeline_split(), bucket_size()};
}
int ExperimentPanel::tensor_ranks() const { return tensor_ranks_->value(); }
bool ExperimentPanel::sequence_parallel() const { return sequence_parallel_->isChecked(); }
int ExperimentPanel::pipeline_stages() const { return pipeline_stages_->value(); }
int ExperimentPanel::virtual_stages() const { return virtual_stages_->value(); }
QString ExperimentPanel::pipeline_split() const { return pipeline_split_->text().trimmed(); }

bool ExperimentPanel::can_start() const {
  return problem_.isEmpty() && !running_ && read_only_reason_.isEmpty();
}

bool ExperimentPanel::can_check() const {
  return problem_.isEmpty() && check_problem_.isEmpty() && !running_;
}

QString ExperimentPanel::summary() const { return runs_label_->text(); }

void ExperimentPanel::set_running(bool running) {
  running_ = running;
  stop_->setEnabled(running);
  revalidate();
}

}  // namespace rematlab::ui
