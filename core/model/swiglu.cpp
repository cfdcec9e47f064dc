#include "model/swiglu.h"

namespace rematlab {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class SwiGlu : public torch::autograd::Function<SwiGlu> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& fused) {
    ctx->save_for_backward({fused});
    const auto halves = fused.chunk(2, /*dim=*/-1);
    return torch::silu(halves[0]) * halves[1];
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor fused = ctx->get_saved_variables()[0];
    const torch::Tensor& grad = grad_outputs.at(0);
    const auto halves = fused.chunk(2, /*dim=*/-1);
    const int64_t width = halves[0].size(-1);
    torch::Tensor grad_fused = torch::empty_like(fused);
    torch::Tensor grad_gate = grad_fused.narrow(-1, 0, width);
    torch::Tensor grad_up = grad_fused.narrow(-1, width, width);
    {  // the product's gradient for silu(gate), then silu's backward into the gate's half
      const torch::Tensor grad_activation = grad * halves[1];
      at::silu_backward_out(grad_gate, grad_activation, halves[0]);
    }
    at::mul_out(grad_up, grad, torch::silu(halves[0]));
    return {grad_fused};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& fused) { return SwiGlu::apply(fused); }

}  // namespace rematlab
