#include "model/norm.h"

namespace rematlab {

NormImpl::NormImpl(ModelFamily family, int64_t width) : family_(family), eps_(1e-5) {
  weight_ = register_parameter("weight", torch::ones({width}));
  if (family_ == ModelFamily::kGpt) bias_ = register_parameter("bias", torch::zeros({width}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (family_ == ModelFamily::kGpt) {
    return torch::layer_norm(x, {x.size(-1)}, weight_, bias_, eps_);
  }
  // x / rms(x) · weight, computed in fp32 as Llama does, then back in the input's precision.
  const torch::Tensor x32 = x.to(torch::kFloat);
  const torch::Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return normed.to(x.scalar_type()) * weight_;
}

}  // namespace rematlab
