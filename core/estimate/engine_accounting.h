// What the engine's operations keep for backward, sublayer by sublayer, counted tensor by tensor
// (docs/estimates.md lists them): the costs the activation replay (activation_memory.h) adds up
// and frees in autograd's order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "checkpoint/checkpoint_policy.h"
#include "common/precision.h"
#include "estimate/architecture.h"
#include "estimate/model_state.h"
#include "estimate/tensor_layout.h"
#include "model/attention_window.h"

namespace rematlab::estimate {

// What each recomputation keeps to replay its forward's random numbers: the CPU generator's state
// (on a GPU it is host memory, counted all the same: a few KiB a segment).
inline constexpr int64_t kReplayStateBytes = 5056;

// What one sublayer costs, in bytes, for the whole micro-batch.
struct SublayerCost {
  std::string name;            // a0, m0, … as CheckpointPlan::describe() writes them
  int64_t interior = 0;        // kept for backward when it runs under autograd, output excluded
  int64_t output = 0;          // the residual stream it hands on
  int64_t forward_extra = 0;   // briefly live on top of `interior` while it runs
  int64_t backward_extra = 0;  // live on top of what is saved while its backward runs
  int64_t kept = 0;            // saved in a recomputed segment's forward by a keep: policy
  int64_t kept_tail = 0;       // of `kept`: its output projection's, never kept at a segment end
  // In a recomputation, held on top of `interior`: under sequence parallelism a kept projection
  // re-enters the graph on its input gathered whole rather than the rank's slice.
  int64_t rebuilt_extra = 0;
  // Its input wants no gradient (a frozen model before its first adapter): the norm keeps no
  // copy, so the residual stream it is handed is freed once it is done.
  bool input_dropped = false;
  // Its tail has no one projection a recomputation could stop before (a mixture of experts):
  // the output is rebuilt.
  bool tail_whole = false;
};

// The engine's saved tensors, per token, counted from what each LibTorch op keeps for backward
// (see docs/estimates.md for the list). `v` is bytes per activation value.
class EngineAccounting {
 public:
  EngineAccounting(const Architecture& arch, int64_t batch, Precision precision, bool selective,
                   const KeptOutputs& keep, const TensorLayout& layout)
      : arch_(arch),
        batch_(batch),
        tokens_(batch * arch.seq_len),
        v_(bytes_per_value(precision)),
        selective_(selective),
        keep_(keep),
        tp_(layout.tp),
        local_tokens_(layout.sequence_parallel ? tokens_ / layout.tp : tokens_) {}

  // Under tensor parallelism (docs/parallel.md) a rank holds 1/T of the heads: dq is its query
  // and context width, its QKV tensor dq plus the key/value width it projects.
  SublayerCost attention(int64_t block) const;
  SublayerCost mlp(int64_t block) const;
  // A mixture of experts in the MLP's place (mlp() hands it on): its router, each token's k
  // copies and what its experts keep for them, with no token dropped (or as many as the capacity
  // lets each expert take, all experts full).
  SublayerCost experts(int64_t block) const;

  int64_t embedding_output() const { return per_local(arch_.d_model); }
  // The final norm and the log-probabilities cross-entropy keeps. In slices, each slice's head
  // and loss run again in backward: only the norm's output (the slices' input) is kept. Split
  // over the vocabulary the loss always works in slices (one when not asked for more) and keeps
  // each token's log-normaliser besides (fp32).
  int64_t loss_saved() const {
    if (tp_ > 1) return final_norm_bytes() + tokens_ * 4;
    // A frozen head keeps no input for its weight's gradient; the sliced loss keeps it anyway.
    return norm_bytes(true, base_trains() || sliced()) + (sliced() ? 0 : per_token(arch_.vocab)) +
           frozen_weight_copy(sliced() ? 0 : arch_.vocab * arch_.d_model);
  }
  // The logits, briefly beside the log-probabilities (of one slice when sliced); split, the
  // rank's fp32 logits of a slice beside their exponentials.
  int64_t loss_forward_extra() const {
    if (tp_ > 1) return 2 * slice_tokens() * (arch_.vocab / tp_) * 4;
    return sliced() ? 2 * per_slice(arch_.vocab) : per_token(arch_.vocab);
  }
  // Loss backward: the gradient of the log-probabilities and of the logits meet; the kept
  // log-probabilities and their gradient are freed before the LM head's (and, tied, the
  // embedding's) weight gradient appears beside the logits' gradient. Sliced (one node that
  // recomputes slice by slice): the hidden states' whole gradient from the start; per slice the
  // recomputed log-probabilities and those two gradients, beside the head's gradient summed so
  // far; then the slice's head gradient beside the logits' gradient and that sum.
  int64_t loss_backward_extra() const {
    const int64_t vocab = arch_.vocab / tp_;
    const int64_t head = weight_gradient(vocab * arch_.d_model);
    if (!sliced() && tp_ == 1) return std::max(per_token(2 * vocab), head);
    const int64_t slice = tp_ > 1 ? slice_tokens() * vocab * 4 : per_slice(vocab);
    return std::max(3 * slice + head, slice + 2 * head) + per_token(arch_.d_model);
  }
  int64_t residual_gradient() const { return per_local(arch_.d_model); }
  // Under sequence parallelism a sublayer's backward starts by gathering its output's gradient
  // over the ranks (the scatter's conjugate): the row-parallel projection's backward runs beside
  // that whole gradient.
  int64_t gathered_gradient() const {
    return local_tokens_ < tokens_ ? per_token(arch_.d_model) : 0;
  }
  // What a column projection's input gathered whole holds beyond the rank's slice.
  int64_t gathered_input_extra() const {
    return per_token(arch_.d_model) - per_local(arch_.d_model);
  }
  // A tied head's weight gradient is one input of the shared weight's accumulator, which waits
  // for the embedding's: it stays live from the loss's backward through the whole chain's.
  int64_t held_head_gradient() const {
    return arch_.tied_head ? weight_gradient(arch_.vocab / tp_ * arch_.d_model) : 0;
  }
  // The most values of a parameter the optimizer updates (AdamW's temporaries are its size):
  // under LoRA the widest adapter matrix (the stacked A's of a fused projection, or a B).
  int64_t largest_trained_parameter() const {
    if (base_trains()) return rank_largest_parameter_count(arch_, tp_);
    const int64_t widest = std::max({arch_.d_model, arch_.q_dim(), arch_.mlp_hidden});
    const int64_t stacked =
        std::max(adapters({kLoraQ, kLoraK, kLoraV}),
                 adapters({kLoraUp}) + (arch_.gated_mlp ? adapters({kLoraGate}) : 0)) *
        arch_.d_model;
    return arch_.lora.rank * std::max(widest, stacked);
  }

 private:
  int64_t per_token(int64_t values) const { return values * tokens_ * v_; }
  bool windowed() const { return arch_.sliding_window > 0 && arch_.seq_len > arch_.sliding_window; }
  // The explicit core's widest block of scores, every sequence and this rank's heads: s × s, or
  // window × 2·window under a sliding window.
  int64_t block_scores() const {
    return arch_.heads / tp_ * (tokens_ / arch_.seq_len) *
           attention_block_score_values(arch_.seq_len, arch_.sliding_window) * v_;
  }
  // The residual stream's tokens: all of them, or a rank's 1/T under sequence parallelism.
  int64_t per_local(int64_t values) const { return values * local_tokens_ * v_; }
  bool sliced() const { return arch_.loss_chunks > 1; }
  // Tokens in one slice of the loss, as torch::chunk cuts them (the first slices the largest).
  int64_t slice_tokens() const { return (tokens_ + arch_.loss_chunks - 1) / arch_.loss_chunks; }
  int64_t per_slice(int64_t values) const { return values * slice_tokens() * v_; }
  // The output projection's result beside the sublayer's output as the tail makes it. Split, the
  // rank's partial result and the copy its sum over ranks reduces: an all-reduce's copy, or
  // under sequence parallelism its slices laid out for the reduce-scatter (whole either way).
  // With an adapter (one rank): the frozen output, the adapter's term and their sum at once.
  int64_t tail_extra(bool adapter) const {
    return per_token(arch_.d_model) * (tp_ > 1 || adapter ? 2 : 1);
  }
  // A frozen fp32 weight under 16-bit autocast is cast again at every use (autocast caches only
  // the casts of weights that train), and a projection whose input wants a gradient keeps its
  // cast copy for backward: 2 bytes a value for each such projection (none with a bf16 base).
  int64_t frozen_weight_copy(int64_t values) const {
    const bool copies = !base_trains() && v_ == 2 && arch_.lora.base == BasePrecision::kFp32;
    return copies ? values * 2 : 0;
  }
  // Fine-tuning (LoRA): the base is frozen, so no weight's gradient is formed.
  bool base_trains() const { return !arch_.lora.enabled(); }
  int64_t weight_gradient(int64_t values) const { return base_trains() ? weight(values) : 0; }
  // A quantised base's weight while its projection runs: dequantised in fp32 (nf4 beside a
  // 4-byte index a byte of codes), and cast to 16 bits under bf16/fp16
  // (checkpoint/quantised_weight.h); 0 for a base stored unquantised.
  int64_t dequantised(int64_t values) const {
    if (!quantised_base()) return 0;
    return values * (4 + (arch_.lora.base == BasePrecision::kNf4 ? 2 : 0) + (v_ == 2 ? 2 : 0));
  }
  // Of that, nf4's index: alive only while the codes are looked up, freed before the
  // dequantised weight is used.
  int64_t dequantise_index(int64_t values) const {
    return quantised_base() && arch_.lora.base == BasePrecision::kNf4 ? values * 2 : 0;
  }
  bool quantised_base() const { return !base_trains() && is_quantised(arch_.lora.base); }
  // What a projection's backward holds of its weight's size: the weight's gradient, or a
  // quantised base's dequantised weight.
  int64_t weight_held(int64_t values) const {
    return weight_gradient(values) + dequantised(values);
  }
  // A row-parallel projection's backward from an input `width` wide through `weights` values:
  // its input's gradient beside what it holds of its weight (nf4's index is gone by the time
  // that gradient is formed); with an adapter, once a quantised weight is freed, the frozen
  // projection's and the adapter's input gradients meet before they are summed.
  int64_t projection_backward(int64_t width, int64_t weights, bool adapter) const {
    const int64_t held = weight_held(weights);
    const int64_t frozen = std::max(held, per_token(width) + held - dequantise_index(weights));
    if (!adapter || base_trains()) return frozen;
    return std::max(frozen, per_token(2 * width) + weight_gradient(weights));
  }
  // How many of `targets` carry an adapter, and the rank-wide values per token those keep.
  int64_t adapters(std::initializer_list<LoraTarget> targets) const {
    int64_t count = 0;
    for (LoraTarget target : targets) count += arch_.lora.adapts(target) ? 1 : 0;
    return count;
  }
  int64_t adapter_values(int64_t count) const { return per_token(count * arch_.lora.rank); }
  // Whether sublayer `index` (a0 m0 a1 …) is handed an input that wants a gradient. Under LoRA
  // the frozen embedding's output wants none; only after the first adapter does the stream.
  bool input_gradient_wanted(int64_t index) const {
    if (base_trains() || arch_.input_trains) return true;
    const bool attention_adapted = adapters({kLoraQ, kLoraK, kLoraV, kLoraO}) > 0;
    return index > (attention_adapted ? 0 : 1);
  }
  int64_t attention_outside_core(bool input_wanted, bool core_wanted, bool math) const;
  // What the attention core keeps for backward, in activation values per token.
  int64_t core_values(int64_t dq, int64_t qkv, int64_t scores, bool math) const;
  // A projection's adapters being summed into its output: the norm's output (their input), the
  // frozen output `width` wide, the adapted slices (`adapted` wide in all) and their
  // concatenation at once, beside the adapters' own values.
  int64_t adapter_sum(bool input_wanted, int64_t width, int64_t adapted, int64_t adapters) const {
    return norm_bytes(input_wanted, true) + per_token(2 * width + adapted) +
           adapter_values(adapters);
  }
  int64_t kv_width() const { return rank_kv_projected(arch_, tp_); }
  // What a norm keeps, its output (the next matmul's input) included. LayerNorm: the output and
  // two statistics. RMSNorm runs in fp32 (the engine's Llama does): the fp32 copy of the input
  // (the input itself when it is fp32), the reciprocal RMS, the normalised values and the
  // scaled output, both in the activations' precision. Under sequence parallelism the norm runs
  // on the rank's tokens, and the projection after it keeps its input as sliced
  // (gathered_projection).
  // Under LoRA a norm whose input wants no gradient keeps nothing of its own, its frozen scale
  // keeps no normalised values for a gradient, and its output is kept only when the projection
  // after it trains or carries an adapter (`output_kept`).
  int64_t norm_bytes(bool input_wanted = true, bool output_kept = true) const {
    const int64_t d = arch_.d_model;
    const int64_t output = output_kept ? per_local(d) : 0;
    if (!input_wanted) return output;
    if (!arch_.rms_norm) return per_local(2) + output;
    const int64_t fp32_copy = v_ == 4 ? 0 : d * 4;
    const int64_t normalised = base_trains() ? per_local(d) : 0;
    return (fp32_copy + 4) * local_tokens_ + normalised + output;
  }
  // The final norm's: what the loss keeps is its output gathered over the whole sequence.
  int64_t final_norm_bytes() const {
    return norm_bytes() + per_token(arch_.d_model) - per_local(arch_.d_model);
  }
  int64_t weight(int64_t values) const { return values * v_; }
  int64_t backward_core(int64_t qkv, int64_t scores, bool math) const {
    const int64_t d = arch_.d_model;
    const int64_t dq = arch_.q_dim() / tp_;
    // Fused: the gradient of the core's output, of q, k, v and their concatenation into the
    // QKV gradient. Explicit: the gradients of the probabilities and of the scores (both s×s)
    // live together in softmax's backward, while the context's gradient and v's copy are
    // already freed. A single sequence's v is a view of the QKV tensor instead, which goes with
    // it unless k (not rotated) is a view of it too.
    // Rotated q and k: undoing the rotation holds one more q-sized gradient.
    const int64_t freed_by_v = qkv_kept() ? (arch_.rotary ? qkv : 0) : dq;
    // Qwen 3's q/k norms: one more q-sized gradient while the norm's backward runs (fp32; under
    // bf16 its fp32 temporaries are more, not counted: 16-bit figures are approximate).
    const int64_t unrotate = (arch_.rotary ? dq : 0) + (arch_.qk_norm ? dq : 0);
    // Under a sliding window the blocks' score gradients come one block at a time, while the
    // gradients of the repeated k and v gather over the blocks (and each block's adds one more).
    if (math && windowed()) {
      return per_token(3 * dq - dq - freed_by_v + unrotate) + 2 * block_scores() +
             weight_held(d * qkv);
    }
    if (math) return per_token(2 * scores - dq - freed_by_v + unrotate) + weight_held(d * qkv);
    // Fused, in order: the kernel's q, k and v gradients beside the output's; undoing the
    // rotation (and the norms) beside them; their concatenation into the QKV gradient; the QKV
    // projection's backward, its input's gradient beside its weight's, once they are freed.
    return std::max({per_token(dq + qkv + unrotate), per_token(2 * qkv),
                     per_token(qkv + d) + weight_held(d * qkv)});
  }
  // The explicit core's batched matmuls fold batch and heads into one dimension. k and v are
  // strided views of the QKV tensor (k a new tensor once rotated): folding a view copies it,
  // except for a single sequence (a batch of 1), where the fold is a view too and keeps the
  // whole QKV tensor alive instead. Shared K/V heads are copied by their repetition anyway, and
  // under a sliding window k and v are made compact once, whatever the batch.
  bool qkv_kept() const { return batch_ == 1 && arch_.kv_heads == arch_.heads && !windowed(); }

  const Architecture& arch_;
  int64_t batch_;
  int64_t tokens_;
  int64_t v_;
  bool selective_;
  KeptOutputs keep_;
  int64_t tp_;
  int64_t local_tokens_;
};

}  // namespace rematlab::estimate
