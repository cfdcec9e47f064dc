#include "train/loss_scaler.h"

namespace rematlab {

bool LossScaler::unscale(const std::vector<torch::Tensor>& params) const {
  torch::NoGradGuard no_grad;
  bool finite = true;
  for (const auto& param : params) {
    torch::Tensor grad = param.grad();
    if (!grad.defined()) continue;
    grad.mul_(1.0 / scale_);
    finite = finite && torch::isfinite(grad).all().item<bool>();
  }
  return finite;
}

void LossScaler::update(bool gradients_finite) {
  if (!gradients_finite) {
    scale_ = std::max(1.0, scale_ * 0.5);
    good_steps_ = 0;
    return;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ *= 2.0;
    good_steps_ = 0;
  }
}

}  // namespace rematlab
