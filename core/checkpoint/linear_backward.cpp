#include "checkpoint/linear_backward.h"

#include <ATen/ExpandUtils.h>

#include "compat/torch_compat.h"

namespace rematlab {
namespace {

// A matrix stored column by column: mm's backward then writes its gradient in the same order.
bool column_major(const torch::Tensor& matrix) {
  return matrix.stride(0) == 1 && matrix.stride(1) == matrix.size(0);
}

// For out = mat1.mm(mat2), the gradient of mat1 as autograd's formula for mm forms it
// (mm_mat1_backward: laid out like mat1). Real dtypes only, so no conjugation.
torch::Tensor mm_mat1_grad(const torch::Tensor& grad, bool mat1_column_major,
                           const torch::Tensor& mat2) {
  if (mat1_column_major) return mat2.mm(grad.t()).t();
  return grad.mm(mat2.t());
}

// The gradient of mat2 (mm_mat2_backward: laid out like mat2).
torch::Tensor mm_mat2_grad(const torch::Tensor& grad, const torch::Tensor& mat1,
                           const torch::Tensor& mat2) {
  if (column_major(mat2)) return grad.t().mm(mat1).t();
  return mat1.t().mm(grad);
}

// A floating operand other than double in the autocast dtype, the rest unchanged.
torch::Tensor autocast_operand(const torch::Tensor& t, c10::DeviceType type) {
  if (!t.defined() || !compat::autocast_enabled(type)) return t;
  if (!t.is_floating_point() || t.scalar_type() == at::kDouble) return t;
  const at::ScalarType low = compat::autocast_dtype(type);
  return t.scalar_type() == low ? t : t.to(low);
}

}  // namespace

LinearOperands autocast_linear_operands(const torch::Tensor& input, const torch::Tensor& weight,
                                        const torch::Tensor& bias) {
  const auto type = input.device().type();
  LinearOperands operands;
  operands.input = autocast_operand(input, type);
  torch::NoGradGuard no_grad;
  operands.weight = autocast_operand(weight.detach(), type);
  if (bias.defined()) operands.bias = autocast_operand(bias.detach(), type);
  return operands;
}

torch::Tensor in_autograd_dtype(const torch::Tensor& grad, at::ScalarType dtype) {
  return grad.scalar_type() == dtype ? grad : grad.to(dtype);
}

bool linear_backward_supported(const torch::Tensor& input, const torch::Tensor& weight,
                               const torch::Tensor& bias) {
  if (input.dim() < 2 || weight.dim() != 2) return false;
  if (input.dim() > 2 && !input.is_contiguous()) return false;
  if (input.layout() != c10::kStrided || weight.layout() != c10::kStrided) return false;
  if (input.is_complex() || input.scalar_type() != weight.scalar_type()) return false;
  if (bias.defined() && (bias.dim() != 1 || bias.scalar_type() != weight.scalar_type())) {
    return false;
  }
  return input.numel() > 0;
}

LinearInputShape shape_of_linear_input(const torch::Tensor& input) {
  if (input.dim() == 2) return {input.sizes().vec(), input.scalar_type(), column_major(input)};
  // Of higher rank, linear folds it to a row-major (rows, in) matrix (a copy if it must): column
  // major only as a single value is.
  const bool single = input.numel() == 1;
  return {input.sizes().vec(), input.scalar_type(), single};
}

torch::Tensor linear_input_backward(const LinearInputShape& input, const torch::Tensor& grad_output,
                                    const torch::Tensor& weight) {
  const bool folded = input.sizes.size() > 2;
  const torch::Tensor grad = folded ? grad_output.reshape({-1, grad_output.size(-1)}) : grad_output;
  const torch::Tensor grad_mat1 = mm_mat1_grad(grad, input.column_major, weight.t());
  return folded ? grad_mat1.reshape(input.sizes) : grad_mat1;
}

LinearGrads linear_backward(const torch::Tensor& input, const torch::Tensor& grad_output,
                            const torch::Tensor& weight, const torch::Tensor& bias) {
  TORCH_CHECK(linear_backward_supported(input, weight, bias),
              "linear_backward: input layout not replicated");
  // at::linear multiplies by weight.t() (a column-major view), as addmm(bias, input, weight.t())
  // with a bias and mm(input, weight.t()) through matmul without one; a contiguous input of
  // rank > 2 is first folded to (rows, in) and the result unfolded, both as views.
  LinearGrads grads;
  grads.input = linear_input_backward(shape_of_linear_input(input), grad_output, weight);
  const torch::Tensor mat2 = weight.t();
  const bool folded = input.dim() > 2;
  const torch::Tensor mat1 = folded ? input.reshape({-1, input.size(-1)}) : input;
  const torch::Tensor grad = folded ? grad_output.reshape({-1, grad_output.size(-1)}) : grad_output;
  // weight.t()'s gradient, transposed back by the view's backward.
  grads.weight = mm_mat2_grad(grad, mat1, mat2).t();
  // addmm's gradient for its broadcast bias is the output gradient, which autograd reduces to the
  // bias's shape with sum_to.
  if (bias.defined()) grads.bias = at::sum_to(grad, bias.sizes());
  return grads;
}

}  // namespace rematlab
