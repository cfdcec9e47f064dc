#include "model/gathered_projection.h"

#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "checkpoint/kept_outputs.h"
#include "checkpoint/linear_backward.h"

namespace rematlab {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kStateKey = "rematlab.gathered_projection";

struct GatheredState : torch::CustomClassHolder {
  TensorParallel group;
  int64_t gathered_dim = 1;  // gathered_dim(order)
  torch::Tensor weight;      // as the projection used them: autocast's copies under autocast
  torch::Tensor bias;
  at::ScalarType weight_dtype = at::kFloat;  // the parameters' own dtype
  at::ScalarType bias_dtype = at::kFloat;
};

class GatheredProjection : public torch::autograd::Function<GatheredProjection> {
 public:
  // `params`: the weight, and the bias when there is one (an undefined tensor cannot be an input).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local,
                               const at::TensorList& params,
                               const c10::intrusive_ptr<GatheredState>& state) {
    const torch::Tensor whole = state->group->gather(local, state->gathered_dim,
                                                     "gathering the sequence over tensor ranks");
    const LinearOperands operands =
        autocast_linear_operands(whole, params[0], params.size() > 1 ? params[1] : torch::Tensor());
    TORCH_CHECK(linear_backward_supported(operands.input, operands.weight, operands.bias),
                "a sequence-parallel projection of an input linear_backward cannot replay");
    state->weight = operands.weight;
    state->bias = operands.bias;
    state->weight_dtype = params[0].scalar_type();
    if (params.size() > 1) state->bias_dtype = params[1].scalar_type();
    ctx->save_for_backward({local});
    ctx->saved_data[kStateKey] = c10::IValue::make_capsule(state);
    return torch::nn::functional::linear(operands.input, operands.weight, operands.bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<GatheredState>(
        ctx->saved_data.at(kStateKey).toCapsule());
    ctx->saved_data.erase(kStateKey);
    const torch::Tensor local = ctx->get_saved_variables().at(0);
    TensorParallelGroup& group = *state->group;
    // The weight's gradient needs the whole sequence again; the input's is partial per rank.
    torch::Tensor whole = group.gather(local, state->gathered_dim,
                                       "gathering the sequence again for a weight's gradient");
    const LinearGrads grads = linear_backward(whole.to(state->weight.scalar_type()),
                                              grad_outputs.at(0), state->weight, state->bias);
    whole.reset();  // the weight's gradient is formed: not held through the scatter
    const torch::Tensor grad_local =
        group.sum_and_scatter(in_autograd_dtype(grads.input, local.scalar_type()),
                              state->gathered_dim, "scattering a gathered sequence's gradient");
    variable_list result = {grad_local, in_autograd_dtype(grads.weight, state->weight_dtype)};
    if (grads.bias.defined()) result.push_back(in_autograd_dtype(grads.bias, state->bias_dtype));
    result.emplace_back();  // the state
    return result;
  }
};

}  // namespace

torch::Tensor gathered_projection(std::optional<KeptOutput> which, const torch::Tensor& local,
                                  const torch::Tensor& weight, const torch::Tensor& bias,
                                  const TensorParallel& group, GatheredOrder order) {
  if (projection_is_kept(which) || !torch::GradMode::is_enabled()) {
    return projection(which, gather_sequence(local, group, order), weight, bias);
  }
  ProjectionLog::record(weight);  // here, where grad mode is the caller's (off in forward())
  auto state = c10::make_intrusive<GatheredState>();
  state->group = group;
  state->gathered_dim = gathered_dim(order);
  std::vector<torch::Tensor> params = {weight};
  if (bias.defined()) params.push_back(bias);
  return GatheredProjection::apply(local, at::TensorList(params), state);
}

torch::Tensor column_projection(std::optional<KeptOutput> which, const torch::Tensor& normed,
                                const torch::Tensor& weight, const torch::Tensor& bias,
                                const TensorParallel& group, bool sequence_parallel,
                                const QuantisedWeightPtr& quantised, GatheredOrder order) {
  if (!group) return projection(which, normed, weight, bias, quantised);
  TORCH_CHECK(!quantised, "a quantised base split over tensor ranks is not built");
  if (sequence_parallel) return gathered_projection(which, normed, weight, bias, group, order);
  return projection(which, into_region(normed, group), weight, bias);
}

}  // namespace rematlab
