#include "cli/model_options.h"

#include <algorithm>
#include <iostream>
#include <utility>

#include "common/errors.h"

namespace rematlab::cli {

void ModelOptions::add_to(CLI::App& command) {
  CLI::Option* config =
      command.add_option("--model-config", model_config_,
                         "A Hugging Face config.json (llama, mistral, qwen2, qwen3, mixtral, "
                         "qwen2_moe, qwen3_moe, gpt2) as the "
                         "model's shape; the flags below refine it");
  if (CLI::Option* preset = command.get_option_no_throw("--preset")) config->excludes(preset);
  command.add_option("--arch", arch_,
                     "Model family: gpt (LayerNorm, GELU, learned positions) or llama (RMSNorm, "
                     "SwiGLU, rotary positions, grouped-query attention, no biases); default: "
                     "the preset's");
  command.add_option("--layers", layers_, "Transformer blocks (overrides the preset)");
  command.add_option("--d-model", d_model_, "Hidden size");
  command.add_option("--heads", heads_,
                     "Attention heads (must divide --d-model unless --head-dim is given)");
  command.add_option("--kv-heads", kv_heads_,
                     "Key/value heads, each shared by heads/kv-heads query heads (0: as many as "
                     "--heads)");
  command.add_option(
      "--head-dim", head_dim_,
      "Values per attention head (0: d-model / heads; Qwen 3's small models differ)");
  command.add_option("--mlp-hidden", mlp_hidden_,
                     "MLP inner width (0: 4·d-model for gpt, SwiGLU's ⅔ of that for llama)");
  command.add_option("--rope-theta", rope_theta_,
                     "llama: base of the rotary positions' frequencies (default: the preset's, "
                     "10000; Llama 3 uses 500000)");
  command.add_option("--qkv-bias", qkv_bias_,
                     "llama: true gives q, k and v biases (Qwen 2; default: the preset's, false)");
  command.add_option("--qk-norm", qk_norm_,
                     "llama: true normalises each head's q and k (RMSNorm, Qwen 3; default: the "
                     "preset's, false)");
  command.add_option("--sliding-window", sliding_window_,
                     "Each token attends to the N latest tokens, itself included (Mistral 7B "
                     "v0.1: 4096); 0: the whole sequence (default: the preset's)");
  command.add_option("--tie-head", tie_head_,
                     "true: the output head is the token embedding; false: a head of its own");
  command.add_option("--loss-chunks", loss_chunks_,
                     "The head and loss in N slices of the tokens, each recomputed in backward, "
                     "so the full logits never exist at once; auto: ⌈vocab / 4·d-model⌉");
  command.add_option("--seq-len", seq_len_, "Sequence length in tokens");
  command.add_option("--vocab", vocab_, "Vocabulary size");
  command.add_option("--dropout", dropout_, "Dropout rate in [0, 1) (default 0)");
  command.add_option("--attention", attention_, "sdpa (fused) or math (keeps the s×s scores)")
      ->capture_default_str();
  command.add_option("--experts", experts_,
                     "llama: each block's MLP a mixture of N SwiGLU experts (0: dense; default: "
                     "the preset's)");
  command.add_option("--experts-per-token", experts_per_token_,
                     "With experts: the k experts each token is sent to (default 2)");
  command.add_option("--expert-hidden", expert_hidden_,
                     "With experts: each expert's inner width (0: --mlp-hidden)");
  command.add_option("--shared-expert-hidden", shared_expert_hidden_,
                     "With experts: a shared expert every token passes through, of this width, "
                     "gated per token (Qwen 2 MoE); 0: none");
  command.add_option("--expert-weights", expert_weights_,
                     "With experts: normalised (a token's k weights sum to 1; Mixtral, Qwen 3 "
                     "MoE) or softmax (the probabilities as they are; Qwen 2 MoE)");
  command.add_option("--balance-coefficient", balance_coefficient_,
                     "With experts: the load-balancing loss's weight in the loss trained on "
                     "(router_aux_loss_coef; Mixtral 0.02)");
  command.add_option("--capacity-factor", capacity_factor_,
                     "With experts: each expert takes at most factor × its even share of a "
                     "micro-batch's tokens, the rest pass it by; 0 (default): none dropped");
  command.add_option("--finetune", finetune_,
                     "full (default): every parameter trains; lora: the model is frozen and "
                     "low-rank adapters on its projections train");
  command.add_option("--lora-rank", lora_rank_, "With --finetune lora: the adapters' rank (16)");
  command.add_option("--lora-alpha", lora_alpha_,
                     "With --finetune lora: their output is scaled by alpha / rank (alpha 32)");
  command.add_option("--lora-targets", lora_targets_,
                     "With --finetune lora: the projections adapted, any of q,k,v,o,gate,up,down "
                     "(default all the model has)");
  command.add_option("--base-precision", base_precision_,
                     "With --finetune lora: the frozen projections' weights in fp32 (default), "
                     "bf16 (half the bytes; needs --precision bf16), int8 or nf4 (quantised)");
}

void ModelOptions::apply_fine_tuning(ModelConfig& model) const {
  if (finetune_ && *finetune_ != "full" && *finetune_ != "lora") {
    throw InvalidInput("--finetune", "unknown fine-tuning '" + *finetune_ + "' (use full or lora)");
  }
  if (finetune_ != "lora") {
    for (const auto& [given, flag] : {std::pair{lora_rank_.has_value(), "--lora-rank"},
                                      std::pair{lora_alpha_.has_value(), "--lora-alpha"},
                                      std::pair{lora_targets_.has_value(), "--lora-targets"},
                                      std::pair{base_precision_.has_value(), "--base-precision"}}) {
      if (given) throw InvalidInput(flag, "goes with --finetune lora");
    }
    if (finetune_) model.lora = LoraOptions{};
    return;
  }
  model.lora = default_lora_options(model.family);
  if (lora_rank_) {
    if (*lora_rank_ < 1) throw InvalidInput("--lora-rank", "must be at least 1");
    model.lora.rank = *lora_rank_;
  }
  if (lora_alpha_) model.lora.alpha = *lora_alpha_;
  if (lora_targets_ && *lora_targets_ != "all") {
    model.lora.targets = parse_lora_targets(*lora_targets_);
  }
  if (base_precision_) model.lora.base = parse_base_precision(*base_precision_);
}

void ModelOptions::apply_experts(ModelConfig& model) const {
  MoeOptions& moe = model.moe;
  if (experts_) moe.experts = *experts_;
  if (experts_per_token_) moe.experts_per_token = *experts_per_token_;
  // Experts asked for on a dense model: two a token unless told (Mixtral's).
  if (experts_ && moe.experts > 0 && moe.experts_per_token == 0) {
    moe.experts_per_token = std::min<int64_t>(2, moe.experts);
  }
  if (experts_ && moe.experts == 0) moe = MoeOptions{};  // --experts 0: dense again
  if (expert_hidden_) moe.expert_hidden = *expert_hidden_;
  if (shared_expert_hidden_) moe.shared_expert_hidden = *shared_expert_hidden_;
  if (expert_weights_) moe.normalise_weights = parse_expert_weights(*expert_weights_);
  if (balance_coefficient_) moe.balance_coefficient = *balance_coefficient_;
  if (capacity_factor_) moe.capacity_factor = *capacity_factor_;
}

bool ModelOptions::gives_experts() const {
  return experts_ || experts_per_token_ || expert_hidden_ || shared_expert_hidden_ ||
         expert_weights_ || balance_coefficient_ || capacity_factor_;
}

bool ModelOptions::gives_fine_tuning() const {
  return finetune_ || lora_rank_ || lora_alpha_ || lora_targets_ || base_precision_;
}

const ImportedConfig& ModelOptions::imported() const {
  if (!imported_) {
    imported_ = import_hf_config(*model_config_);
    for (const std::string& warning : imported_->warnings) {
      std::cerr << "warning: --model-config: " << warning << "\n";
    }
  }
  return *imported_;
}

std::string ModelOptions::source() const {
  return model_config_ ? imported_model_label(imported(), *model_config_) : "";
}

void ModelOptions::apply(ModelConfig& model) const {
  if (model_config_) {
    // The file's shape replaces the preset's; how it is trained stays the command's.
    const ModelConfig& file = imported().model;
    const ModelConfig kept = model;
    model = file;
    model.dropout = kept.dropout;
    model.attention = kept.attention;
    model.loss_chunks = kept.loss_chunks;
  }
  if (!arch_.empty()) model.switch_family(parse_family(arch_));
  if (layers_) model.layers = *layers_;
  if (d_model_) model.d_model = *d_model_;
  if (heads_) model.heads = *heads_;
  if (kv_heads_) model.kv_heads = *kv_heads_;
  if (head_dim_) model.head_width = *head_dim_;
  if (mlp_hidden_) model.mlp_hidden = *mlp_hidden_;
  if (rope_theta_) {
    if (model.family != ModelFamily::kLlama) {
      throw InvalidInput("--rope-theta", "only llama models have rotary positions");
    }
    model.rope_theta = *rope_theta_;
  }
  if (tie_head_) model.tie_head = *tie_head_;
  if (qkv_bias_) {
    if (model.family != ModelFamily::kLlama) {
      throw InvalidInput("--qkv-bias", "only llama models take it (gpt has every bias already)");
    }
    model.qkv_bias = *qkv_bias_;
  }
  if (qk_norm_) {
    if (model.family != ModelFamily::kLlama) {
      throw InvalidInput("--qk-norm", "only llama models take it");
    }
    model.qk_norm = *qk_norm_;
  }
  if (sliding_window_) model.sliding_window = *sliding_window_;
  if (!loss_chunks_.empty()) model.loss_chunks = parse_loss_chunks(loss_chunks_);
  if (seq_len_) model.seq_len = *seq_len_;
  if (vocab_) model.vocab = *vocab_;
  if (dropout_) model.dropout = *dropout_;
  apply_experts(model);
  model.attention = parse_attention(attention_);
  // A head width of d_model / heads is the default's: one model, one record (and profile key).
  if (model.head_width > 0 && model.head_width * model.heads == model.d_model) {
    model.head_width = 0;
  }
  apply_fine_tuning(model);
}

bool ModelOptions::changes_shape() const {
  return model_config_.has_value() || !arch_.empty() || layers_ || d_model_ || heads_ ||
         kv_heads_ || head_dim_ || mlp_hidden_ || seq_len_ || vocab_ || tie_head_ || qkv_bias_ ||
         qk_norm_ || sliding_window_ || !loss_chunks_.empty() || dropout_ || attention_ != "sdpa" ||
         gives_experts();
}

}  // namespace rematlab::cli
