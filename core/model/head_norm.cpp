#include "model/head_norm.h"

namespace rematlab {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class HeadRmsNorm : public torch::autograd::Function<HeadRmsNorm> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    const torch::Tensor x32 = x.to(torch::kFloat);
    const torch::Tensor inverse_rms = torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
    const torch::Tensor normed = x32 * inverse_rms;
    ctx->save_for_backward({normed.to(x.scalar_type()), inverse_rms, weight});
    return (normed * weight).to(x.scalar_type());
  }

  // With n = x·r and r = (mean(x²) + eps)^-½: dx = r·(g·w − n·mean(g·w·n)), dw = Σ g·n.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& normed_stored = saved[0];
    const torch::Tensor& inverse_rms = saved[1];
    const torch::Tensor& weight = saved[2];
    const torch::Tensor grad = grad_outputs.at(0).to(torch::kFloat);
    const torch::Tensor normed = normed_stored.to(torch::kFloat);
    torch::Tensor grad_weight;
    if (ctx->needs_input_grad(1)) {
      std::vector<int64_t> all_but_last(static_cast<std::size_t>(grad.dim() - 1));
      for (int64_t dim = 0; dim + 1 < grad.dim(); ++dim) all_but_last[dim] = dim;
      grad_weight = (grad * normed).sum(all_but_last).to(weight.scalar_type());
    }
    torch::Tensor grad_input;
    if (ctx->needs_input_grad(0)) {
      torch::Tensor scaled = grad * weight;  // dL/dn
      const torch::Tensor along = (scaled * normed).mean(-1, /*keepdim=*/true);
      scaled.sub_(normed * along).mul_(inverse_rms);
      grad_input = scaled.to(normed_stored.scalar_type());
    }
    return {grad_input, grad_weight, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor head_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() >= 2, "head_rms_norm normalises the last dimension of a batch of heads");
  return HeadRmsNorm::apply(x, weight, eps);
}

HeadNormImpl::HeadNormImpl(int64_t head_width) {
  weight_ = register_parameter("weight", torch::ones({head_width}));
}

}  // namespace rematlab
