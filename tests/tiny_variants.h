// The small shapes the exactness and counting suites share beyond the presets: "qwen3-tiny",
// llama-tiny with Qwen 3's q/k norms and heads wider than d_model / heads, and "mistral-tiny",
// llama-tiny with a sliding window (24) that does not divide its 64 tokens; "qwen2-moe-tiny",
// moe-tiny with Qwen 2 MoE's shared expert and unnormalised weights; "moe-capacity-tiny",
// moe-tiny whose experts take at most their share (capacity factor 1: tokens are dropped). Any
// other name is that preset.
#pragma once

#include <string>

#include "model/model_config.h"

namespace rematlab::testing {

inline ModelConfig tiny_variant(const std::string& name) {
  const bool llama_variant = name == "qwen3-tiny" || name == "mistral-tiny";
  const bool moe_variant = name == "qwen2-moe-tiny" || name == "moe-capacity-tiny";
  ModelConfig model = model_preset(llama_variant ? "llama-tiny" : moe_variant ? "moe-tiny" : name);
  if (name == "qwen3-tiny") {
    model.qk_norm = true;
    model.head_width = 32;
  }
  if (name == "mistral-tiny") model.sliding_window = 24;
  if (name == "qwen2-moe-tiny") {
    model.moe.shared_expert_hidden = 64;
    model.moe.normalise_weights = false;
  }
  if (name == "moe-capacity-tiny") model.moe.capacity_factor = 1.0;
  return model;
}

}  // namespace rematlab::testing
