#include "model/model_config.h"

#include <algorithm>
#include <cmath>

#include "common/errors.h"

namespace rematlab {
namespace {

struct Preset {
  const char* name;
  ModelConfig config;
};

ModelConfig gpt(int64_t layers, int64_t d_model, int64_t heads, int64_t seq_len, int64_t vocab) {
  ModelConfig config;
  config.layers = layers;
  config.d_model = d_model;
  config.heads = heads;
  config.seq_len = seq_len;
  config.vocab = vocab;
  return config;
}

struct LlamaShape {
  int64_t layers, d_model, heads, kv_heads, mlp_hidden, seq_len, vocab;
  bool tie_head;
  double rope_theta;
};

ModelConfig llama(const LlamaShape& shape) {
  ModelConfig config = gpt(shape.layers, shape.d_model, shape.heads, shape.seq_len, shape.vocab);
  config.family = ModelFamily::kLlama;
  config.kv_heads = shape.kv_heads;
  config.mlp_hidden = shape.mlp_hidden;
  config.tie_head = shape.tie_head;
  config.rope_theta = shape.rope_theta;
  return config;
}

ModelConfig with_qkv_bias(ModelConfig config) {
  config.qkv_bias = true;  // Qwen 2's
  return config;
}

ModelConfig with_qk_norm(ModelConfig config) {
  config.qk_norm = true;  // Qwen 3's
  return config;
}

ModelConfig with_sliding_window(ModelConfig config, int64_t window) {
  config.sliding_window = window;  // Mistral 7B v0.1's
  return config;
}

ModelConfig with_head_width(ModelConfig config, int64_t width) {
  config.head_width = width;  // wider heads than d_model / heads (Qwen 3's small ones)
  return config;
}

ModelConfig with_experts(ModelConfig config, const MoeOptions& moe) {
  config.moe = moe;
  return config;
}

// The published shapes (the models' config.json; the training sequence 8192 where they allow
// more): parameter counts are checked in tests.
const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"tiny", gpt(2, 64, 4, 64, 256)},
      {"small", gpt(12, 256, 8, 256, 256)},
      {"gpt2-124m", gpt(12, 768, 12, 1024, 50257)},
      {"gpt2-350m", gpt(24, 1024, 16, 1024, 50257)},
      // CPU-sized Llamas for tests and studies: grouped-query attention (2 query heads per
      // key/value head) and untied heads, as the big ones.
      {"llama-tiny", llama({2, 64, 4, 2, 192, 64, 256, false, 10000.0})},
      {"llama-small", llama({12, 256, 8, 4, 704, 256, 256, false, 10000.0})},
      {"llama3.2-1b", llama({16, 2048, 32, 8, 8192, 2048, 128256, true, 500000.0})},
      {"llama2-7b", llama({32, 4096, 32, 32, 11008, 4096, 32000, false, 10000.0})},
      {"llama3-8b", llama({32, 4096, 32, 8, 14336, 8192, 128256, false, 500000.0})},
      {"mistral-7b",
       with_sliding_window(llama({32, 4096, 32, 8, 14336, 8192, 32000, false, 10000.0}), 4096)},
      {"mistral-7b-v0.3", llama({32, 4096, 32, 8, 14336, 8192, 32768, false, 1000000.0})},
      {"qwen2.5-7b", with_qkv_bias(llama({28, 3584, 28, 4, 18944, 8192, 152064, false, 1e6}))},
      {"qwen3-8b", with_qk_norm(llama({36, 4096, 32, 8, 12288, 8192, 151936, false, 1e6}))},
      {"llama2-70b", llama({80, 8192, 64, 8, 28672, 4096, 32000, false, 10000.0})},
      // Mixtures of experts: a CPU-sized one (4 experts, 2 a token), then the published ones.
      {"moe-tiny", with_experts(llama({2, 64, 4, 2, 96, 64, 256, false, 10000.0}),
                                {4, 2, 0, 0, true, 0.01, 0.0})},
      {"mixtral-8x7b", with_experts(llama({32, 4096, 32, 8, 14336, 8192, 32000, false, 1e6}),
                                    {8, 2, 0, 0, true, 0.02, 0.0})},
      {"qwen3-30b-a3b",
       with_experts(
           with_head_width(with_qk_norm(llama({48, 2048, 32, 4, 6144, 8192, 151936, false, 1e6})),
                           128),
           {128, 8, 768, 0, true, 0.001, 0.0})},
  };
  return kPresets;
}

void require_positive(int64_t value, const char* flag) {
  if (value <= 0) throw InvalidInput(flag, "must be positive, got " + std::to_string(value));
}

void require_at_most(int64_t value, int64_t limit, const char* flag) {
  if (value > limit) {
    throw InvalidInput(
        flag, std::to_string(value) + " is more than the limit of " + std::to_string(limit));
  }
}

}  // namespace

int64_t ModelConfig::mlp_width() const {
  if (mlp_hidden > 0) return mlp_hidden;
  if (family == ModelFamily::kGpt) return 4 * d_model;
  constexpr int64_t kMultiple = 64;
  const int64_t two_thirds = 8 * d_model / 3;  // SwiGLU keeps the weights of a 4·d MLP
  return kMultiple * ((two_thirds + kMultiple - 1) / kMultiple);
}

void ModelConfig::switch_family(ModelFamily to) {
  if (to == family) return;
  family = to;
  kv_heads = 0;
  mlp_hidden = 0;
  tie_head = to == ModelFamily::kGpt;
  rope_theta = ModelConfig{}.rope_theta;
  qkv_bias = false;
  qk_norm = false;
  moe = MoeOptions{};  // experts are the Llama family's
  if (to == ModelFamily::kGpt) lora.targets &= ~static_cast<uint32_t>(kLoraGate);
}

LoraOptions default_lora_options(ModelFamily family) {
  LoraOptions lora;
  lora.rank = 16;
  lora.alpha = 32.0;
  lora.targets = family == ModelFamily::kGpt ? kEveryLoraTarget & ~static_cast<uint32_t>(kLoraGate)
                                             : kEveryLoraTarget;
  return lora;
}

int64_t ModelConfig::loss_chunk_count() const {
  return resolve_loss_chunks(loss_chunks, vocab, d_model);
}

int64_t resolve_loss_chunks(int64_t loss_chunks, int64_t vocab, int64_t d_model) {
  if (loss_chunks == kAutoLossChunks)
    return std::max<int64_t>(1, (vocab + 4 * d_model - 1) / (4 * d_model));
  return std::max<int64_t>(1, loss_chunks);
}

int64_t ModelConfig::adapter_parameter_count() const {
  if (!lora.enabled()) return 0;
  const int64_t d = d_model;
  const int64_t hidden = mlp_width();
  const int64_t q = heads * head_dim();
  const int64_t kv = key_value_heads() * head_dim();
  // An adapter on a projection from `in` to `out` values: A (rank × in) and B (out × rank).
  auto adapter = [&](LoraTarget target, int64_t in, int64_t out) {
    return lora.adapts(target) ? lora.rank * (in + out) : 0;
  };
  const int64_t per_block = adapter(kLoraQ, d, q) + adapter(kLoraK, d, kv) +
                            adapter(kLoraV, d, kv) + adapter(kLoraO, q, d) +
                            adapter(kLoraGate, d, hidden) + adapter(kLoraUp, d, hidden) +
                            adapter(kLoraDown, hidden, d);
  return layers * per_block;
}

int64_t ModelConfig::projection_parameter_count() const {
  const int64_t d = d_model;
  const int64_t hidden = mlp_width();
  const int64_t q = heads * head_dim();
  const int64_t qkv_width = (heads + 2 * key_value_heads()) * head_dim();
  const bool gpt = family == ModelFamily::kGpt;
  const int64_t up = gpt ? hidden : 2 * hidden;
  const int64_t per_block = d * qkv_width + (gpt || qkv_bias ? qkv_width : 0) + q * d +
                            (gpt ? d : 0) + d * up + (gpt ? up : 0) + hidden * d + (gpt ? d : 0);
  return layers * per_block + (tie_head ? 0 : vocab * d);
}

int64_t ModelConfig::frozen_base_bytes() const {
  if (!lora.enabled()) return 0;
  const int64_t base = base_parameter_count();
  if (lora.base == BasePrecision::kFp32) return 4 * base;
  if (lora.base == BasePrecision::kBf16) {
    const int64_t projections = projection_parameter_count();
    return 2 * projections + 4 * (base - projections);  // the embedding and norms stay fp32
  }
  // Quantised: the blocks' four weight matrices in codes and scales; their biases, an untied
  // head, the embedding and the norms stay fp32 (model/quantised_projection.h).
  const QuantisedFormat format = quantised_format(lora.base);
  const int64_t d = d_model;
  const int64_t hidden = mlp_width();
  const int64_t q = heads * head_dim();
  const int64_t qkv_width = (heads + 2 * key_value_heads()) * head_dim();
  const int64_t up = family == ModelFamily::kGpt ? hidden : 2 * hidden;
  const int64_t matrices = d * qkv_width + q * d + d * up + hidden * d;
  const int64_t quantised =
      quantised_bytes(qkv_width, d * qkv_width, format) + quantised_bytes(d, q * d, format) +
      quantised_bytes(up, d * up, format) + quantised_bytes(d, hidden * d, format);
  return layers * quantised + 4 * (base - layers * matrices);
}

int64_t ModelConfig::trainable_parameter_count() const {
  return lora.enabled() ? adapter_parameter_count() : parameter_count();
}

int64_t ModelConfig::parameter_count() const {
  return base_parameter_count() + adapter_parameter_count();
}

int64_t ModelConfig::base_parameter_count() const {
  const int64_t d = d_model;
  const int64_t hidden = mlp_width();
  const int64_t attention_width = heads * head_dim();
  const int64_t qkv_width = (heads + 2 * key_value_heads()) * head_dim();
  const int64_t head = tie_head ? 0 : vocab * d;
  if (family == ModelFamily::kGpt) {
    const int64_t per_block = 2 * (2 * d)                    // two LayerNorms
                              + (d * qkv_width + qkv_width)  // fused QKV
                              + (attention_width * d + d)    // attention output
                              + (d * hidden + hidden)        // MLP up
                              + (hidden * d + d);            // MLP down
    return vocab * d + seq_len * d + layers * per_block + 2 * d + head;
  }
  const int64_t per_block = 2 * d                                         // two RMSNorms
                            + (qk_norm ? 2 * head_dim() : 0)              // q and k norms
                            + d * qkv_width + (qkv_bias ? qkv_width : 0)  // fused QKV
                            + attention_width * d                         // attention output
                            + mlp_parameter_count(moe.experts);
  return vocab * d + layers * per_block + d + head;
}

int64_t ModelConfig::mlp_parameter_count(int64_t experts_counted) const {
  const int64_t d = d_model;
  if (!moe.enabled()) return 3 * d * mlp_width();  // gate, up and down
  const int64_t shared = moe.shared_expert_hidden > 0 ? 3 * d * moe.shared_expert_hidden + d : 0;
  return d * moe.experts                             // the router
         + experts_counted * 3 * d * expert_width()  // each expert's gate, up and down
         + shared;                                   // a shared expert and its gate
}

int64_t ModelConfig::active_parameter_count() const {
  if (!moe.enabled()) return parameter_count();
  return parameter_count() -
         layers * (mlp_parameter_count(moe.experts) - mlp_parameter_count(moe.experts_per_token));
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const auto& preset : presets()) names.emplace_back(preset.name);
    return names;
  }();
  return kNames;
}

const ModelConfig* find_model_preset(const std::string& name) {
  for (const auto& preset : presets()) {
    if (name == preset.name) return &preset.config;
  }
  return nullptr;
}

ModelConfig model_preset(const std::string& name) {
  if (const ModelConfig* preset = find_model_preset(name)) return *preset;
  std::string known;
  for (const auto& preset : presets())
    known += std::string(known.empty() ? "" : ", ") + preset.name;
  throw InvalidInput("--preset", "unknown preset '" + name + "' (known: " + known + ")");
}

namespace {

void validate_lora(const ModelConfig& config) {
  const LoraOptions& lora = config.lora;
  if (lora.rank < 0) throw InvalidInput("--lora-rank", "must not be negative");
  if (!lora.enabled()) {
    if (lora.base != BasePrecision::kFp32) {
      throw InvalidInput("--base-precision",
                         "goes with --finetune lora (a model that trains keeps fp32 weights)");
    }
    return;
  }
  require_at_most(lora.rank, kMaxLoraRank, "--lora-rank");
  if (!(std::isfinite(lora.alpha) && lora.alpha > 0.0)) {
    throw InvalidInput("--lora-alpha", "must be a positive number such as 32");
  }
  if (lora.targets == 0 || (lora.targets & ~kEveryLoraTarget) != 0) {
    throw InvalidInput("--lora-targets", "names no projection the models have");
  }
  if (config.family == ModelFamily::kGpt && (lora.targets & kLoraGate) != 0) {
    throw InvalidInput("--lora-targets", "gpt's MLP has no gate projection (use up and down)");
  }
}

}  // namespace

void validate(const ModelConfig& config) {
  require_positive(config.layers, "--layers");
  require_positive(config.d_model, "--d-model");
  require_positive(config.heads, "--heads");
  require_positive(config.seq_len, "--seq-len");
  require_positive(config.vocab, "--vocab");
  require_at_most(config.layers, kMaxLayers, "--layers");
  require_at_most(config.d_model, kMaxDModel, "--d-model");
  require_at_most(config.seq_len, kMaxSeqLen, "--seq-len");
  require_at_most(config.vocab, kMaxVocab, "--vocab");
  require_at_most(config.mlp_hidden, kMaxMlpHidden, "--mlp-hidden");
  if (config.kv_heads < 0) throw InvalidInput("--kv-heads", "must not be negative");
  if (config.qkv_bias && config.family != ModelFamily::kLlama) {
    throw InvalidInput("--qkv-bias", "only llama models take it (gpt has every bias already)");
  }
  if (config.qk_norm && config.family != ModelFamily::kLlama) {
    throw InvalidInput("--qk-norm", "only llama models take it");
  }
  if (config.mlp_hidden < 0) throw InvalidInput("--mlp-hidden", "must not be negative");
  if (config.sliding_window < 0) throw InvalidInput("--sliding-window", "must not be negative");
  require_at_most(config.sliding_window, kMaxSeqLen, "--sliding-window");
  validate_lora(config);
  if (config.moe.enabled() && config.family != ModelFamily::kLlama) {
    throw InvalidInput("--experts", "only llama models take experts (SwiGLU experts)");
  }
  if (config.moe.enabled() && config.lora.enabled()) {
    throw InvalidInput("--finetune", "adapters on experts are not built (train the model whole)");
  }
  validate_experts(config.moe, config.layers, config.d_model, config.expert_width());
  if (config.head_width < 0) throw InvalidInput("--head-dim", "must not be negative");
  require_at_most(config.head_width, kMaxDModel, "--head-dim");
  // With a head width of its own nothing else bounds the heads: the query width is held to the
  // hidden size's limit, so no count made from it overflows.
  require_at_most(config.heads, kMaxDModel, "--heads");
  require_at_most(config.heads * config.head_dim(), kMaxDModel, "--head-dim");
  if (config.head_width == 0 && config.d_model % config.heads != 0) {
    throw InvalidInput("--heads", std::to_string(config.heads) + " heads do not divide " +
                                      setting("d_model", std::to_string(config.d_model)));
  }
  if (config.heads % config.key_value_heads() != 0) {
    throw InvalidInput("--kv-heads", std::to_string(config.key_value_heads()) +
                                         " key/value heads do not divide " +
                                         std::to_string(config.heads) + " query heads");
  }
  if (config.family == ModelFamily::kLlama && config.head_dim() % 2 != 0) {
    throw InvalidInput("--heads", "rotary positions need an even head width, got " +
                                      std::to_string(config.head_dim()));
  }
  if (!(config.dropout >= 0.0 && config.dropout < 1.0)) {
    throw InvalidInput("--dropout", "must be in [0, 1), got " + std::to_string(config.dropout));
  }
  if (!(std::isfinite(config.rope_theta) && config.rope_theta > 1.0)) {
    throw InvalidInput("--rope-theta", "must be a number above 1");
  }
  if (config.loss_chunks < kAutoLossChunks || config.loss_chunks > kMaxLossChunks) {
    throw InvalidInput("--loss-chunks", "must be auto or a whole number of slices up to " +
                                            std::to_string(kMaxLossChunks));
  }
}

std::string to_string(AttentionKind kind) { return kind == AttentionKind::kMath ? "math" : "sdpa"; }

AttentionKind parse_attention(const std::string& text) {
  if (text == "sdpa") return AttentionKind::kSdpa;
  if (text == "math") return AttentionKind::kMath;
  throw InvalidInput("--attention", "unknown attention '" + text + "' (use sdpa or math)");
}

std::string to_string(ModelFamily family) {
  return family == ModelFamily::kLlama ? "llama" : "gpt";
}

ModelFamily parse_family(const std::string& text) {
  if (text == "gpt") return ModelFamily::kGpt;
  if (text == "llama") return ModelFamily::kLlama;
  throw InvalidInput("--arch", "unknown architecture '" + text + "' (use gpt or llama)");
}

int64_t parse_loss_chunks(const std::string& text) {
  if (text == "auto") return kAutoLossChunks;
  std::size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || value < 0 || value > kMaxLossChunks) {
    throw InvalidInput("--loss-chunks", "'" + text + "' is not auto or a number of slices");
  }
  return value;
}

void validate_experts(const MoeOptions& moe, int64_t layers, int64_t d_model,
                      int64_t expert_width) {
  if (moe.experts < 0) throw InvalidInput("--experts", "must not be negative");
  if (!moe.enabled()) {
    if (moe.experts_per_token != 0 || moe.expert_hidden != 0 || moe.shared_expert_hidden != 0 ||
        moe.capacity_factor != 0.0 || moe.balance_coefficient != 0.0) {
      throw InvalidInput("--experts",
                         "is needed by the other expert settings (a dense MLP has none)");
    }
    return;
  }
  require_at_most(moe.experts, kMaxExperts, "--experts");
  if (moe.experts_per_token < 1 || moe.experts_per_token > moe.experts) {
    throw InvalidInput("--experts-per-token", "must be 1 to " + std::to_string(moe.experts) +
                                                  " (the experts), got " +
                                                  std::to_string(moe.experts_per_token));
  }
  if (moe.expert_hidden < 0) throw InvalidInput("--expert-hidden", "must not be negative");
  require_at_most(moe.expert_hidden, kMaxMlpHidden, "--expert-hidden");
  if (moe.shared_expert_hidden < 0) {
    throw InvalidInput("--shared-expert-hidden", "must not be negative");
  }
  require_at_most(moe.shared_expert_hidden, kMaxMlpHidden, "--shared-expert-hidden");
  if (!(std::isfinite(moe.balance_coefficient) && moe.balance_coefficient >= 0.0)) {
    throw InvalidInput("--balance-coefficient", "must be a number of at least 0 such as 0.01");
  }
  if (!(std::isfinite(moe.capacity_factor) && moe.capacity_factor >= 0.0 &&
        moe.capacity_factor <= static_cast<double>(kMaxExperts))) {
    throw InvalidInput("--capacity-factor",
                       "must be 0 (no token dropped) or a positive number such as 1.25");
  }
  // Every other size has its limit; all the experts' weights together must stay countable.
  const double weights = static_cast<double>(layers) * static_cast<double>(moe.experts) * 3.0 *
                         static_cast<double>(d_model) * static_cast<double>(expert_width);
  if (weights > kMaxExpertWeights) {
    throw InvalidInput("--experts",
                       "the experts hold more than 10^15 weights, beyond what "
                       "RematLab counts");
  }
}

bool parse_expert_weights(const std::string& text) {
  if (text == "normalised") return true;
  if (text == "softmax") return false;
  throw InvalidInput("--expert-weights",
                     "unknown weights '" + text + "' (use normalised or softmax)");
}

std::string expert_weights_text(bool normalised) { return normalised ? "normalised" : "softmax"; }

}  // namespace rematlab
