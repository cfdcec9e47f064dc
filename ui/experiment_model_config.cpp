// Open config.json…: a Hugging Face model configuration read into the model fields, with what
// RematLab does not model said beside the button, never dropped silently; a shape beyond the
// form's ranges is refused rather than clamped.
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QSpinBox>
#include <tuple>

#include "common/errors.h"
#include "experiment_panel.h"
#include "model/hf_config.h"

namespace rematlab::ui {
void ExperimentPanel::open_model_config() {
  const QString path = QFileDialog::getOpenFileName(this, "Open a model configuration", QString(),
                                                    "Model configurations (*.json);;All files (*)");
  if (!path.isEmpty()) load_model_config(path);
}

QString ExperimentPanel::field_beyond_the_form(const ModelConfig& model) const {
  for (auto [box, value, name] : {std::tuple{layers_, model.layers, "layers"},
                                  {d_model_, model.d_model, "d_model"},
                                  {heads_, model.heads, "heads"},
                                  {kv_heads_, model.kv_heads, "key/value heads"},
                                  {head_width_, model.head_width, "values per head"},
                                  {sliding_window_, model.sliding_window, "tokens of window"},
                                  {mlp_hidden_, model.mlp_hidden, "MLP width"},
                                  {seq_len_, model.seq_len, "sequence length"},
                                  {vocab_, model.vocab, "vocabulary"}}) {
    if (value > box->maximum()) {
      return QString("%1 %2, more than the form's %3").arg(value).arg(name).arg(box->maximum());
    }
    if (value < box->minimum()) {
      return QString("%1 %2, fewer than the form's %3").arg(value).arg(name).arg(box->minimum());
    }
  }
  if (model.rope_theta > rope_theta_->maximum() || model.rope_theta < rope_theta_->minimum()) {
    return QString("rotary base %1, outside the form's %2–%3")
        .arg(model.rope_theta)
        .arg(rope_theta_->minimum())
        .arg(rope_theta_->maximum());
  }
  return {};
}

void ExperimentPanel::show_model_source_refusal(const QString& text) {
  model_source_->setText(text);
  model_source_->setToolTip(text);
  model_source_->setProperty("invalid", true);
  model_source_->setStyleSheet("color: #b00020");
  model_source_->show();
}

bool ExperimentPanel::load_model_config(const QString& path) {
  const QString file = QFileInfo(path).fileName();
  ImportedConfig imported;
  try {
    imported = import_hf_config(path.toStdString());
  } catch (const InvalidInput& error) {
    show_model_source_refusal(file + " was not read: " + QString::fromStdString(error.reason()));
    return false;
  }
  if (imported.model.moe.enabled()) {  // the form has no expert fields: it would train it dense
    show_model_source_refusal(file + " was not loaded: its " +
                              QString::number(imported.model.moe.experts) +
                              " experts are more than the form holds yet (rematlab-cli run "
                              "--model-config takes it)");
    return false;
  }
  const QString beyond = field_beyond_the_form(imported.model);
  if (!beyond.isEmpty()) {
    show_model_source_refusal(file + " was not loaded: " + beyond +
                              " (rematlab-cli estimate --model-config takes it)");
    return false;
  }
  set_model_fields(imported.model);
  // Short beside the button (the panel is narrow); the whole account in the tooltip.
  QString said = QString("%1 (%2)").arg(file, imported.model_type.c_str());
  QString whole = said + " as the model's shape";
  if (!imported.warnings.empty()) {
    said += QString("; %1 not modelled (hover)").arg(imported.warnings.size());
  }
  for (const std::string& warning : imported.warnings) {
    whole += "\n" + QString::fromStdString(warning);
  }
  model_source_->setText(said);
  model_source_->setToolTip(whole);
  model_source_->setProperty("invalid", false);
  model_source_->setStyleSheet(QString());
  model_source_->show();
  return true;
}

}  // namespace rematlab::ui
