#include "field_errors.h"

#include <QRegularExpression>

#include "common/errors.h"

namespace rematlab::ui {
namespace {

// Spec keys as the form labels them; a key without a field of its own keeps its name.
struct Label {
  const char* key;
  const char* label;
};
constexpr Label kLabels[] = {
    {"preset", "Preset"},
    {"arch", "Family"},
    {"layers", "Blocks"},
    {"d_model", "d_model"},
    {"heads", "Heads"},
    {"kv_heads", "KV heads"},
    {"mlp_hidden", "MLP width"},
    {"loss_chunks", "Loss slices"},
    {"seq_len", "Sequence"},
    {"vocab", "Vocabulary"},
    {"attention", "Attention"},
    {"dropout", "Dropout"},
    {"data", "Text file"},
    {"accum", "Accumulation"},
    {"steps", "Steps"},
    {"lr", "Learning rate"},
    {"seed", "Seed"},
    {"threads", "Threads"},
    {"device", "Device"},
    {"ranks", "Ranks"},
    {"nproc", "Ranks"},
    {"shard", "Shard"},
    {"name", "Experiment"},
    {"checkpoint", "Policies"},
    {"offload", "Offload"},
    {"batch", "Micro-batch"},
    {"precision", "Precision"},
    {"budget", "Budget"},
    {"max_batch", "Budget"},
};

// "--d-model" → "d_model"; "spec: base.heads" → "heads"; "spec: axes.checkpoint[1]" →
// "checkpoint"; "spec: max_batch.budget" → "budget"; "spec: axes (every:1 b8)" → "".
QString key_of(QString field) {
  if (field.startsWith("--")) return field.mid(2).replace('-', '_');
  field.remove(QRegularExpression("^spec:\\s*"));
  field.remove(QRegularExpression("\\[\\d+\\]$"));
  if (field.contains(' ')) return {};
  const qsizetype dot = field.lastIndexOf('.');
  return dot < 0 ? field : field.mid(dot + 1);
}

}  // namespace

QString field_label(const QString& key_or_flag) {
  const QString key = key_of(key_or_flag);
  for (const Label& entry : kLabels) {
    if (key == QLatin1String(entry.key)) return entry.label;
  }
  return key;
}

FieldError explain(const InvalidInput& error) {
  FieldError explained;
  QString reason = QString::fromStdString(error.reason());
  // A config error wrapped by the spec starts with its own flag, the most precise name there is.
  static const QRegularExpression kLeadingFlag("^(--[a-z][a-z0-9-]*)\\s+");
  const auto leading = kLeadingFlag.match(reason);
  if (leading.hasMatch()) {
    explained.key = key_of(leading.captured(1));
    reason = reason.mid(leading.capturedLength());
  } else {
    explained.key = key_of(QString::fromStdString(error.field()));
  }
  if (explained.key == "max_batch") explained.key = "budget";
  if (explained.key == "nproc" || explained.key == "world_size") explained.key = "ranks";
  explained.label = explained.key.isEmpty() ? QString() : field_label(explained.key);
  static const QRegularExpression kFlag("--([a-z][a-z0-9-]*)");
  QString text;
  qsizetype from = 0;
  for (auto it = kFlag.globalMatch(reason); it.hasNext();) {
    const auto match = it.next();
    text += reason.mid(from, match.capturedStart() - from) + field_label(match.captured(0));
    from = match.capturedEnd();
  }
  explained.text = text + reason.mid(from);
  return explained;
}

}  // namespace rematlab::ui
