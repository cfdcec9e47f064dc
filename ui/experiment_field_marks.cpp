// How the form marks the field its problem is in, keeping each field's own help to put back.
#include <QAction>
#include <QColor>
#include <QLineEdit>
#include <QPalette>
#include <QStyle>
#include <QWidget>

#include "experiment_panel.h"

namespace rematlab::ui {
namespace {

// A tint, not a style-sheet border: a border changes a field's size hint and so moves the layout.
const QColor kErrorTint(0xfd, 0xe2, 0xe6);

}  // namespace

// The bad field: tinted, the reason first in its tooltip, and in a line edit a warning sign
// (inside the field, so the layout does not move). Every other field is back to normal.
void ExperimentPanel::mark_field(QWidget* bad_field) {
  for (auto it = help_.cbegin(); it != help_.cend(); ++it) {
    QWidget* field = it.key();
    const bool bad = field == bad_field;
    QPalette tinted = palette();
    tinted.setColor(QPalette::Base, kErrorTint);
    tinted.setColor(QPalette::Button, kErrorTint);
    field->setPalette(bad ? tinted : QPalette());  // an empty palette inherits again
    field->setProperty("invalid", bad);
    field->setToolTip(bad ? problem_ + (it.value().isEmpty() ? "" : "\n\n" + it.value())
                          : it.value());
  }
  for (QLineEdit* edit : findChildren<QLineEdit*>()) edit->removeAction(error_mark_);
  if (auto* edit = qobject_cast<QLineEdit*>(bad_field)) {
    error_mark_->setToolTip(problem_);
    edit->addAction(error_mark_, QLineEdit::TrailingPosition);
  }
}

void ExperimentPanel::remember_field_help() {
  if (help_.isEmpty()) {  // first call: every field's own help, before any reason is added
    for (const char* key : {"name",
                            "preset",
                            "arch",
                            "layers",
                            "d_model",
                            "heads",
                            "kv_heads",
                            "mlp_hidden",
                            "loss_chunks",
                            "seq_len",
                            "vocab",
                            "attention",
                            "dropout",
                            "data",
                            "accum",
                            "steps",
                            "lr",
                            "seed",
                            "threads",
                            "device",
                            "ranks",
                            "shard",
                            "bucket_size",
                            "tp",
                            "sequence_parallel",
                            "pp",
                            "virtual_stages",
                            "pp_split",
                            "checkpoint",
                            "offload",
                            "batch",
                            "precision",
                            "budget",
                            "finetune",
                            "lora_rank",
                            "lora_alpha",
                            "lora_targets",
                            "base_precision",
                            "head_dim",
                            "rope_theta",
                            "qkv_bias",
                            "qk_norm",
                            "sliding_window"}) {
      if (QWidget* field = field_for(key)) help_.insert(field, field->toolTip());
    }
  }
}

}  // namespace rematlab::ui
