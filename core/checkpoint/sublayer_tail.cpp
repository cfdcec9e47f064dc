#include "checkpoint/sublayer_tail.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>

#include <optional>

#include "checkpoint/kept_outputs.h"
#include "checkpoint/linear_backward.h"

namespace rematlab {
namespace {

// Dropout's backward with the mask drawn as the forward drew it: the graph of dropout(ones), held
// by its two ends (not by its output, whose values nobody needs). Dropout's mask depends on its
// input's shape, dtype and device but not on its values, and its backward only on the mask, so
// dropout of ones shaped like the projection's output draws the same mask from the same
// generator state, and its graph forms the gradient autograd formed. On the CPU the ones are one
// broadcast value (the mask is allocated contiguous either way); elsewhere the kernel may choose
// its indexing by layout, so they are a real tensor.
struct DropoutReplay {
  torch::autograd::Edge output;  // dropout's backward node
  torch::autograd::Edge input;   // where the gradient of the ones arrives
};

std::optional<DropoutReplay> replay_dropout(double p, bool training, at::IntArrayRef sizes,
                                            const torch::TensorOptions& options) {
  if (!training || p == 0.0) return std::nullopt;  // at::dropout is then the identity
  torch::Tensor ones = options.device().is_cpu() ? torch::ones({}, options).expand(sizes)
                                                 : torch::ones(sizes, options);
  ones.requires_grad_(true);
  const torch::Tensor dropped = torch::dropout(ones, p, /*train=*/true);
  return DropoutReplay{torch::autograd::impl::gradient_edge(dropped),
                       torch::autograd::impl::gradient_edge(ones)};
}

// The gradient of dropout's input for `grad`. The graph is run as a graph of its own (as
// autograd::grad runs one): called inside another backward, a node run directly would consult
// that backward's plan, which does not include it, and compute nothing.
torch::Tensor dropout_backward(const DropoutReplay& replay, const torch::Tensor& grad) {
  return torch::autograd::Engine::get_default_engine()
      .execute({replay.output}, {grad}, /*keep_graph=*/false, /*create_graph=*/false,
               /*accumulate_grad=*/false, {replay.input})
      .at(0);
}

struct TailState : torch::CustomClassHolder {
  torch::Tensor weight;  // as the projection used them: autocast's copies under autocast
  torch::Tensor bias;
  // A quantised projection's values, dequantised in backward to the multiply's dtype (`weight`
  // is then undefined).
  QuantisedWeightPtr quantised;
  at::ScalarType compute_dtype = at::kFloat;
  int64_t out_features = 0;
  bool has_term = false;  // an adapter's term is the last of the node's tensor inputs
  at::ScalarType term_dtype = at::kFloat;
  std::optional<DropoutReplay> dropout;
  at::ScalarType residual_dtype = at::kFloat;
  at::ScalarType weight_dtype = at::kFloat;  // the parameters' own dtype
  at::ScalarType bias_dtype = at::kFloat;
  bool parameters_wanted = true;  // false for a frozen projection (fine-tuning)
  // A frozen projection's backward needs no values of h, only its shape: h is not kept.
  LinearInputShape frozen_input;
};

constexpr const char* kTailKey = "rematlab.tail";

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class TailFunction : public torch::autograd::Function<TailFunction> {
 public:
  // `params`: the weight, and the bias when there is one (an undefined tensor cannot be an input).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& residual,
                               const torch::Tensor& input, const at::TensorList& /*params*/,
                               const c10::intrusive_ptr<TailState>& state) {
    if (state->parameters_wanted) {
      ctx->save_for_backward({input});
    } else {
      state->frozen_input = shape_of_linear_input(input);
    }
    ctx->saved_data[kTailKey] = c10::IValue::make_capsule(state);
    std::vector<int64_t> sizes = input.sizes().vec();
    sizes.back() = state->out_features;
    const auto dtype = at::promote_types(residual.scalar_type(), input.scalar_type());
    return torch::zeros({}, residual.options().dtype(dtype)).expand(sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state =
        c10::static_intrusive_pointer_cast<TailState>(ctx->saved_data.at(kTailKey).toCapsule());
    ctx->saved_data.erase(kTailKey);
    const bool wanted = state->parameters_wanted;
    const torch::Tensor input = wanted ? ctx->get_saved_variables().at(0) : torch::Tensor();
    const torch::Tensor& grad = grad_outputs.at(0);
    // The residual add hands the output's gradient to both operands.
    torch::Tensor grad_projection =
        in_autograd_dtype(grad, wanted ? input.scalar_type() : state->frozen_input.dtype);
    if (state->dropout) {
      grad_projection = dropout_backward(*state->dropout, grad_projection);
      state->dropout.reset();  // frees the graph
    }
    LinearGrads grads;
    if (wanted) {
      grads = linear_backward(input, grad_projection, state->weight, state->bias);
    } else if (ctx->needs_input_grad(1)) {
      // (Before the first adapter in front of it, h wants no gradient: the node exists only
      // for an adapter's term.)
      const torch::Tensor weight = state->quantised
                                       ? state->quantised->dequantise().to(state->compute_dtype)
                                       : state->weight;
      grads.input = linear_input_backward(state->frozen_input, grad_projection, weight);
    }
    // Under autocast the projection used cast copies of its parameters: the cast's backward
    // brings their gradients back to the parameters' dtype.
    variable_list result = {
        in_autograd_dtype(grad, state->residual_dtype), grads.input,
        wanted ? in_autograd_dtype(grads.weight, state->weight_dtype) : torch::Tensor()};
    if (state->bias.defined()) {
      result.push_back(wanted ? in_autograd_dtype(grads.bias, state->bias_dtype) : torch::Tensor());
    }
    // The sum's backward hands the adapter's term the projection's gradient as it is.
    if (state->has_term) result.push_back(in_autograd_dtype(grad_projection, state->term_dtype));
    result.emplace_back();  // the state
    return result;
  }
};

}  // namespace

torch::Tensor SublayerTail::complete() const {
  const bool projects = weight.defined() || quantised;
  if (projects && !sum_over) {
    torch::Tensor output = projection(kept_as, projection_input, weight, bias, quantised);
    if (adapter_term) output = output + adapter_term(projection_input);
    return residual + torch::dropout(output, dropout, training);
  }
  // This rank's part (a row-parallel projection's, or a branch formed in parts over tensor
  // ranks: experts split by width), summed over the ranks; or the branch itself.
  torch::Tensor output = projection_input;
  if (projects) {
    TORCH_CHECK(!adapter_term && !quantised, "fine-tuning a row-parallel projection is not built");
    output = projection(kept_as, projection_input, weight, torch::Tensor());
  }
  if (sum_over) {
    output = scatter_sequence ? rematlab::scatter_sequence(output, sum_over, gathered_order)
                              : out_of_region(output, sum_over);
  }
  // As a linear under autocast would add it: in the output's dtype.
  if (projects && bias.defined()) output = output + bias.to(output.scalar_type());
  return residual + torch::dropout(output, dropout, training);
}

// A row-parallel tail needs no collective here: the sum's backward hands every rank the output's
// gradient as it is, so the gradients of h and of this rank's columns are formed as without it.
// A scattered one's backward gathers the sequence first: not replicated, the tail runs whole.
torch::Tensor tail_without_projection(const SublayerTail& tail) {
  if (tail.scatter_sequence || (!tail.weight.defined() && !tail.quantised)) return {};
  TORCH_CHECK(!tail.sum_over || (!tail.adapter_term && !tail.quantised),
              "fine-tuning a row-parallel projection is not built");
  // h, the weight and the bias as the projection saw them (autocast's copies under autocast). A
  // quantised projection's node forms its input's gradient itself, whatever h's layout.
  const LinearOperands operands =
      tail.quantised ? quantised_operands(tail.projection_input, tail.bias)
                     : autocast_linear_operands(tail.projection_input, tail.weight, tail.bias);
  if (!tail.quantised &&
      !linear_backward_supported(operands.input, operands.weight, operands.bias)) {
    return {};
  }
  const torch::Tensor& input = operands.input;
  auto state = c10::make_intrusive<TailState>();
  if (tail.quantised) {
    state->quantised = tail.quantised;
    state->compute_dtype = operands.weight.scalar_type();
    state->out_features = tail.quantised->sizes().front();
  } else {
    // A frozen projection whose input wants no gradient (an adapter's node alone made this
    // one) needs nothing of its weight: autocast's copy is not held until backward.
    if (tail.weight.requires_grad() || input.requires_grad()) state->weight = operands.weight;
    state->out_features = operands.weight.size(0);
  }
  state->bias = operands.bias;
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes.back() = state->out_features;
  state->dropout =
      replay_dropout(tail.dropout, tail.training, sizes, input.options().requires_grad(false));
  state->residual_dtype = tail.residual.scalar_type();
  state->weight_dtype = tail.weight.scalar_type();
  state->parameters_wanted = tail.weight.requires_grad();
  if (tail.bias.defined()) state->bias_dtype = tail.bias.scalar_type();
  std::vector<torch::Tensor> params = {tail.weight};
  if (tail.bias.defined()) params.push_back(tail.bias);
  if (tail.adapter_term) {
    // Formed where the sum formed it, from h as the adapter sees it.
    const torch::Tensor term = tail.adapter_term(tail.projection_input);
    state->has_term = true;
    state->term_dtype = term.scalar_type();
    params.push_back(term);
  }
  return TailFunction::apply(tail.residual, input, at::TensorList(params), state);
}

}  // namespace rematlab
