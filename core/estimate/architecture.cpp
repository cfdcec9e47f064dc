#include "estimate/architecture.h"

#include <algorithm>

#include "common/errors.h"

namespace rematlab::estimate {
namespace {

ModelConfig gpt3_175b() {
  ModelConfig config;
  config.layers = 96;
  config.d_model = 12288;
  config.heads = 96;
  config.seq_len = 2048;
  config.vocab = 50257;
  return config;
}

// Llama 3.1 405B as its paper gives it (arXiv 2407.21783, Table 3): the largest published layout
// the layout planner must find feasible.
ModelConfig llama3_405b() {
  ModelConfig config;
  config.family = ModelFamily::kLlama;
  config.layers = 126;
  config.d_model = 16384;
  config.heads = 128;
  config.kv_heads = 8;
  config.mlp_hidden = 53248;
  config.seq_len = 8192;
  config.vocab = 128256;
  config.tie_head = false;
  config.rope_theta = 500000.0;
  return config;
}

const std::vector<std::string>& estimation_only_names() {
  static const std::vector<std::string> kNames = {"gpt3-175b", "llama3-405b"};
  return kNames;
}

void require_positive(int64_t value, const char* flag) {
  if (value <= 0) throw InvalidInput(flag, "must be positive, got " + std::to_string(value));
}

}  // namespace

Architecture from_model_config(const ModelConfig& config) {
  Architecture arch;
  arch.layers = config.layers;
  arch.d_model = config.d_model;
  arch.heads = config.heads;
  arch.kv_heads = config.key_value_heads();
  arch.mlp_hidden = config.mlp_width();
  arch.seq_len = config.seq_len;
  arch.vocab = config.vocab;
  arch.attention = config.attention;
  arch.dropout = config.dropout;
  arch.tied_head = config.tie_head;
  arch.loss_chunks = config.loss_chunk_count();
  const bool llama = config.family == ModelFamily::kLlama;
  arch.gated_mlp = llama;
  arch.biases = !llama;
  arch.rms_norm = llama;
  arch.learned_positions = !llama;
  arch.rotary = llama;
  arch.qkv_bias = llama && config.qkv_bias;
  arch.qk_norm = llama && config.qk_norm;
  arch.head_width = config.head_width;
  arch.sliding_window = config.sliding_window;
  arch.lora = config.lora;
  arch.moe = config.moe;
  arch.expert_hidden = config.moe.enabled() ? config.expert_width() : 0;
  arch.engine_shape = true;
  return arch;
}

const std::vector<std::string>& architecture_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names = preset_names();
    for (const auto& name : estimation_only_names()) names.push_back(name);
    return names;
  }();
  return kNames;
}

ModelConfig architecture_model_config(const std::string& name) {
  // The engine's presets (GPT-2 and the Llama family) and GPT-3 (Brown et al. 2020), which the
  // engine could build but nobody measured here.
  if (name == "gpt3-175b") return gpt3_175b();
  if (name == "llama3-405b") return llama3_405b();
  for (const auto& preset : preset_names()) {
    if (name == preset) return model_preset(name);
  }
  std::string known;
  for (const auto& each : architecture_names()) known += (known.empty() ? "" : ", ") + each;
  throw InvalidInput("--model", "unknown model '" + name + "' (known: " + known + ")");
}

bool is_engine_preset(const std::string& name) {
  const auto& only = estimation_only_names();
  return std::find(only.begin(), only.end(), name) == only.end();
}

Architecture architecture_preset(const std::string& name) {
  Architecture arch = from_model_config(architecture_model_config(name));
  arch.name = name;
  // The engine could build GPT-3, but no one measured it here: no calibrated figures apply.
  arch.engine_shape = is_engine_preset(name);
  return arch;
}

void validate(const Architecture& arch) {
  require_positive(arch.layers, "--layers");
  require_positive(arch.d_model, "--d-model");
  require_positive(arch.heads, "--heads");
  require_positive(arch.kv_heads, "--kv-heads");
  require_positive(arch.mlp_hidden, "--mlp-hidden");
  require_positive(arch.seq_len, "--seq-len");
  require_positive(arch.vocab, "--vocab");
  // The engine's limits: beyond them counts overflow and the replay takes minutes.
  auto require_at_most = [](int64_t value, int64_t limit, const char* flag) {
    if (value > limit) {
      throw InvalidInput(
          flag, "must be at most " + std::to_string(limit) + ", got " + std::to_string(value));
    }
  };
  require_at_most(arch.layers, kMaxLayers, "--layers");
  require_at_most(arch.d_model, kMaxDModel, "--d-model");
  require_at_most(arch.seq_len, kMaxSeqLen, "--seq-len");
  require_at_most(arch.vocab, kMaxVocab, "--vocab");
  require_at_most(arch.mlp_hidden, kMaxMlpHidden, "--mlp-hidden");
  if (arch.head_width < 0) throw InvalidInput("--head-dim", "must not be negative");
  require_at_most(arch.head_width, kMaxDModel, "--head-dim");
  if (arch.sliding_window < 0) throw InvalidInput("--sliding-window", "must not be negative");
  require_at_most(arch.sliding_window, kMaxSeqLen, "--sliding-window");
  require_at_most(arch.heads, kMaxDModel, "--heads");
  require_at_most(arch.heads * arch.head_dim(), kMaxDModel, "--head-dim");
  if (arch.head_width == 0 && arch.d_model % arch.heads != 0) {
    throw InvalidInput("--heads", std::to_string(arch.heads) + " heads do not divide " +
                                      setting("d_model", std::to_string(arch.d_model)));
  }
  if (arch.kv_heads > arch.heads || arch.heads % arch.kv_heads != 0) {
    throw InvalidInput("--kv-heads", std::to_string(arch.kv_heads) +
                                         " key/value heads do not divide " +
                                         setting("heads", std::to_string(arch.heads)));
  }
  if (arch.rotary && arch.head_dim() % 2 != 0) {
    throw InvalidInput("--heads", "rotary positions need an even head width, got " +
                                      std::to_string(arch.head_dim()));
  }
  validate_experts(arch.moe, arch.layers, arch.d_model, arch.expert_hidden);
  if (arch.moe.enabled() && arch.expert_hidden <= 0) {
    throw InvalidInput("--expert-hidden", "must be positive");
  }
  if (!(arch.dropout >= 0.0 && arch.dropout < 1.0)) {
    throw InvalidInput("--dropout", "must be in [0, 1), got " + std::to_string(arch.dropout));
  }
}

namespace {

// One block's projection weights, with `experts` of a mixture's experts counted.
int64_t block_matmul_parameters(const Architecture& arch, int64_t experts) {
  const int64_t d = arch.d_model;
  const int64_t q = arch.q_dim();
  const int64_t attention = d * (q + 2 * arch.kv_dim()) + q * d;  // q, k, v and output
  if (!arch.moe.enabled()) return attention + (arch.gated_mlp ? 3 : 2) * d * arch.mlp_hidden;
  const int64_t shared = arch.moe.shared_expert_hidden;
  return attention + d * arch.moe.experts          // the router
         + experts * 3 * d * arch.expert_hidden    // the experts
         + (shared > 0 ? 3 * d * shared + d : 0);  // a shared expert and its gate
}

}  // namespace

int64_t matmul_parameter_count(const Architecture& arch) {
  return arch.layers * block_matmul_parameters(arch, arch.moe.experts_per_token) +
         arch.vocab * arch.d_model;
}

int64_t active_parameter_count(const Architecture& arch) {
  if (!arch.moe.enabled()) return parameter_count(arch);
  return parameter_count(arch) -
         arch.layers * (block_matmul_parameters(arch, arch.moe.experts) -
                        block_matmul_parameters(arch, arch.moe.experts_per_token));
}

int64_t expert_parameter_count(const Architecture& arch) {
  return arch.layers * arch.moe.experts * 3 * arch.d_model * arch.expert_hidden;
}

int64_t expert_rank_parameter_count(const Architecture& arch, int64_t expert_ranks) {
  const int64_t experts = expert_parameter_count(arch);
  return parameter_count(arch) - experts + experts / expert_ranks;
}

int64_t largest_parameter_count(const Architecture& arch) {
  const int64_t d = arch.d_model;
  const int64_t mlp_width = arch.moe.enabled()
                                ? std::max(arch.expert_hidden, arch.moe.shared_expert_hidden)
                                : arch.mlp_hidden;
  return std::max({arch.vocab * d, arch.learned_positions ? arch.seq_len * d : 0,
                   (arch.q_dim() + 2 * arch.kv_dim()) * d, arch.q_dim() * d,
                   (arch.gated_mlp ? 2 : 1) * mlp_width * d, arch.moe.experts * d});
}

int64_t parameter_count(const Architecture& arch) {
  const int64_t d = arch.d_model;
  const int64_t norm = arch.rms_norm ? d : 2 * d;
  int64_t biases = 0;
  if (arch.biases) {
    biases = (arch.q_dim() + 2 * arch.kv_dim()) + d                           // attention
             + (arch.gated_mlp ? 2 * arch.mlp_hidden : arch.mlp_hidden) + d;  // MLP
  } else if (arch.qkv_bias) {
    biases = arch.q_dim() + 2 * arch.kv_dim();
  }
  const int64_t head_norms = arch.qk_norm ? 2 * arch.head_dim() : 0;
  const int64_t blocks = arch.layers * (block_matmul_parameters(arch, arch.moe.experts) + 2 * norm +
                                        head_norms + biases);
  const int64_t embeddings =
      arch.vocab * d * (arch.tied_head ? 1 : 2) + (arch.learned_positions ? arch.seq_len * d : 0);
  return blocks + embeddings + norm;
}

}  // namespace rematlab::estimate
