// The model's shape flags, shared by every command that names a model (`run`, `check`,
// `profile`, `plan`, `estimate`, …), so that `estimate` reads `--arch llama --kv-heads 2` as
// `run` trains it.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "model/hf_config.h"
#include "model/model_config.h"

namespace rematlab::cli {

class ModelOptions {
 public:
  // Adds --model-config, --arch, --layers, --d-model, --heads, --kv-heads, --head-dim,
  // --mlp-hidden,
  // --rope-theta, --qkv-bias, --tie-head, --loss-chunks, --seq-len, --vocab, --dropout and
  // --attention, a mixture of experts' --experts, --experts-per-token, --expert-hidden,
  // --shared-expert-hidden, --expert-weights, --balance-coefficient and --capacity-factor, and
  // fine-tuning's --finetune, --lora-rank, --lora-alpha, --lora-targets and --base-precision.
  // Add the command's --preset (or --model) first: --model-config excludes it.
  void add_to(CLI::App& command);
  // `model` (a preset's shape, or the --model-config file's instead) with every given flag
  // applied, the family first. Throws InvalidInput naming a flag that does not apply
  // (--rope-theta on a GPT model) or what is wrong with the configuration file.
  void apply(ModelConfig& model) const;
  // Whether any flag changes the shape (the family included, a configuration file too).
  bool changes_shape() const;
  // Whether any fine-tuning flag is given (--finetune, --lora-*, --base-precision).
  bool gives_fine_tuning() const;
  // Where an imported shape came from ("qwen2 from path/config.json"); empty without one.
  std::string source() const;

 private:
  // The --model-config file, read once; its warnings go to stderr then, one line each.
  const ImportedConfig& imported() const;

  std::optional<std::string> model_config_;
  mutable std::optional<ImportedConfig> imported_;
  std::string arch_;
  std::optional<int64_t> layers_, d_model_, heads_, kv_heads_, head_dim_, mlp_hidden_, seq_len_,
      vocab_, sliding_window_;
  std::optional<bool> tie_head_, qkv_bias_, qk_norm_;
  std::optional<double> rope_theta_;
  std::string loss_chunks_;
  std::optional<double> dropout_;
  std::string attention_ = "sdpa";
  std::optional<std::string> finetune_;  // absent: as the preset or configuration has it (full)
  std::optional<int64_t> lora_rank_;
  std::optional<double> lora_alpha_;
  std::optional<std::string> lora_targets_;
  std::optional<std::string> base_precision_;
  std::optional<int64_t> experts_, experts_per_token_, expert_hidden_, shared_expert_hidden_;
  std::optional<std::string> expert_weights_;
  std::optional<double> balance_coefficient_, capacity_factor_;

  void apply_fine_tuning(ModelConfig& model) const;
  void apply_experts(ModelConfig& model) const;
  bool gives_experts() const;
};

}  // namespace rematlab::cli
