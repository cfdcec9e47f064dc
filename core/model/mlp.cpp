#include "model/mlp.h"

#include "model/initialisation.h"

namespace rematlab {

MlpSublayer::MlpSublayer(const ModelConfig& config)
    : family_(config.family), dropout_(config.dropout) {
  const int64_t d = config.d_model;
  const int64_t hidden = config.mlp_width();
  const bool gated = family_ == ModelFamily::kLlama;
  const bool bias = !gated;
  norm_ = register_module("norm", Norm(family_, d));
  up_ = register_module(
      "up", torch::nn::Linear(torch::nn::LinearOptions(d, gated ? 2 * hidden : hidden).bias(bias)));
  down_ =
      register_module("down", torch::nn::Linear(torch::nn::LinearOptions(hidden, d).bias(bias)));
  initialise_linear(up_, kProjectionStd);
  initialise_linear(down_, residual_projection_std(config));
}

torch::Tensor MlpSublayer::forward(const torch::Tensor& x) {
  torch::Tensor hidden = up_(norm_(x));
  if (family_ == ModelFamily::kLlama) {
    const auto halves = hidden.chunk(2, /*dim=*/-1);
    hidden = torch::silu(halves[0]) * halves[1];
  } else {
    hidden = torch::gelu(hidden);
  }
  return x + torch::dropout(down_(hidden), dropout_, is_training());
}

}  // namespace rematlab
