// One residual sublayer of the chain every model family is made of (attn0, mlp0, attn1, …):
// forward(x) = x + dropout(projection(branch(norm(x)))). Checkpoint plans cut the chain between
// sublayers. The tail — the output projection, its dropout and the residual add — is exposed
// apart so that a recomputation can stop before it (checkpoint/sublayer_tail.h).
#pragma once

#include <torch/torch.h>

#include "checkpoint/sublayer_tail.h"

namespace rematlab {

class Sublayer : public torch::nn::Module {
 public:
  // Runs the sublayer up to its tail and returns the tail's operands.
  virtual SublayerTail forward_until_tail(const torch::Tensor& x) = 0;
  // One definition for both routes, so the early-stopped recomputation and the forward cannot
  // differ in what they run.
  torch::Tensor forward(const torch::Tensor& x) { return forward_until_tail(x).complete(); }
};

}  // namespace rematlab
