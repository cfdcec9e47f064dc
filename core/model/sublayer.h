// One residual sublayer of the chain every model family is made of (attn0, mlp0, attn1, …):
// forward(x) = x + branch(norm(x)). Checkpoint plans cut the chain between sublayers.
#pragma once

#include <torch/torch.h>

namespace rematlab {

class Sublayer : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};

}  // namespace rematlab
