#include "estimate/flops.h"

#include "model/attention_window.h"

namespace rematlab::estimate {

// Each token's query row of scores (QKᵀ) and the same row times V: 2 · 2 FLOPs per key and q
// value. A row is the whole sequence (the convention of the published counts, causal or not),
// or under a sliding window the keys its block computes (model/attention_window.h).
double attention_core_flops_per_token(const Architecture& arch) {
  const double keys_per_token =
      static_cast<double>(attention_score_values(arch.seq_len, arch.sliding_window)) /
      static_cast<double>(arch.seq_len);
  return 4.0 * keys_per_token * static_cast<double>(arch.q_dim());
}

double block_forward_flops_per_token(const Architecture& arch) {
  const double per_block_weights =
      static_cast<double>(matmul_parameter_count(arch) - arch.vocab * arch.d_model) /
      static_cast<double>(arch.layers);
  return 2.0 * per_block_weights + attention_core_flops_per_token(arch);
}

namespace {

// The widths a block's projections read and write.
struct Widths {
  double d, q, kv, hidden;
  explicit Widths(const Architecture& arch)
      : d(static_cast<double>(arch.d_model)),
        q(static_cast<double>(arch.q_dim())),
        kv(static_cast<double>(arch.kv_dim())),
        hidden(static_cast<double>(arch.mlp_hidden)) {}
};

// An adapter from `in` to `out` values runs A (rank × in) then B (out × rank).
double adapter_forward(const LoraOptions& lora, LoraTarget target, double in, double out) {
  return lora.adapts(target) ? 2.0 * static_cast<double>(lora.rank) * (in + out) : 0.0;
}

// Its backward: B's weight gradient and the gradient of A's output, A's weight gradient, and
// A's input gradient only when the gradient goes on past the projection.
double adapter_backward(const LoraOptions& lora, LoraTarget target, double in, double out,
                        bool input_gradient) {
  if (!lora.adapts(target)) return 0.0;
  const double rank = static_cast<double>(lora.rank);
  return 4.0 * rank * out + 2.0 * rank * in + (input_gradient ? 2.0 * rank * in : 0.0);
}

// Per token, the adapters' forward in a block's attention sublayer, and in its MLP sublayer.
double attention_adapters_forward(const Architecture& arch) {
  const Widths w(arch);
  return adapter_forward(arch.lora, kLoraQ, w.d, w.q) +
         adapter_forward(arch.lora, kLoraK, w.d, w.kv) +
         adapter_forward(arch.lora, kLoraV, w.d, w.kv) +
         adapter_forward(arch.lora, kLoraO, w.q, w.d);
}
double mlp_adapters_forward(const Architecture& arch) {
  const Widths w(arch);
  return (arch.gated_mlp ? adapter_forward(arch.lora, kLoraGate, w.d, w.hidden) : 0.0) +
         adapter_forward(arch.lora, kLoraUp, w.d, w.hidden) +
         adapter_forward(arch.lora, kLoraDown, w.hidden, w.d);
}

// The backward per token of a model whose base is frozen: no weight gradient but the
// adapters', and an input gradient only where something before it trains. The embedding is
// frozen, so the first block's q, k and v form none, and a sublayer with no adapter before it
// and none on its first projections stops at its last projection's adapter.
double frozen_base_backward_per_token(const Architecture& arch) {
  const Widths w(arch);
  const LoraOptions& lora = arch.lora;
  const double up_width = arch.gated_mlp ? 2.0 * w.hidden : w.hidden;
  const bool attention_adapted = attention_adapters_forward(arch) > 0.0;
  const bool mlp_adapted = mlp_adapters_forward(arch) > 0.0;
  double backward = 0.0;
  bool trains_before = arch.input_trains;  // an adapter in an earlier sublayer (or stage)
  for (int64_t block = 0; block < arch.layers; ++block) {
    // Attention: q, k and v; the core and the output projection once any of them trains.
    if (trains_before) backward += 2.0 * w.d * (w.q + 2.0 * w.kv);
    backward += adapter_backward(lora, kLoraQ, w.d, w.q, trains_before) +
                adapter_backward(lora, kLoraK, w.d, w.kv, trains_before) +
                adapter_backward(lora, kLoraV, w.d, w.kv, trains_before);
    const bool core_gradient =
        trains_before || lora.adapts(kLoraQ) || lora.adapts(kLoraK) || lora.adapts(kLoraV);
    if (core_gradient) backward += 2.0 * attention_core_flops_per_token(arch) + 2.0 * w.q * w.d;
    backward += adapter_backward(lora, kLoraO, w.q, w.d, core_gradient);
    trains_before = trains_before || attention_adapted;
    // MLP: gate and up; the down projection's input once either trains.
    if (trains_before) backward += 2.0 * w.d * up_width;
    if (arch.gated_mlp) backward += adapter_backward(lora, kLoraGate, w.d, w.hidden, trains_before);
    backward += adapter_backward(lora, kLoraUp, w.d, w.hidden, trains_before);
    const bool down_gradient =
        trains_before || lora.adapts(kLoraUp) || (arch.gated_mlp && lora.adapts(kLoraGate));
    if (down_gradient) backward += 2.0 * w.hidden * w.d;
    backward += adapter_backward(lora, kLoraDown, w.hidden, w.d, down_gradient);
    trains_before = trains_before || mlp_adapted;
  }
  // The head's input gradient, wanted once any adapter lies before it.
  if (trains_before) backward += 2.0 * static_cast<double>(arch.vocab * arch.d_model);
  return backward;
}

// Whether a recomputation stops before the last projection of a segment (the attention's output
// projection or the MLP's down projection) and runs its backward from its input alone
// (checkpoint/sublayer_tail.h): not under sequence parallelism, whose tails run whole. An
// adapter on that projection is formed again (counted with the segment's adapters).
bool stops_before_tail(bool sequence_parallel) { return !sequence_parallel; }

// Per token, a mixture of experts' block run again: its router (and a shared expert's gate), its
// k experts' [gate; up] and down projections and a shared expert's, less what `keep` kept. With
// a capacity factor dropped tokens run no expert: the count is what none dropped.
double experts_recomputed_per_token(const Architecture& arch, const KeptOutputs& keep) {
  const double d = static_cast<double>(arch.d_model);
  const double routed = static_cast<double>(arch.moe.experts_per_token * arch.expert_hidden);
  const double shared = static_cast<double>(arch.moe.shared_expert_hidden);
  const double router =
      2.0 * d * static_cast<double>(arch.moe.experts) + (shared > 0 ? 2.0 * d : 0);
  const double ups = 2.0 * d * 2.0 * (routed + shared);
  const double downs = 2.0 * (routed + shared) * d;
  return (keep.router ? 0.0 : router) + (keep.mlp_in ? 0.0 : ups) + (keep.expert_out ? 0.0 : downs);
}

// Per token, what the plan runs a second time in backward.
double recomputed_per_token(const Architecture& arch, const CheckpointPlan& plan,
                            bool sequence_parallel) {
  const Widths w(arch);
  const double core = attention_core_flops_per_token(arch);
  const double qkv = 2.0 * w.d * (w.q + 2.0 * w.kv);
  const double out = 2.0 * w.q * w.d;
  const double up = 2.0 * w.d * (arch.gated_mlp ? 2.0 : 1.0) * w.hidden;
  const double down = 2.0 * w.hidden * w.d;
  double again = 0.0;
  // A recomputed segment runs its sublayers' forward again (sublayer 2·k is block k's attention,
  // 2·k+1 its MLP), adapters included, but no projection a keep: policy kept, and not the tail
  // it stops before. Under a frozen base, a segment with no adapter in it or before it has no
  // backward and is not checkpointed at all.
  const double attention_adapters = attention_adapters_forward(arch);
  const double mlp_adapters = mlp_adapters_forward(arch);
  for (const Segment& segment : plan.segments) {
    if (!segment.recompute) continue;
    const bool idle = attention_adapters == 0.0 && (segment.end == 1 || mlp_adapters == 0.0);
    if (arch.lora.enabled() && !arch.input_trains && idle) continue;
    for (int64_t i = segment.begin; i < segment.end; ++i) {
      const bool last = i == segment.end - 1;
      if (i % 2 == 0) {
        again += core + attention_adapters + (plan.keep.qkv ? 0.0 : qkv);
        const bool stops = last && stops_before_tail(sequence_parallel);
        if (!plan.keep.attention_out && !stops) again += out;
      } else if (arch.moe.enabled()) {
        again += experts_recomputed_per_token(arch, plan.keep);  // no tail to stop before
      } else {
        again += mlp_adapters + (plan.keep.mlp_in ? 0.0 : up);
        if (!(last && stops_before_tail(sequence_parallel))) again += down;
      }
    }
  }
  // selective redoes each core whose backward runs: under a frozen base, not the first block's
  // when its q, k and v have no adapters.
  if (plan.recompute_attention_core) {
    const LoraOptions& lora = arch.lora;
    const bool first_core_idle = lora.enabled() && !arch.input_trains && !lora.adapts(kLoraQ) &&
                                 !lora.adapts(kLoraK) && !lora.adapts(kLoraV);
    again += static_cast<double>(arch.layers - (first_core_idle ? 1 : 0)) * core;
  }
  // The loss in slices runs each slice's head forward again in backward.
  if (arch.loss_chunks > 1) again += 2.0 * static_cast<double>(arch.vocab * arch.d_model);
  return again;
}

// The step's FLOPs of one process, its tails run whole under sequence parallelism.
StepFlops flops_of_step(const Architecture& arch, int64_t tokens_per_step,
                        const CheckpointPlan& plan, bool sequence_parallel) {
  const double tokens = static_cast<double>(tokens_per_step);
  const double forward = static_cast<double>(arch.layers) *
                             (block_forward_flops_per_token(arch) +
                              attention_adapters_forward(arch) + mlp_adapters_forward(arch)) +
                         2.0 * static_cast<double>(arch.vocab * arch.d_model);
  // Training every weight, backward forms each product's input and weight gradients: twice
  // the forward. A frozen base forms far less.
  const double backward =
      arch.lora.enabled() ? frozen_base_backward_per_token(arch) : 2.0 * forward;
  StepFlops flops;
  flops.model = (forward + backward) * tokens;
  flops.hardware = flops.model + recomputed_per_token(arch, plan, sequence_parallel) * tokens;
  flops.forward = forward * tokens;
  return flops;
}

}  // namespace

StepFlops step_flops(const Architecture& arch, int64_t tokens_per_step,
                     const CheckpointPlan& plan) {
  return flops_of_step(arch, tokens_per_step, plan, /*sequence_parallel=*/false);
}

StepFlops rank_step_flops(const Architecture& arch, int64_t tokens_per_step,
                          const CheckpointPlan& plan, int64_t tp, bool sequence_parallel) {
  const StepFlops whole = flops_of_step(arch, tokens_per_step, plan, sequence_parallel);
  if (tp <= 1) return whole;
  const double ranks = static_cast<double>(tp);
  const double tokens = static_cast<double>(tokens_per_step);
  const double d = static_cast<double>(arch.d_model);
  StepFlops rank{whole.model / ranks, whole.hardware / ranks, whole.forward / ranks};
  if (arch.kv_heads % tp != 0) {
    // Forward and backward (3×) of the k and v projections the other ranks would have run
    // (adapters are not split over tensor ranks: run and estimate refuse LoRA with --tp).
    const double kv = static_cast<double>(arch.kv_dim());
    rank.hardware +=
        3.0 * static_cast<double>(arch.layers) * 4.0 * d * kv * (1.0 - 1.0 / ranks) * tokens;
  }
  if (arch.loss_chunks <= 1) {
    rank.hardware += 2.0 * static_cast<double>(arch.vocab) / ranks * d * tokens;
  }
  if (arch.moe.enabled() && !sequence_parallel) {
    // Every rank routes every token: forward and backward of the router (and a shared expert's
    // gate) the other ranks run too. (Under sequence parallelism each routes its own tokens.)
    const double router =
        static_cast<double>(arch.moe.experts) + (arch.moe.shared_expert_hidden > 0 ? 1.0 : 0.0);
    rank.hardware +=
        3.0 * static_cast<double>(arch.layers) * 2.0 * d * router * (1.0 - 1.0 / ranks) * tokens;
  }
  return rank;
}

Utilisation utilisation(const StepFlops& flops, double step_seconds, double peak_flops) {
  Utilisation result;
  if (step_seconds <= 0.0) return result;
  result.achieved_flops = flops.model / step_seconds;
  if (peak_flops > 0.0) {
    result.mfu = result.achieved_flops / peak_flops;
    result.hfu = flops.hardware / step_seconds / peak_flops;
  }
  return result;
}

}  // namespace rematlab::estimate
