// The model's shape flags, shared by every command that names a model (`run`, `check`,
// `profile`, `plan`, `estimate`, …), so that `estimate` reads `--arch llama --kv-heads 2` as
// `run` trains it.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "model/model_config.h"

namespace rematlab::cli {

class ModelOptions {
 public:
  // Adds --arch, --layers, --d-model, --heads, --kv-heads, --mlp-hidden, --rope-theta,
  // --tie-head, --loss-chunks, --seq-len, --vocab, --dropout and --attention.
  void add_to(CLI::App& command);
  // `model` (a preset's shape) with every given flag applied, the family first. Throws
  // InvalidInput naming a flag that does not apply (--rope-theta on a GPT model).
  void apply(ModelConfig& model) const;
  // Whether any flag changes the shape (the family included).
  bool changes_shape() const;

 private:
  std::string arch_;
  std::optional<int64_t> layers_, d_model_, heads_, kv_heads_, mlp_hidden_, seq_len_, vocab_;
  std::optional<bool> tie_head_;
  std::optional<double> rope_theta_;
  std::string loss_chunks_;
  std::optional<double> dropout_;
  std::string attention_ = "sdpa";
};

}  // namespace rematlab::cli
