#include "advice_words.h"

#include "common/wording.h"

namespace rematlab::ui {
namespace {

// Run settings as the form labels them.
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
    {"head_dim", "Head width"},
    {"sliding_window", "Sliding window"},
    {"rope_theta", "Rotary base"},
    {"qkv_bias", "q/k/v biases"},
    {"qk_norm", "q/k norms"},
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
    {"bucket_size", "Buckets"},
    {"tp", "Tensor ranks"},
    {"sequence_parallel", "Sequence parallel"},
    {"pp", "Pipeline stages"},
    {"virtual_stages", "Virtual stages"},
    {"pp_split", "Stage split"},
    {"finetune", "Fine-tuning"},
    {"lora_rank", "LoRA rank"},
    {"lora_alpha", "LoRA alpha"},
    {"lora_targets", "LoRA targets"},
    {"base_precision", "Base"},
    {"name", "Experiment"},
    {"checkpoint", "Policies"},
    {"offload", "Offload"},
    {"batch", "Micro-batch"},
    {"precision", "Precision"},
    {"budget", "Budget"},
    {"max_batch", "Budget"},
};

QString setting_in_form_words(const Phrase& setting) {
  const std::optional<QString> label = form_label(QString::fromStdString(setting.text));
  const QString value = QString::fromStdString(setting.value);
  const QString name =
      label ? *label : "the command line's " + QString::fromStdString(flag_of(setting.text));
  return value.isEmpty() ? name : name + " " + value;
}

bool has_setting(const std::vector<Phrase>& phrases, const std::string& key) {
  for (const Phrase& phrase : phrases) {
    if (phrase.kind == Phrase::Kind::kSetting && phrase.text == key) return true;
  }
  return false;
}

// Where the window does what a command does; a command it has no place for stays as written.
QString place_of(const Phrase& command) {
  const std::string& subcommand = command.text;
  if (subcommand == "plan" || subcommand == "estimate" || subcommand == "profile")
    return "the Plan tab";
  if (subcommand == "check" && !has_setting(command.arguments, "at_step")) return "Check gradients";
  if (subcommand == "max-batch") return "the form's Max batch under budget";
  if (subcommand == "diagnose") return "this advisor";
  return "the command line's " + QString::fromStdString(Wording(command).command_line());
}

bool is_setting(const std::vector<Phrase>& phrases, std::size_t i) {
  return i < phrases.size() && phrases[i].kind == Phrase::Kind::kSetting;
}

}  // namespace

std::optional<QString> form_label(const QString& key) {
  for (const Label& entry : kLabels) {
    if (key == QLatin1String(entry.key)) return QString(entry.label);
  }
  return std::nullopt;
}

QString in_form_words(const Wording& words) {
  const std::vector<Phrase>& phrases = words.phrases();
  QString said;
  for (std::size_t i = 0; i < phrases.size(); ++i) {
    const Phrase& phrase = phrases[i];
    switch (phrase.kind) {
      case Phrase::Kind::kText:
        // Settings in a row, as flags are given, read as a list: "Ranks 2, Shard optimizer".
        said +=
            phrase.text == " " && i > 0 && is_setting(phrases, i - 1) && is_setting(phrases, i + 1)
                ? QStringLiteral(", ")
                : QString::fromStdString(phrase.text);
        break;
      case Phrase::Kind::kSetting:
        said += setting_in_form_words(phrase);
        break;
      case Phrase::Kind::kCommand:
        said += place_of(phrase);
        break;
      case Phrase::Kind::kRunSettings:
        said += "for the run's configuration";
        break;
    }
  }
  return said;
}

}  // namespace rematlab::ui
