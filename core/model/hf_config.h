// A Hugging Face model configuration (the config.json beside a checkpoint) read as RematLab's
// model, so that users name the model they fine-tune instead of translating it into flags.
//
// Families: llama, mistral, qwen2, qwen3 (RematLab's llama family: RMSNorm, SwiGLU, rotary
// positions, grouped-query attention), their mixtures of experts mixtral, qwen2_moe and qwen3_moe,
// and gpt2 (the gpt family). Every field is either modelled,
// known not to change the model's memory or FLOPs (token ids, dtypes, the library's version), or
// named in a warning: nothing is dropped silently (README.md, "Two model families").
#pragma once

#include <string>
#include <vector>

#include "model/model_config.h"

namespace rematlab {

struct ImportedConfig {
  ModelConfig model;
  std::string model_type;             // "llama", "qwen2", …
  std::vector<std::string> warnings;  // one line each: a field read but not modelled
};

// The training length a configuration implies: its maximum positions, at most this many tokens
// (a 128K-context model is rarely fine-tuned at 128K; --seq-len says otherwise).
inline constexpr int64_t kImportedSeqLenCap = 4096;

// Parses `text` (named `name` in messages). Throws InvalidInput("--model-config", …) in one line
// for text that is not JSON, not an object, an unknown model_type or a missing or mistyped size.
ImportedConfig import_hf_config_text(const std::string& text, const std::string& name);
// The same from a file; an unreadable file is one line too.
ImportedConfig import_hf_config(const std::string& path);

// What a run records as its model when its shape came from `path`: "qwen2 from PATH".
std::string imported_model_label(const ImportedConfig& imported, const std::string& path);

}  // namespace rematlab
