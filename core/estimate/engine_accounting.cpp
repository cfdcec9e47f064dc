#include "estimate/engine_accounting.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rematlab::estimate {

// The norm (its output is the QKV matmul's input) and the core's output (the output projection's
// input). The fused core writes its output already in (b, s, a, hd) order, so making it
// contiguous copies nothing. Under LoRA a frozen projection keeps its input only for its adapter
// (the fused core keeps its output itself when it runs under autograd), and the adapters keep
// their rank-wide values (model/lora.h).
int64_t EngineAccounting::attention_outside_core(bool input_wanted, bool core_wanted,
                                                 bool math) const {
  const int64_t d = arch_.d_model;
  const int64_t dq = arch_.q_dim() / tp_;
  const int64_t qkv = dq + 2 * rank_kv_projected(arch_, tp_);
  const int64_t qkv_adapters = adapters({kLoraQ, kLoraK, kLoraV});
  const bool out_adapter = arch_.lora.adapts(kLoraO);
  const bool context_kept = base_trains() || out_adapter || (core_wanted && !math && !selective_);
  return norm_bytes(input_wanted, base_trains() || qkv_adapters > 0) +
         (context_kept ? per_token(dq) : 0) + adapter_values(qkv_adapters + (out_adapter ? 1 : 0)) +
         frozen_weight_copy(input_wanted ? d * qkv : 0) +
         frozen_weight_copy(core_wanted ? dq * d : 0);
}

int64_t EngineAccounting::core_values(int64_t dq, int64_t qkv, int64_t scores, bool math) const {
  // The core. Fused: q, k, v and the log-sum-exp. Without rotation v is a view of the QKV
  // tensor and keeps all of it alive; rotated q and k are new tensors, and v a compact copy, so
  // the QKV tensor goes (the rotation itself keeps only views of the cos/sin tables; a rank
  // sharing the key/value heads rotates and copies only the one it uses). Explicit: the scaled q,
  // contiguous copies of k and v (batched matmul's copies of strided heads, or the copies that
  // repeat shared K/V heads) and the softmax probabilities — the s×s term; the QKV tensor itself
  // is then freed.
  const int64_t kv_used = rank_kv_used(arch_, tp_);
  const int64_t rotated = arch_.rotary ? dq + kv_used : 0;
  // Qwen 3's q/k norms (model/head_norm.h) keep their normalised values and an fp32 reciprocal
  // RMS per head and token (in activation values: 4 / v of them); their inputs, views of the QKV
  // tensor, they do not keep.
  const int64_t head_normed =
      arch_.qk_norm ? dq + kv_used + (4 / v_) * ((dq + kv_used) / arch_.head_dim()) : 0;
  const int64_t math_core =
      (qkv_kept() ? dq + qkv + (arch_.rotary ? dq : 0) : 3 * dq) + scores + head_normed;
  // Rotated, the fused core keeps a compact copy of v instead of the QKV tensor it was a view of.
  const int64_t fused_input = arch_.rotary ? kv_used : qkv;
  // Under a sliding window each block's kernel keeps its own output (what the context counts
  // outside the core), and the blocks are joined into one more tensor: kept when the output
  // projection keeps its input, and the root of a selective recomputation's backward.
  // Counted as a kernel that takes shared key/value heads under a mask (CPU's; cuDNN's in 16
  // bits): where CUDA's kernels refuse them, the engine repeats k and v to the query heads
  // (model/windowed_attention.cpp) and keeps 2·(dq − kv) values a token more than this.
  const bool joined_kept = base_trains() || arch_.lora.adapts(kLoraO) || selective_;
  const int64_t joined = windowed() && joined_kept ? dq : 0;
  return math ? math_core : fused_input + rotated + arch_.heads / tp_ + head_normed + joined;
}

SublayerCost EngineAccounting::attention(int64_t block) const {
  const int64_t d = arch_.d_model;
  const int64_t dq = arch_.q_dim() / tp_;
  const int64_t qkv = dq + 2 * rank_kv_projected(arch_, tp_);
  // The scores per head and token: a row of s, or under a sliding window the blocks' rows of
  // at most 2·window (model/attention_window.h), averaged over the sequence.
  const int64_t scores =
      arch_.heads / tp_ *
      (attention_score_values(arch_.seq_len, arch_.sliding_window) / arch_.seq_len);
  const bool math = arch_.attention == AttentionKind::kMath;
  const bool input_wanted = input_gradient_wanted(2 * block);
  const int64_t qkv_adapters = adapters({kLoraQ, kLoraK, kLoraV});
  const bool out_adapter = arch_.lora.adapts(kLoraO);
  // Frozen q, k and v before the first adapter: nothing wants their gradients, nothing is kept.
  const bool core_wanted = input_wanted || qkv_adapters > 0;
  SublayerCost cost;
  cost.name = "a" + std::to_string(block);
  cost.output = per_local(d);
  cost.input_dropped = !input_wanted;
  const int64_t outside_core = attention_outside_core(input_wanted, core_wanted, math);
  const int64_t core = core_wanted ? core_values(dq, qkv, scores, math) : 0;
  // The explicit core's causal mask (s×s booleans, one per call), kept by the in-place fill's
  // backward. A sliding window's block masks are made once and shared by every layer and step
  // (a few window × 2·window tensors), not counted.
  const int64_t mask = math && core_wanted && !windowed() ? arch_.seq_len * arch_.seq_len : 0;
  if (selective_ && core_wanted) {
    cost.interior = outside_core + per_token(qkv) + kReplayStateBytes;
    // Backward first recomputes the core beside its kept input, then runs its backward. The
    // fused core's q, k and v are views of that input. The explicit core's are copies (a
    // single sequence's k and v fold as views of the kept input instead, unless rotated: then
    // what the forward's count holds of the QKV tensor is new in the recomputation too), and its
    // recomputed output, the inner backward's root, is a copy too (its heads made contiguous).
    const int64_t recomputed = math ? core - (qkv_kept() && !arch_.rotary ? qkv : 0) + dq
                                    : core - (arch_.rotary ? 0 : qkv);
    cost.backward_extra = per_token(recomputed) + mask + backward_core(qkv, scores, math);
  } else {
    cost.interior = outside_core + per_token(core) + mask;
    cost.backward_extra = backward_core(qkv, scores, math);
  }
  // Before the core: the output projection's backward (its input's gradient and its weight's).
  cost.backward_extra = std::max(
      cost.backward_extra, projection_backward(dq, d * dq, out_adapter) + gathered_gradient());
  // Before the first adapter nothing wants a gradient: an adapter on the output projection
  // forms its own alone.
  if (!core_wanted) cost.backward_extra = 0;
  // The explicit core holds the raw scores and the probabilities at once (a block's under a
  // sliding window); rotating q and k briefly holds the rotated halves and both products.
  const int64_t tail = tail_extra(out_adapter);
  const int64_t busiest = math ? std::max(block_scores(), tp_ > 1 ? tail : 0) : tail;
  // A quantised projection's weight is dequantised while it runs: the QKV one beside the norm
  // alone, the output projection's at the tail.
  cost.forward_extra = std::max(
      {busiest + per_token(arch_.rotary ? 2 * dq : 0) +
           per_token(arch_.qk_norm ? dq + rank_kv_used(arch_, tp_) : 0),  // the norms' outputs
       dequantised(dq * d),
       dequantised(d * qkv) + norm_bytes(input_wanted, true) + per_token(qkv) - cost.interior -
           cost.output});
  if (qkv_adapters > 0) {  // before the core or its output exist
    const int64_t adapted = (arch_.lora.adapts(kLoraQ) ? dq : 0) +
                            (arch_.lora.adapts(kLoraK) ? kv_width() : 0) +
                            (arch_.lora.adapts(kLoraV) ? kv_width() : 0);
    const int64_t at_sum = adapter_sum(input_wanted, qkv, adapted, qkv_adapters);
    cost.forward_extra = std::max(cost.forward_extra, at_sum - cost.interior - cost.output);
  }
  // keep: the QKV tensor and the output projection's output (the sum's operand).
  cost.kept_tail = keep_.attention_out ? per_token(d) : 0;
  cost.kept = (keep_.qkv ? per_token(qkv) : 0) + cost.kept_tail;
  cost.rebuilt_extra = keep_.qkv ? gathered_input_extra() : 0;
  return cost;
}

SublayerCost EngineAccounting::mlp(int64_t block) const {
  if (arch_.moe.enabled()) return experts(block);
  const int64_t d = arch_.d_model;
  const int64_t f = arch_.mlp_hidden / tp_;  // this rank's columns
  const bool input_wanted = input_gradient_wanted(2 * block + 1);
  const int64_t up_adapters = adapters({kLoraUp}) + (arch_.gated_mlp ? adapters({kLoraGate}) : 0);
  const bool down_adapter = arch_.lora.adapts(kLoraDown);
  SublayerCost cost;
  cost.name = "m" + std::to_string(block);
  cost.output = per_local(d);
  cost.input_dropped = !input_wanted;
  // The norm; GELU: the up projection's output (GELU's input) and GELU's output (the down
  // projection's input). SwiGLU (model/swiglu.h): the fused gate-and-up output (2f) and the
  // product; SiLU(gate) is formed again in backward. Under LoRA the activation keeps its inputs
  // only once something before it trains, and the down projection's input only for its adapter.
  const bool activation_wanted = input_wanted || up_adapters > 0;
  const bool down_input_kept = base_trains() || down_adapter;
  cost.interior = norm_bytes(input_wanted, base_trains() || up_adapters > 0) +
                  (activation_wanted ? per_token((arch_.gated_mlp ? 2 : 1) * f) : 0) +
                  (down_input_kept ? per_token(f) : 0) +
                  adapter_values(up_adapters + (down_adapter ? 1 : 0)) +
                  frozen_weight_copy(input_wanted ? d * (arch_.gated_mlp ? 2 * f : f) : 0) +
                  frozen_weight_copy(activation_wanted ? f * d : 0);
  const int64_t up = arch_.gated_mlp ? 2 * f : f;
  // A quantised down projection's weight is dequantised beside its input, kept or not; then
  // nf4's index is freed and the product formed beside the weight.
  const int64_t down_forward = quantised_base() ? dequantised(f * d) - dequantise_index(f * d) +
                                                      (down_input_kept ? 0 : per_token(f)) +
                                                      std::max(dequantise_index(f * d), cost.output)
                                                : 0;
  cost.forward_extra = std::max({tail_extra(down_adapter), down_forward,
                                 dequantised(d * up) + norm_bytes(input_wanted, true) +
                                     per_token(up) - cost.interior - cost.output});
  if (up_adapters > 0) {
    const int64_t at_sum = adapter_sum(input_wanted, up, up_adapters * f, up_adapters);
    cost.forward_extra = std::max(cost.forward_extra, at_sum - cost.interior - cost.output);
  }
  // GELU: the down projection's input gradient (f wide) appears before its saved input is
  // freed, with one weight gradient before it is added into .grad.
  // The down projection's backward (its input's gradient beside its weight's) comes first.
  // SwiGLU's backward then forms the fused gradient (2f) beside the product's; once it returns,
  // the fused values it kept are freed, and the fused gate-and-up projection's backward forms
  // its input's gradient and its weight's beside the fused gradient.
  const int64_t down = projection_backward(f, d * f, down_adapter) + gathered_gradient();
  // The activation's backward: its output's gradient and its input's (SwiGLU: the fused 2f,
  // beside an f-wide product gradient; GELU: the output's and the input's), beside the down
  // projection's input unless that was freed by its backward (kept only for a weight's or an
  // adapter's).
  const int64_t activation =
      per_token((arch_.gated_mlp ? 4 : 2) * f) - (down_input_kept ? per_token(f) : 0);
  cost.backward_extra = arch_.gated_mlp
                            ? std::max({down, activation,
                                        std::max(weight_held(2 * d * f),
                                                 weight_held(2 * d * f) -
                                                     dequantise_index(2 * d * f) + per_token(d)) -
                                            (down_input_kept ? per_token(f) : 0)})
                            : std::max(down, activation);
  if (!activation_wanted) cost.backward_extra = 0;  // as the attention's before an adapter
  // Under sequence parallelism the up projection's backward gathers its input again (freed
  // once the weight's gradient is formed), and sums and scatters its input's gradient: two s·d
  // tensors (the whole input or, on Gloo, whose reduce-scatter is an all-to-all, the slices it
  // received; the gradient, already rank by rank as the MLP gathers its input in that order)
  // and the slice kept, beside its weight's gradient and its output's gradient, once the
  // activations' saved tensors have gone (`small`, TP 4, every:1, 1 thread: 0.997 of the
  // measured rank peak; with the rank-by-rank copy attention still makes counted, 1.023).
  if (gathered_gradient() > 0) {
    cost.backward_extra = std::max(
        cost.backward_extra, weight(d * up) + 2 * per_token(d) + per_local(d) - per_token(up));
  }
  // keep: the up (or fused gate-and-up) projection's output.
  cost.kept = keep_.mlp_in ? per_token(arch_.gated_mlp ? 2 * f : f) : 0;
  cost.rebuilt_extra = keep_.mlp_in ? gathered_input_extra() : 0;
  return cost;
}

SublayerCost EngineAccounting::experts(int64_t block) const {
  const MoeOptions& moe = arch_.moe;
  const int64_t d = arch_.d_model;
  // Over tensor ranks each expert (and the shared one) keeps its part of the width; every rank
  // routes, gathers and weights every token's rows whole.
  const int64_t f = arch_.expert_hidden / tp_;
  const int64_t fs = moe.shared_expert_hidden / tp_;
  const int64_t k = moe.experts_per_token;
  // Slots the experts take: every token's k, or as many as E full experts hold.
  const int64_t slots = std::min(tokens_ * k, moe.experts * expert_capacity(tokens_, moe));
  auto per_slot = [&](int64_t values) { return values * slots * v_; };
  // The rows this rank's experts take: its own slots, or under expert parallelism the fullest
  // rank's rank load times them, at most every expert full from every rank (E · capacity).
  const auto received =
      std::min(static_cast<int64_t>(std::ceil(arch_.expert_rank_load * static_cast<double>(slots))),
               moe.capacity_factor > 0.0 ? moe.experts * expert_capacity(tokens_, moe)
                                         : std::numeric_limits<int64_t>::max());
  auto per_received = [&](int64_t values) { return values * received * v_; };
  // The busiest expert's rows: its even share (this rank's slots from each rank it serves, over
  // the experts) times the expert load; at most what the rank took, or every serving rank's
  // capacity.
  const double share = static_cast<double>(slots) * static_cast<double>(arch_.expert_ranks) /
                       static_cast<double>(moe.experts);
  int64_t busiest = std::min(static_cast<int64_t>(std::ceil(arch_.expert_load * share)), received);
  if (moe.capacity_factor > 0.0) {
    busiest = std::min(busiest, arch_.expert_ranks * expert_capacity(tokens_, moe));
  }
  SublayerCost cost;
  cost.name = "m" + std::to_string(block);
  cost.output = per_local(d);
  cost.tail_whole = true;
  // The router: the fp32 probabilities (the softmax keeps its output), the top k's indices and,
  // normalised, the k weights and their sum the division keeps; the taken slots' order and each
  // slot's row of the experts' outputs (int64).
  const int64_t router =
      tokens_ * (moe.experts * 4 + 2 * k * 8 + (moe.normalise_weights ? k * 4 + 4 : 0)) + slots * 8;
  // Each row an expert here takes: its copy (the expert's input), the fused [gate; up] output
  // SwiGLU keeps and the product the down projection keeps; each slot of this rank's tokens: the
  // expert's output (back from its rank under --ep) and its weight, which the weighting keeps.
  const int64_t routed = per_received(d + 2 * f + f) + per_slot(d + 1);
  // A shared expert: its fused output, product and output, and its sigmoid gate; under sequence
  // parallelism also its input, the gathered tokens (else the norm's output, counted).
  const int64_t shared =
      fs > 0 ? per_token(2 * fs + fs + d + 1) + (gathered_gradient() > 0 ? per_token(d) : 0) : 0;
  cost.interior = norm_bytes() + router + routed + shared;
  // Forward: the k copies of every token before the taken ones are gathered, and the slots'
  // weighted outputs laid out by slot before each token's k are summed.
  cost.forward_extra = std::max(per_token(k * d), per_token(k * d) + per_slot(d) - cost.output);
  // Backward: three row gradients d wide — the weighting's (the outputs', and the weights'
  // product before its sum) beside the gradient gathered by slot, and on the experts' side of an
  // exchange the rows' gradients that arrive, those the experts hand back and their copy sent
  // back; the side with more rows sets them (one process: both the same slots; the fullest
  // expert rank: the rows it took). Or, with wide experts, two of the rows' gradients beside one
  // expert's backward, which holds its [gate; up] output's gradient for the busiest expert's
  // rows (experts run one at a time). Within 5 % of measured under --ep at the loads a run
  // records (docs/parallel.md). A shared expert's backward runs first (it was formed last): what
  // it kept is gone by then, and its input's gradient waits for the routed one's.
  cost.backward_extra =
      std::max({3 * per_slot(d), 3 * per_received(d), 2 * per_received(d) + 2 * f * busiest * v_}) -
      (fs > 0 ? shared - per_token(d) : 0);
  // keep: the router's logits (and a shared expert's gate), the experts' [gate; up] outputs and
  // their down projections' (a shared expert's too).
  const bool has_shared = fs > 0;
  cost.kept = (keep_.router ? per_token(moe.experts + (has_shared ? 1 : 0)) : 0) +
              (keep_.mlp_in ? per_received(2 * f) + (has_shared ? per_token(2 * fs) : 0) : 0) +
              (keep_.expert_out ? per_received(d) + (has_shared ? per_token(d) : 0) : 0);
  return cost;
}

}  // namespace rematlab::estimate
