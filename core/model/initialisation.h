// GPT-2's initialisation, used by both families: N(0, 0.02) weights, zero biases, and the
// residual output projections scaled by 1/√(2·layers) so the residual stream's variance does not
// grow with depth.
#pragma once

#include <torch/torch.h>

#include <cmath>

#include "model/model_config.h"

namespace rematlab {

inline constexpr double kProjectionStd = 0.02;

inline double residual_projection_std(const ModelConfig& config) {
  return kProjectionStd / std::sqrt(2.0 * static_cast<double>(config.layers));
}

inline void initialise_linear(torch::nn::Linear& linear, double std) {
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, std);
  if (linear->bias.defined()) linear->bias.zero_();
}

}  // namespace rematlab
