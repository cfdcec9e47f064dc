// Shape of the GPT-2-style model, named presets, and their validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rematlab {

enum class AttentionKind {
  kSdpa,  // LibTorch's fused scaled_dot_product_attention
  kMath,  // explicit QKᵀ → softmax → ·V, which keeps the s×s scores for backward
};

struct ModelConfig {
  int64_t layers = 2;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t seq_len = 64;
  int64_t vocab = 256;
  double dropout = 0.0;
  AttentionKind attention = AttentionKind::kSdpa;

  int64_t head_dim() const { return d_model / heads; }
  // Exact parameter count of the engine's model (the LM head is tied to the token embedding).
  int64_t parameter_count() const;
};

// The preset names in the order users see them.
const std::vector<std::string>& preset_names();
// Throws InvalidInput("--preset", …) for an unknown name.
ModelConfig model_preset(const std::string& name);

// Throws InvalidInput naming the offending flag.
void validate(const ModelConfig& config);

std::string to_string(AttentionKind kind);
AttentionKind parse_attention(const std::string& text);  // throws InvalidInput("--attention", …)

}  // namespace rematlab
