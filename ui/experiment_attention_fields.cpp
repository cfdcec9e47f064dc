// The attention's finer fields, which the published Llama-family models differ in: a head width
// other than d_model / heads, Mistral's sliding window, the rotary base, Qwen 2's q/k/v biases
// and Qwen 3's q/k norms. The last three are Llama's only, and disabled for GPT (which has every
// bias and no rotation).
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QSpinBox>
#include <algorithm>

#include "experiment_panel.h"

namespace rematlab::ui {

void ExperimentPanel::create_attention_fields() {
  head_width_ = new QSpinBox;
  head_width_->setRange(0, 4096);
  head_width_->setSpecialValueText("d_model / heads");
  head_width_->setToolTip(
      "Values per attention head; Qwen 3's smaller models have heads wider than d_model / heads");
  sliding_window_ = new QSpinBox;
  sliding_window_->setRange(0, 32768);  // the longest sequence the form takes
  sliding_window_->setSpecialValueText("whole sequence");
  sliding_window_->setToolTip(
      "Each token attends to this many latest tokens, itself included (Mistral 7B v0.1: 4096): "
      "attention's FLOPs and the math core's scores follow the window, not the sequence");
  rope_theta_ = new QDoubleSpinBox;
  rope_theta_->setRange(1.0, 1e9);
  rope_theta_->setDecimals(0);
  rope_theta_->setValue(ModelConfig{}.rope_theta);
  rope_theta_->setToolTip(
      "llama: base of the rotary positions' frequencies (Llama 2: 10000, Llama 3: 500000, "
      "Qwen: 1000000); the same memory and FLOPs whatever its value");
  qkv_bias_ = new QCheckBox("q/k/v biases");
  qkv_bias_->setToolTip("llama: biases on the q, k and v projections (Qwen 2)");
  qk_norm_ = new QCheckBox("q/k norms");
  qk_norm_->setToolTip("llama: an RMSNorm on each head's q and k before the rotation (Qwen 3)");
}

void ExperimentPanel::add_attention_rows(QFormLayout& model) {
  model.addRow("Head width", head_width_);
  model.addRow("Sliding window", sliding_window_);
  model.addRow("Rotary base", rope_theta_);
  auto* extras = new QHBoxLayout;
  extras->addWidget(qkv_bias_);
  extras->addWidget(qk_norm_);
  extras->addStretch();
  model.addRow("", extras);
}

void ExperimentPanel::connect_attention_fields() {
  connect(head_width_, &QSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
  connect(sliding_window_, &QSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
  connect(rope_theta_, &QDoubleSpinBox::valueChanged, this, &ExperimentPanel::revalidate);
  connect(qkv_bias_, &QCheckBox::toggled, this, &ExperimentPanel::revalidate);
  connect(qk_norm_, &QCheckBox::toggled, this, &ExperimentPanel::revalidate);
}

void ExperimentPanel::enable_attention_fields() {
  const bool llama = arch_->currentText() == "llama";
  for (QWidget* field : std::initializer_list<QWidget*>{rope_theta_, qkv_bias_, qk_norm_}) {
    field->setEnabled(llama);
  }
}

void ExperimentPanel::add_attention_to(nlohmann::ordered_json& base) const {
  // Written only where they differ from a plain model, as run records write them; a GPT has
  // none of Llama's (its fields are disabled and would be refused).
  if (head_width_->value() > 0) base["head_dim"] = head_width_->value();
  // A window is written where set, and 0 where the preset has one (mistral-7b without it).
  const ModelConfig* named = find_model_preset(preset_name_.toStdString());
  if (sliding_window_->value() > 0 || (named && named->sliding_window > 0)) {
    base["sliding_window"] = sliding_window_->value();
  }
  if (arch_->currentText() != "llama") return;
  base["rope_theta"] = rope_theta_->value();
  base["qkv_bias"] = qkv_bias_->isChecked();
  base["qk_norm"] = qk_norm_->isChecked();
}

void ExperimentPanel::load_attention_fields(const nlohmann::ordered_json& base) {
  // Records and profiles write these only where they differ from the preset's (or a plain
  // model's): one that is absent is that, never what the form held before.
  const ModelConfig* named = base.contains("preset") && base["preset"].is_string()
                                 ? find_model_preset(base["preset"].get<std::string>())
                                 : nullptr;
  ModelConfig model = named ? *named : ModelConfig{};
  if (base.contains("head_dim") && base["head_dim"].is_number_integer()) {
    model.head_width = base["head_dim"].get<int64_t>();
  }
  if (base.contains("sliding_window") && base["sliding_window"].is_number_integer()) {
    model.sliding_window = base["sliding_window"].get<int64_t>();
  }
  if (base.contains("rope_theta") && base["rope_theta"].is_number()) {
    model.rope_theta = base["rope_theta"].get<double>();
  }
  if (base.contains("qkv_bias") && base["qkv_bias"].is_boolean()) {
    model.qkv_bias = base["qkv_bias"].get<bool>();
  }
  if (base.contains("qk_norm") && base["qk_norm"].is_boolean()) {
    model.qk_norm = base["qk_norm"].get<bool>();
  }
  model.heads = heads_->value();
  model.d_model = d_model_->value();
  set_attention_fields(model);
}

void ExperimentPanel::set_attention_fields(const ModelConfig& model) {
  const QSignalBlocker width(head_width_);
  const QSignalBlocker window(sliding_window_);
  const QSignalBlocker theta(rope_theta_);
  const QSignalBlocker bias(qkv_bias_);
  const QSignalBlocker norm(qk_norm_);
  head_width_->setValue(
      static_cast<int>(model.head_width * model.heads == model.d_model ? 0 : model.head_width));
  sliding_window_->setValue(
      static_cast<int>(std::clamp<int64_t>(model.sliding_window, 0, sliding_window_->maximum())));
  rope_theta_->setValue(model.rope_theta);
  qkv_bias_->setChecked(model.qkv_bias);
  qk_norm_->setChecked(model.qk_norm);
}

}  // namespace rematlab::ui
