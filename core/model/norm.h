// The normalisation before each sublayer and before the head: LayerNorm (GPT: scale and shift)
// or RMSNorm (Llama: scale only, no mean subtracted).
#pragma once

#include <torch/torch.h>

#include "model/model_config.h"

namespace rematlab {

class NormImpl : public torch::nn::Module {
 public:
  NormImpl(ModelFamily family, int64_t width);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  ModelFamily family_;
  double eps_;
  torch::Tensor weight_;
  torch::Tensor bias_;  // LayerNorm only
};
TORCH_MODULE(Norm);

}  // namespace rematlab
