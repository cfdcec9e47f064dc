// The backward of a linear projection without its forward: the gradients autograd would give
// for y = linear(input, weight, bias), formed from `input` and the gradient of y alone. It lets a
// recomputation skip a projection whose output its backward does not need (early stop) or whose
// output was kept (keep: policies), with gradients equal bit for bit to plain autograd.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace rematlab {

struct LinearGrads {
  torch::Tensor input;
  torch::Tensor weight;
  torch::Tensor bias;  // undefined when the projection has none
};

// The operands autocast hands a linear (a lower-precision op on every device type), or without
// autocast the operands themselves: `input` as a cast recorded in the graph (its gradient flows
// back through the cast as in plain autograd), the weight and bias detached (their gradients are
// brought back to the parameters' dtype with in_autograd_dtype, as the cast's backward does).
struct LinearOperands {
  torch::Tensor input;
  torch::Tensor weight;
  torch::Tensor bias;
};
LinearOperands autocast_linear_operands(const torch::Tensor& input, const torch::Tensor& weight,
                                        const torch::Tensor& bias);

// `grad` in `dtype`, as the engine casts a gradient to the dtype of the tensor it is for.
torch::Tensor in_autograd_dtype(const torch::Tensor& grad, at::ScalarType dtype);

// Whether linear_backward reproduces autograd for this call: a rank-2 input, or a contiguous
// input of higher rank (LibTorch folds it into a matrix without a copy), in the weight's dtype.
// Other layouts take another route through at::linear and are not replicated.
bool linear_backward_supported(const torch::Tensor& input, const torch::Tensor& weight,
                               const torch::Tensor& bias);

// What the input's gradient needs of the input: not its values, only its shape, dtype and the
// order mm read it in. A frozen projection (fine-tuning) keeps this instead of its input.
struct LinearInputShape {
  std::vector<int64_t> sizes;
  at::ScalarType dtype = at::kFloat;
  bool column_major = false;  // a matrix stored column by column
};
LinearInputShape shape_of_linear_input(const torch::Tensor& input);

// The gradient of linear's input alone, identical to linear_backward's.
torch::Tensor linear_input_backward(const LinearInputShape& input, const torch::Tensor& grad_output,
                                    const torch::Tensor& weight);

// The gradients of linear(input, weight, bias) for `grad_output`, computed with the ATen calls and
// operand layouts autograd uses for the mm/addmm the forward dispatches to (mm's two operand
// formulas, the bias reduced with sum_to), so that they are identical to autograd's. All
// operands in one dtype: under autocast, pass the low-precision copies the forward used.
LinearGrads linear_backward(const torch::Tensor& input, const torch::Tensor& grad_output,
                            const torch::Tensor& weight, const torch::Tensor& bias);

}  // namespace rematlab
