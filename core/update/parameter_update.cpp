#include "update/parameter_update.h"

#include <cmath>

namespace rematlab {

std::unique_ptr<torch::optim::AdamW> make_optimizer(const std::vector<torch::Tensor>& params,
                                                    const RunConfig& config) {
  return std::make_unique<torch::optim::AdamW>(
      params, torch::optim::AdamWOptions(config.lr).weight_decay(config.weight_decay));
}

double max_grad_norm(const RunConfig& config) {
  return config.grad_clip > 0.0 ? config.grad_clip : INFINITY;
}

double clip_and_step(torch::optim::Optimizer& optimizer, const std::vector<torch::Tensor>& params,
                     double max_norm) {
  const double norm = torch::nn::utils::clip_grad_norm_(params, max_norm);
  optimizer.step();
  return norm;
}

void clip_to_norm(const std::vector<torch::Tensor>& params, double max_norm, double total) {
  if (!std::isfinite(max_norm)) return;
  const double coefficient = max_norm / (total + 1e-6);
  if (coefficient >= 1.0) return;
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& param : params) {
    if (param.grad().defined()) param.grad().mul_(coefficient);
  }
}

void zero_gradients(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& param : params) {
    if (param.grad().defined()) param.grad().zero_();
  }
}

}  // namespace rematlab
