// Mixture-of-experts MLPs (Mixtral, Qwen 2 MoE, Qwen 3 MoE): each block's MLP is a router that
// sends every token to its k best of E experts (SwiGLU MLPs of their own width), optionally
// beside a shared expert every token passes through. Without experts (E 0) the MLP is dense.
#pragma once

#include <cmath>
#include <cstdint>

namespace rematlab {

struct MoeOptions {
  int64_t experts = 0;            // routed experts a block; 0: a dense MLP
  int64_t experts_per_token = 0;  // k: the experts each token is sent to
  int64_t expert_hidden = 0;      // each expert's SwiGLU width; 0: the model's MLP width
  // Qwen 2 MoE: one expert every token passes through, of this width, its output scaled by a
  // sigmoid gate of the token (0: none).
  int64_t shared_expert_hidden = 0;
  // Whether a token's k routing weights are scaled to sum to 1 (Mixtral, Qwen 3 MoE) or are the
  // softmax's probabilities as they are (Qwen 2 MoE's default).
  bool normalise_weights = true;
  // The load-balancing loss's coefficient (router_aux_loss_coef): coefficient × the blocks'
  // mean balance loss is added to the loss the model trains on.
  double balance_coefficient = 0.0;
  // Each expert takes at most ⌈factor · tokens · k / E⌉ tokens of a micro-batch, the first in
  // order, and the rest pass it by (their residual only); 0: no token is dropped.
  double capacity_factor = 0.0;

  bool enabled() const { return experts > 0; }
  bool operator==(const MoeOptions& other) const {
    return experts == other.experts && experts_per_token == other.experts_per_token &&
           expert_hidden == other.expert_hidden &&
           shared_expert_hidden == other.shared_expert_hidden &&
           normalise_weights == other.normalise_weights &&
           balance_coefficient == other.balance_coefficient &&
           capacity_factor == other.capacity_factor;
  }
};

// The most slots (a token's choice of one expert) one expert takes of a micro-batch of `tokens`:
// ⌈factor · tokens · k / E⌉, or every slot without a capacity factor.
inline int64_t expert_capacity(int64_t tokens, const MoeOptions& moe) {
  if (moe.capacity_factor <= 0.0) return tokens * moe.experts_per_token;
  const double share = moe.capacity_factor * static_cast<double>(tokens * moe.experts_per_token) /
                       static_cast<double>(moe.experts);
  return static_cast<int64_t>(std::ceil(share));
}

// Limits far beyond any model trained today (DeepSeek-V3 routes to 8 of 256).
inline constexpr int64_t kMaxExperts = 4096;

}  // namespace rematlab
