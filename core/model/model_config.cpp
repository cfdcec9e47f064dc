#include "model/model_config.h"

#include <cmath>

#include "common/errors.h"

namespace rematlab {
namespace {

struct Preset {
  const char* name;
  ModelConfig config;
};

ModelConfig make(int64_t layers, int64_t d_model, int64_t heads, int64_t seq_len, int64_t vocab) {
  ModelConfig config;
  config.layers = layers;
  config.d_model = d_model;
  config.heads = heads;
  config.seq_len = seq_len;
  config.vocab = vocab;
  return config;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"tiny", make(2, 64, 4, 64, 256)},
      {"small", make(12, 256, 8, 256, 256)},
      {"gpt2-124m", make(12, 768, 12, 1024, 50257)},
      {"gpt2-350m", make(24, 1024, 16, 1024, 50257)},
  };
  return kPresets;
}

void require_positive(int64_t value, const char* flag) {
  if (value <= 0) throw InvalidInput(flag, "must be positive, got " + std::to_string(value));
}

}  // namespace

int64_t ModelConfig::parameter_count() const {
  const int64_t d = d_model;
  const int64_t per_block = 2 * (2 * d)            // two LayerNorms
                            + (d * 3 * d + 3 * d)  // fused QKV
                            + (d * d + d)          // attention output
                            + (d * 4 * d + 4 * d)  // MLP up
                            + (4 * d * d + d);     // MLP down
  return vocab * d + seq_len * d + layers * per_block + 2 * d;
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const auto& preset : presets()) names.emplace_back(preset.name);
    return names;
  }();
  return kNames;
}

ModelConfig model_preset(const std::string& name) {
  for (const auto& preset : presets()) {
    if (name == preset.name) return preset.config;
  }
  std::string known;
  for (const auto& preset : presets())
    known += std::string(known.empty() ? "" : ", ") + preset.name;
  throw InvalidInput("--preset", "unknown preset '" + name + "' (known: " + known + ")");
}

void validate(const ModelConfig& config) {
  require_positive(config.layers, "--layers");
  require_positive(config.d_model, "--d-model");
  require_positive(config.heads, "--heads");
  require_positive(config.seq_len, "--seq-len");
  require_positive(config.vocab, "--vocab");
  if (config.d_model % config.heads != 0) {
    throw InvalidInput("--heads", std::to_string(config.heads) + " heads do not divide --d-model " +
                                      std::to_string(config.d_model));
  }
  if (!(config.dropout >= 0.0 && config.dropout < 1.0)) {
    throw InvalidInput("--dropout", "must be in [0, 1), got " + std::to_string(config.dropout));
  }
}

std::string to_string(AttentionKind kind) { return kind == AttentionKind::kMath ? "math" : "sdpa"; }

AttentionKind parse_attention(const std::string& text) {
  if (text == "sdpa") return AttentionKind::kSdpa;
  if (text == "math") return AttentionKind::kMath;
  throw InvalidInput("--attention", "unknown attention '" + text + "' (use sdpa or math)");
}

}  // namespace rematlab
