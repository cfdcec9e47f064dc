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

StepFlops step_flops(const Architecture& arch, int64_t tokens_per_step,
                     const CheckpointPlan& plan) {
  const double tokens = static_cast<double>(tokens_per_step);
  const double forward = static_cast<double>(arch.layers) * block_forward_flops_per_token(arch) +
                         2.0 * static_cast<double>(arch.vocab * arch.d_model);
  StepFlops flops;
  flops.model = 3.0 * forward * tokens;
  // A recomputed segment runs its sublayers' forward again; selective redoes every core.
  double again = 0.0;
  for (const Segment& segment : plan.segments) {
    if (!segment.recompute) continue;
    for (int64_t i = segment.begin; i < segment.end; ++i) {
      // Sublayer 2·k is block k's attention: its projections (4 of the 12·d² in a GPT block,
      // in general q, k, v and output) and the core; 2·k+1 its MLP.
      const double d = static_cast<double>(arch.d_model);
      const double q = static_cast<double>(arch.q_dim());
      const double attention_weights = d * (q + 2.0 * static_cast<double>(arch.kv_dim())) + q * d;
      const double block_weights =
          block_forward_flops_per_token(arch) / 2.0 - attention_core_flops_per_token(arch) / 2.0;
      again += i % 2 == 0 ? 2.0 * attention_weights + attention_core_flops_per_token(arch)
                          : 2.0 * (block_weights - attention_weights);
    }
    // The recomputation stops before the segment's last output projection (attention: q × d,
    // MLP: the down projection, d × mlp_hidden): its backward needs only that projection's input.
    const bool ends_in_attention = (segment.end - 1) % 2 == 0;
    const double d = static_cast<double>(arch.d_model);
    const double q = static_cast<double>(arch.q_dim());
    again -= 2.0 * d * (ends_in_attention ? q : static_cast<double>(arch.mlp_hidden));
    // keep: the kept projections are not run again either.
    const double up_width =
        static_cast<double>(arch.gated_mlp ? 2 * arch.mlp_hidden : arch.mlp_hidden);
    for (int64_t i = segment.begin; i < segment.end; ++i) {
      if (i % 2 == 0) {
        if (plan.keep.qkv) again -= 2.0 * d * (q + 2.0 * static_cast<double>(arch.kv_dim()));
        if (plan.keep.attention_out && i != segment.end - 1) again -= 2.0 * d * q;
      } else if (plan.keep.mlp_in) {
        again -= 2.0 * d * up_width;
      }
    }
  }
  if (plan.recompute_attention_core) {
    again += static_cast<double>(arch.layers) * attention_core_flops_per_token(arch);
  }
  // The loss in slices runs each slice's head forward again in backward.
  if (arch.loss_chunks > 1) again += 2.0 * static_cast<double>(arch.vocab * arch.d_model);
  flops.hardware = flops.model + again * tokens;
  return flops;
}

StepFlops rank_step_flops(const Architecture& arch, int64_t tokens_per_step,
                          const CheckpointPlan& plan, int64_t tp) {
  const StepFlops whole = step_flops(arch, tokens_per_step, plan);
  if (tp <= 1) return whole;
  const double ranks = static_cast<double>(tp);
  const double tokens = static_cast<double>(tokens_per_step);
  const double d = static_cast<double>(arch.d_model);
  StepFlops rank{whole.model / ranks, whole.hardware / ranks};
  if (arch.kv_heads % tp != 0) {
    // Forward and backward (3×) of the k and v projections the other ranks would have run.
    const double kv = static_cast<double>(arch.kv_dim());
    rank.hardware +=
        3.0 * static_cast<double>(arch.layers) * 4.0 * d * kv * (1.0 - 1.0 / ranks) * tokens;
  }
  if (arch.loss_chunks <= 1) {
    rank.hardware += 2.0 * static_cast<double>(arch.vocab) / ranks * d * tokens;
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
