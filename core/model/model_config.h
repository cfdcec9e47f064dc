// The shape of the model: its family (GPT-2 or Llama), sizes, named presets with the published
// shapes, and their validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/lora_options.h"
#include "model/moe_options.h"

namespace rematlab {

enum class AttentionKind {
  kSdpa,  // LibTorch's fused scaled_dot_product_attention
  kMath,  // explicit QKᵀ → softmax → ·V, which keeps the s×s scores for backward
};

enum class ModelFamily {
  kGpt,    // GPT-2: LayerNorm, biases, GELU MLP, learned positions, tied head
  kLlama,  // Llama: RMSNorm, no biases, SwiGLU MLP, rotary positions, grouped-query attention
};

// `loss_chunks` value that picks the number of slices from the shape (see loss_chunk_count).
inline constexpr int64_t kAutoLossChunks = -1;

struct ModelConfig {
  ModelFamily family = ModelFamily::kGpt;
  int64_t layers = 2;
  int64_t d_model = 64;
  int64_t heads = 4;
  int64_t kv_heads = 0;    // key/value heads (grouped-query attention); 0: as many as heads
  int64_t mlp_hidden = 0;  // 0: the family's rule (GPT 4·d; Llama ⅔·4·d up to a multiple of 64)
  int64_t seq_len = 64;
  int64_t vocab = 256;
  double dropout = 0.0;
  AttentionKind attention = AttentionKind::kSdpa;
  bool tie_head = true;         // the LM head is the token embedding
  double rope_theta = 10000.0;  // Llama's rotary base
  bool qkv_bias = false;        // Llama family: biases on q, k and v (Qwen 2); GPT has all
  int64_t head_width = 0;       // values per head; 0: d_model / heads (Qwen 3's small ones differ)
  bool qk_norm = false;         // Llama family: an RMSNorm on each head's q and k (Qwen 3)
  int64_t sliding_window = 0;   // each token attends to this many latest keys (Mistral); 0: all
  int64_t loss_chunks = 0;      // the head and loss in this many slices of tokens (0, 1: whole)
  LoraOptions lora;             // adapters on a frozen model (fine-tuning); none by default
  MoeOptions moe;               // Llama family: each block's MLP a mixture of experts

  int64_t head_dim() const { return head_width > 0 ? head_width : d_model / heads; }
  int64_t key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  // Another family on the same sizes: what only one family has (grouped K/V heads, the MLP
  // width rule, the head's tying, the rotary base) goes back to the new family's defaults, so
  // `--preset llama-small --arch gpt` is GPT-2 and not a GPT with Llama's K/V heads.
  void switch_family(ModelFamily to);
  int64_t mlp_width() const;
  // Each routed expert's SwiGLU width (the MLP's width unless the experts have their own).
  int64_t expert_width() const { return moe.expert_hidden > 0 ? moe.expert_hidden : mlp_width(); }
  // Slices the head and loss run in: loss_chunks, or for kAutoLossChunks as many as keep a
  // slice's logits no wider than 4·d_model (the MLP's width) per token: ⌈vocab / 4·d⌉.
  int64_t loss_chunk_count() const;
  // Exact parameter count of the engine's model, its adapters included.
  int64_t parameter_count() const;
  // The parameters one token's forward uses: with experts, its k routed experts of each block
  // (and the shared one) instead of all of them; else every parameter.
  int64_t active_parameter_count() const;
  // One block's MLP parameters (Llama family), with `experts_counted` of its routed experts: all
  // of them for the model's size, k for what a token uses.
  int64_t mlp_parameter_count(int64_t experts_counted) const;
  // The parameters that train: the adapters' under LoRA, else all of them.
  int64_t trainable_parameter_count() const;
  // The adapters' parameters (0 without LoRA), and the rest: the model they adapt.
  int64_t adapter_parameter_count() const;
  int64_t base_parameter_count() const;
  // Of the base: the projections' weights and biases (what --base-precision stores), and the
  // bytes a frozen base holds (0 without LoRA: then every parameter trains). Dense MLPs only:
  // fine-tuning refuses experts.
  int64_t projection_parameter_count() const;
  int64_t frozen_base_bytes() const;
};

// LoRA as `--finetune lora` gives it without other flags: rank 16, alpha 32, on every
// projection the family has (GPT's MLP has no gate).
LoraOptions default_lora_options(ModelFamily family);

// The preset names in the order users see them: GPT's, then Llama's.
const std::vector<std::string>& preset_names();
// Throws InvalidInput("--preset", …) for an unknown name.
ModelConfig model_preset(const std::string& name);
// The preset of that name, or null for another (a label, "custom").
const ModelConfig* find_model_preset(const std::string& name);

// Throws InvalidInput naming the offending flag.
void validate(const ModelConfig& config);
// The expert settings alone (the estimator's shapes check them too), for experts `expert_width`
// wide in `layers` blocks of `d_model`.
inline constexpr double kMaxExpertWeights = 1e15;
void validate_experts(const MoeOptions& moe, int64_t layers, int64_t d_model, int64_t expert_width);

std::string to_string(AttentionKind kind);
AttentionKind parse_attention(const std::string& text);  // throws InvalidInput("--attention", …)
std::string to_string(ModelFamily family);
ModelFamily parse_family(const std::string& text);  // throws InvalidInput("--arch", …)
// "auto" or a whole number ≥ 0; throws InvalidInput("--loss-chunks", …).
// Shape limits far beyond any model trained today, small enough that no count overflows int64;
// the engine and the estimator refuse beyond them.
inline constexpr int64_t kMaxLayers = 10'000;
inline constexpr int64_t kMaxDModel = int64_t{1} << 20;
inline constexpr int64_t kMaxSeqLen = int64_t{1} << 24;
inline constexpr int64_t kMaxVocab = int64_t{1} << 27;
inline constexpr int64_t kMaxMlpHidden = int64_t{1} << 22;
inline constexpr int64_t kMaxLossChunks = 1'000'000;

int64_t parse_loss_chunks(const std::string& text);
// How a token's k routing weights are taken (--expert-weights): "normalised" (true: scaled to sum
// to 1) or "softmax" (false: the probabilities as they are); throws InvalidInput otherwise.
bool parse_expert_weights(const std::string& text);
std::string expert_weights_text(bool normalised);
// Slices for a `loss_chunks` setting (kAutoLossChunks included) on this vocabulary and width.
int64_t resolve_loss_chunks(int64_t loss_chunks, int64_t vocab, int64_t d_model);

}  // namespace rematlab
