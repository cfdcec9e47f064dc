// The form's fine-tuning group: full training, or LoRA adapters on a frozen model with their
// rank, alpha and targets (model/lora_options.h), and what that leaves to train.
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QSpinBox>
#include <algorithm>

#include "experiment_panel.h"
#include "run/run_config.h"

namespace rematlab::ui {
namespace {

QString millions(int64_t count) {
  return QLocale().toString(static_cast<double>(count) / 1e6, 'f', count < 10'000'000 ? 2 : 1) +
         " M";
}

}  // namespace

void ExperimentPanel::create_finetune_fields() {
  finetune_ = new QComboBox;
  finetune_->addItem("full", "full");
  finetune_->addItem("LoRA", "lora");
  finetune_->setToolTip(
      "full: every weight trains.\nLoRA: the model's weights are frozen (no gradients, no "
      "optimizer state) and low-rank "
      "adapters, (alpha / rank) · B · A beside each chosen projection, train. B starts at zero, "
      "so training begins from the model as it is.");
  lora_rank_ = new QSpinBox;
  lora_rank_->setRange(1, static_cast<int>(kMaxLoraRank));
  lora_rank_->setValue(16);
  lora_rank_->setToolTip("The adapters' rank r: A is r × in, B out × r");
  lora_alpha_ = new QDoubleSpinBox;
  lora_alpha_->setDecimals(3);
  lora_alpha_->setRange(0.001, 9999.0);
  lora_alpha_->setValue(32.0);
  lora_alpha_->setToolTip("The adapters' output is scaled by alpha / rank");
  lora_targets_ = new QLineEdit("all");
  lora_targets_->setToolTip(
      "The projections adapted: any of q, k, v, o, gate, up, down, comma-separated, or all (every "
      "one the model has; gpt has no gate)");
  base_precision_ = new QComboBox;
  base_precision_->addItems({"fp32", "bf16", "int8", "nf4"});
  base_precision_->setToolTip(
      "How the frozen projections' weights are stored: fp32; bf16 (half the bytes; the matmuls "
      "must run in bf16: Precision bf16); int8 (a scale per row) or nf4 (4-bit NormalFloat), "
      "dequantised wherever a projection runs");
  parameters_label_ = new QLabel;
  parameters_label_->setObjectName("parameters");
  parameters_label_->setWordWrap(true);
  // Wrapped to the form's width, never widening it.
  parameters_label_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  parameters_label_->setToolTip("The form's first run: all its parameters, and those that train");
}

QLayout* ExperimentPanel::finetune_fields() {
  auto* form = new QFormLayout;
  // Short labels: the group's title says what they belong to, and the form stays narrow.
  form->addRow("Train", finetune_);
  form->addRow("Rank", lora_rank_);
  form->addRow("Alpha", lora_alpha_);
  form->addRow("Targets", lora_targets_);
  form->addRow("Base", base_precision_);
  form->addRow("Params", parameters_label_);
  return form;
}

void ExperimentPanel::add_finetune_to(nlohmann::ordered_json& base) const {
  if (finetune_->currentData().toString() != "lora") return;
  base["finetune"] = "lora";  // after "arch": its defaults are that family's
  base["lora_rank"] = lora_rank_->value();
  base["lora_alpha"] = lora_alpha_->value();
  const QString targets = lora_targets_->text().trimmed();
  if (targets != "all") base["lora_targets"] = targets.toStdString();
  if (base_precision_->currentText() != "fp32") {
    base["base_precision"] = base_precision_->currentText().toStdString();
  }
}

void ExperimentPanel::load_finetune_fields(const nlohmann::ordered_json& base) {
  const bool lora = base.contains("finetune") && base["finetune"] == "lora";
  finetune_->setCurrentIndex(finetune_->findData(lora ? "lora" : "full"));
  if (!lora) return;
  if (base.contains("lora_rank") && base["lora_rank"].is_number_integer()) {
    lora_rank_->setValue(static_cast<int>(std::clamp<int64_t>(
        base["lora_rank"].get<int64_t>(), lora_rank_->minimum(), lora_rank_->maximum())));
  }
  if (base.contains("lora_alpha") && base["lora_alpha"].is_number()) {
    lora_alpha_->setValue(base["lora_alpha"].get<double>());
  }
  const bool targets = base.contains("lora_targets") && base["lora_targets"].is_string();
  lora_targets_->setText(targets ? QString::fromStdString(base["lora_targets"].get<std::string>())
                                 : QString("all"));
  const bool stored = base.contains("base_precision") && base["base_precision"].is_string();
  const int precision = base_precision_->findText(
      stored ? QString::fromStdString(base["base_precision"].get<std::string>()) : "fp32");
  base_precision_->setCurrentIndex(std::max(0, precision));
}

void ExperimentPanel::enable_finetune_fields() {
  const bool lora = finetune_->currentData().toString() == "lora";
  for (QWidget* field :
       std::initializer_list<QWidget*>{lora_rank_, lora_alpha_, lora_targets_, base_precision_}) {
    field->setEnabled(lora);
  }
}

void ExperimentPanel::show_parameters(const std::optional<RunConfig>& config) {
  if (!config) {
    parameters_label_->clear();
    return;
  }
  const ModelConfig& model = config->model;
  const int64_t total = model.parameter_count();
  const int64_t trained = model.trainable_parameter_count();
  parameters_label_->setText(
      trained == total
          ? millions(total) + ", all trained"
          : QString("%1, %2 trained (%3 %)")
                .arg(millions(total), millions(trained))
                .arg(QLocale().toString(
                    100.0 * static_cast<double>(trained) / static_cast<double>(total), 'f', 2)));
}

}  // namespace rematlab::ui
