#include "cli/run_options.h"

#include "checkpoint/checkpoint_policy.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "model/model_config.h"

namespace rematlab::cli {

void RunOptions::add_to(CLI::App& command, const std::string& budget_help) {
  std::string presets;
  for (const auto& name : preset_names()) presets += (presets.empty() ? "" : ", ") + name;
  command.add_option("--preset", preset_, "Model preset: " + presets)->capture_default_str();
  command.add_option("--arch", arch_,
                     "Model family: gpt (LayerNorm, GELU, learned positions) or llama (RMSNorm, "
                     "SwiGLU, rotary positions, grouped-query attention, no biases); default: "
                     "the preset's");
  command.add_option("--layers", layers_, "Transformer blocks (overrides the preset)");
  command.add_option("--d-model", d_model_, "Hidden size");
  command.add_option("--heads", heads_, "Attention heads (must divide --d-model)");
  command.add_option("--kv-heads", kv_heads_,
                     "Key/value heads, each shared by heads/kv-heads query heads (0: as many as "
                     "--heads)");
  command.add_option("--mlp-hidden", mlp_hidden_,
                     "MLP inner width (0: 4·d-model for gpt, SwiGLU's ⅔ of that for llama)");
  command.add_option("--rope-theta", rope_theta_,
                     "llama: base of the rotary positions' frequencies (default: the preset's, "
                     "10000; Llama 3 uses 500000)");
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
  command.add_option("--batch", batch_, "Micro-batch size (default 8)");
  command.add_option("--accum", accum_, "Micro-batches per optimizer step (default 1)");
  command.add_option("--steps", steps_, "Optimizer steps (default 20)");
  command.add_option("--warmup-steps", warmup_steps_,
                     "Steps excluded from the medians (default 1)");
  command.add_option("--lr", lr_, "AdamW learning rate (default 1e-3)");
  command.add_option("--seed", seed_, "Seed for weights, data and dropout (default 0)");
  command.add_option("--threads", threads_,
                     "LibTorch intra-op threads, its BLAS included (default: LibTorch's)");
  command.add_option("--precision", precision_, "fp32, bf16 (autocast) or fp16 (CUDA only)")
      ->capture_default_str();
  command.add_option("--device", device_, "cpu, cuda or cuda:N")->capture_default_str();
  command
      .add_option("--checkpoint", checkpoint_,
                  "none | every:K | sublayer:A,F | selective | schedule:P=K,… | keep:LIST "
                  "(qkv, attn-out, mlp-in, matmul)")
      ->capture_default_str();
  command
      .add_option("--offload", offload_,
                  "none | disk[:DIR] (saved segment inputs to files) | host (pinned memory; CUDA)")
      ->capture_default_str();
  command.add_option("--data", data_, "synthetic[:markov|:copy] or text:FILE")
      ->capture_default_str();
  command.add_option("--budget", budget_,
                     budget_help.empty() ? "Memory budget (bytes, KiB, MiB, GiB): a step above "
                                           "it ends the run as oom"
                                         : budget_help);
  command.add_flag("--timeline", timeline_, "Record one step's memory timeline");
  command.add_option("--loss-scale", loss_scale_,
                     "fp16: initial dynamic loss scale (default 65536)");
  command.add_option("--loss-scale-growth-interval", loss_scale_growth_,
                     "fp16: good steps in a row that double the loss scale (default 2000)");
  command.add_flag("--tf32", tf32_,
                   "CUDA: fp32 matmuls on TF32 tensor cores (faster, ~1e-3 relative error)");
  command.add_flag("--deterministic", deterministic_,
                   "Deterministic algorithms only (`check` turns this on for CUDA)");
  command.add_option("--peak-flops", peak_flops_,
                     "FLOP/s for MFU and HFU (default: measured once, as `rematlab-cli peak`)");
  command.add_flag("--json", json, "Print one JSON object as the last line of stdout");
}

RunConfig RunOptions::resolve() const {
  RunConfig config;
  config.preset = preset_;
  config.model = model_preset(preset_);
  if (!arch_.empty()) config.model.switch_family(parse_family(arch_));
  if (layers_) config.model.layers = *layers_;
  if (d_model_) config.model.d_model = *d_model_;
  if (heads_) config.model.heads = *heads_;
  if (kv_heads_) config.model.kv_heads = *kv_heads_;
  if (mlp_hidden_) config.model.mlp_hidden = *mlp_hidden_;
  if (rope_theta_) {
    if (config.model.family != ModelFamily::kLlama) {
      throw InvalidInput("--rope-theta", "only llama models have rotary positions");
    }
    config.model.rope_theta = *rope_theta_;
  }
  if (tie_head_) config.model.tie_head = *tie_head_;
  if (!loss_chunks_.empty()) config.model.loss_chunks = parse_loss_chunks(loss_chunks_);
  if (seq_len_) config.model.seq_len = *seq_len_;
  if (vocab_) config.model.vocab = *vocab_;
  if (dropout_) config.model.dropout = *dropout_;
  config.model.attention = parse_attention(attention_);
  if (batch_) config.batch = *batch_;
  if (accum_) config.accum = *accum_;
  if (steps_) config.steps = *steps_;
  if (warmup_steps_) config.warmup_steps = *warmup_steps_;
  if (lr_) config.lr = *lr_;
  if (seed_) config.seed = *seed_;
  if (threads_) config.threads = *threads_;
  config.precision = parse_precision(precision_);
  config.device = device_;
  config.checkpoint = CheckpointPolicy::canonical_text(checkpoint_);
  config.offload = offload_;
  config.data = data_;
  if (!budget_.empty()) config.budget_bytes = parse_byte_size(budget_, "--budget");
  config.timeline = timeline_;
  if (loss_scale_) config.loss_scale = *loss_scale_;
  if (loss_scale_growth_) config.loss_scale_growth_interval = *loss_scale_growth_;
  config.tf32 = tf32_;
  config.deterministic = deterministic_;
  if (peak_flops_) {
    if (!(*peak_flops_ > 0.0)) throw InvalidInput("--peak-flops", "must be positive");
    config.peak_flops = *peak_flops_;
  }
  validate(config);
  return config;
}

}  // namespace rematlab::cli
