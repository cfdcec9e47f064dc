// How a mixture of experts sends one micro-batch's tokens to its experts and brings their outputs
// back: each token's k choices are slots (token t's j-th is slot t·k + j); the slots the experts
// take are grouped by expert, tokens in order within each, so each expert multiplies one
// contiguous block of rows. Nothing here adds with atomics (a gather's backward scatters into
// distinct rows only), so a recomputation forms the same values bit for bit on every device.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/moe_options.h"

namespace rematlab {

struct ExpertRouting {
  torch::Tensor probabilities;  // (tokens, E): the softmax of the router's logits, float32
  torch::Tensor chosen;         // (E): how many slots chose each expert (int64), before capacity
  torch::Tensor slots;          // (M): the slots the experts take, grouped by expert
  torch::Tensor weights;        // (M): each taken slot's routing weight (differentiable)
  std::vector<int64_t> taken;   // per expert: how many of `slots` are its (sums to M)
};

// Routes `logits` (tokens, E): the softmax's k largest probabilities of each token (scaled to
// sum to 1 when the options normalise them), grouped by expert and cut to the capacity.
ExpertRouting route_tokens(const torch::Tensor& logits, const MoeOptions& moe);

// The rows of `tokens` (tokens, d) each taken slot sends: (M, d), in `routing.slots`' order.
torch::Tensor gather_expert_inputs(const torch::Tensor& tokens, const ExpertRouting& routing,
                                   int64_t experts_per_token);

// Each token's Σ over its taken slots of weight × its expert's output: (tokens, d) from the
// experts' outputs (M, d) in `routing.slots`' order. A dropped slot adds nothing.
torch::Tensor combine_expert_outputs(const torch::Tensor& outputs, const ExpertRouting& routing,
                                     int64_t tokens, int64_t experts_per_token);

}  // namespace rematlab
