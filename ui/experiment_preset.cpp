// The Preset field: a preset sets the model fields, and one that would replace values the user
// changed asks first (an arrow key on a focused Preset once reset Blocks and d_model silently).
#include <QAbstractButton>
#include <QCheckBox>
#include <QComboBox>
#include <QMessageBox>
#include <QPushButton>
#include <QSpinBox>
#include <tuple>

#include "experiment_panel.h"
#include "model/model_config.h"

namespace rematlab::ui {

QStringList ExperimentPanel::edits_lost(const QString& from, const QString& to) const {
  if (from.isEmpty()) return {};
  const ModelConfig before = model_preset(from.toStdString());
  const ModelConfig after = model_preset(to.toStdString());
  QStringList lost;
  const auto compare = [&](const QString& label, const QString& now, const QString& was,
                           const QString& will) {
    if (now != was && now != will) lost << QString("%1 %2 → %3").arg(label, now, will);
  };
  compare("Family", arch_->currentText(), QString::fromStdString(to_string(before.family)),
          QString::fromStdString(to_string(after.family)));
  for (auto [label, box, was, will] :
       {std::tuple{"Blocks", layers_, before.layers, after.layers},
        {"d_model", d_model_, before.d_model, after.d_model},
        {"Heads", heads_, before.heads, after.heads},
        {"KV heads", kv_heads_, before.kv_heads, after.kv_heads},
        {"MLP width", mlp_hidden_, before.mlp_hidden, after.mlp_hidden},
        {"Sequence", seq_len_, before.seq_len, after.seq_len},
        {"Vocabulary", vocab_, before.vocab, after.vocab}}) {
    compare(label, QString::number(box->value()), QString::number(was), QString::number(will));
  }
  const auto yes_no = [](bool value) { return QString(value ? "on" : "off"); };
  compare("Tied output head", yes_no(tie_head_->isChecked()), yes_no(before.tie_head),
          yes_no(after.tie_head));
  const auto width = [](const ModelConfig& model) {
    return QString::number(model.head_width * model.heads == model.d_model ? 0 : model.head_width);
  };
  compare("Head width", QString::number(head_width_->value()), width(before), width(after));
  compare("Sliding window", QString::number(sliding_window_->value()),
          QString::number(before.sliding_window), QString::number(after.sliding_window));
  compare("Rotary base", QString::number(rope_theta_->value()), QString::number(before.rope_theta),
          QString::number(after.rope_theta));
  compare("q/k/v biases", yes_no(qkv_bias_->isChecked()), yes_no(before.qkv_bias),
          yes_no(after.qkv_bias));
  compare("q/k norms", yes_no(qk_norm_->isChecked()), yes_no(before.qk_norm),
          yes_no(after.qk_norm));
  return lost;
}

void ExperimentPanel::on_preset_chosen(const QString& name) {
  const QStringList lost = loading_ ? QStringList() : edits_lost(preset_name_, name);
  if (!lost.isEmpty()) {
    // An arrow key on a focused Preset (or a slip of the mouse) must not silently undo what the
    // user set: the change is said, and kept only when confirmed.
    QMessageBox box(QMessageBox::Question, "Change the preset",
                    QString("The preset %1 replaces model values you changed:\n%2\n\nReplace "
                            "them?")
                        .arg(name, lost.join("\n")),
                    QMessageBox::Yes | QMessageBox::No, this);
    box.button(QMessageBox::Yes)->setText("Use " + name);
    box.button(QMessageBox::No)->setText("Keep my values");
    box.setDefaultButton(QMessageBox::No);
    if (box.exec() != QMessageBox::Yes) {
      const QSignalBlocker blocker(preset_);
      preset_->setCurrentText(preset_name_);
      return;
    }
  }
  apply_preset(name);
}

void ExperimentPanel::apply_preset(const QString& name) {
  preset_name_ = name;
  model_source_->clear();
  model_source_->hide();
  set_model_fields(model_preset(name.toStdString()));
}

void ExperimentPanel::set_model_fields(const ModelConfig& model) {
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
  set_attention_fields(model);
  revalidate();
}

}  // namespace rematlab::ui
