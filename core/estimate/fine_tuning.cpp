#include "estimate/fine_tuning.h"

namespace rematlab::estimate {

ModelConfig to_model_config(const Architecture& arch) {
  ModelConfig config;
  config.family = arch.gated_mlp ? ModelFamily::kLlama : ModelFamily::kGpt;
  config.layers = arch.layers;
  config.d_model = arch.d_model;
  config.heads = arch.heads;
  config.kv_heads = arch.kv_heads;
  config.mlp_hidden = arch.mlp_hidden;
  config.seq_len = arch.seq_len;
  config.vocab = arch.vocab;
  config.dropout = arch.dropout;
  config.attention = arch.attention;
  config.tie_head = arch.tied_head;
  config.qkv_bias = arch.qkv_bias;
  config.qk_norm = arch.qk_norm;
  config.head_width = arch.head_width;
  config.sliding_window = arch.sliding_window;
  config.loss_chunks = arch.loss_chunks;
  config.lora = arch.lora;
  config.moe = arch.moe;
  if (arch.moe.enabled()) config.moe.expert_hidden = arch.expert_hidden;
  return config;
}

int64_t trainable_parameter_count(const Architecture& arch) {
  return arch.lora.enabled() ? to_model_config(arch).adapter_parameter_count()
                             : parameter_count(arch);
}

ModelStateBytes fine_tuning_state_bytes(const Architecture& arch, Precision precision,
                                        Optimizer optimizer) {
  const ModelConfig config = to_model_config(arch);
  ModelStateBytes bytes = model_state_bytes(config.adapter_parameter_count(), precision, optimizer);
  bytes.weights += config.frozen_base_bytes();
  return bytes;
}

}  // namespace rematlab::estimate
