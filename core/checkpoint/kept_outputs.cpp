#include "checkpoint/kept_outputs.h"

#include <torch/csrc/autograd/custom_function.h>

#include <atomic>
#include <mutex>

#include "checkpoint/linear_backward.h"

namespace rematlab {
namespace {

thread_local const ScopedKeeping* t_current = nullptr;

std::mutex g_projection_log_mutex;
// Read on every projection: a log exists only in tests, so the lock is taken only then.
std::atomic<ProjectionLog*> g_projection_log{nullptr};

torch::Tensor run_linear(const torch::Tensor& input, const torch::Tensor& weight,
                         const torch::Tensor& bias, const QuantisedWeightPtr& quantised) {
  ProjectionLog::record(weight);
  if (quantised) return quantised_linear(input, quantised, bias);
  return torch::nn::functional::linear(input, weight, bias);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct KeptState : torch::CustomClassHolder {
  torch::Tensor output;  // handed to the graph by forward, never held past it (no cycle)
  torch::Tensor weight;  // as the projection used them: autocast's copies under autocast
  torch::Tensor bias;
  at::ScalarType weight_dtype = at::kFloat;  // the parameters' own dtype
  at::ScalarType bias_dtype = at::kFloat;
  bool parameters_wanted = true;  // false for a frozen projection (fine-tuning)
  // A frozen projection's backward needs no values of its input, only its shape: not kept.
  LinearInputShape frozen_input;
  // A quantised base's: `weight` is then dequantised in backward, in this dtype.
  QuantisedWeightPtr quantised;
  at::ScalarType compute_dtype = at::kFloat;
};

constexpr const char* kKeptKey = "rematlab.kept_projection";

// The kept output of linear(input, weight, bias) as a graph node: forward returns it, backward is
// the projection's (linear_backward).
class KeptProjection : public torch::autograd::Function<KeptProjection> {
 public:
  // `params`: the weight, and the bias when there is one (an undefined tensor cannot be an input).
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const at::TensorList& /*params*/,
                               const c10::intrusive_ptr<KeptState>& state) {
    if (state->parameters_wanted) {
      ctx->save_for_backward({input});
    } else {
      state->frozen_input = shape_of_linear_input(input);
    }
    torch::Tensor output = std::move(state->output);
    ctx->saved_data[kKeptKey] = c10::IValue::make_capsule(state);
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state =
        c10::static_intrusive_pointer_cast<KeptState>(ctx->saved_data.at(kKeptKey).toCapsule());
    ctx->saved_data.erase(kKeptKey);
    const bool wanted = state->parameters_wanted;
    LinearGrads grads;
    if (wanted) {
      grads = linear_backward(ctx->get_saved_variables().at(0), grad_outputs.at(0), state->weight,
                              state->bias);
    } else {
      const torch::Tensor weight = state->quantised
                                       ? state->quantised->dequantise().to(state->compute_dtype)
                                       : state->weight;
      grads.input = linear_input_backward(state->frozen_input, grad_outputs.at(0), weight);
    }
    variable_list result = {grads.input, wanted
                                             ? in_autograd_dtype(grads.weight, state->weight_dtype)
                                             : torch::Tensor()};
    if (state->bias.defined()) {
      result.push_back(wanted ? in_autograd_dtype(grads.bias, state->bias_dtype) : torch::Tensor());
    }
    result.emplace_back();  // the state
    return result;
  }
};

// A kept output of a quantised (frozen) projection: its backward dequantises the weight again.
torch::Tensor replay_quantised(const torch::Tensor& input, const torch::Tensor& weight,
                               const torch::Tensor& bias, const QuantisedWeightPtr& quantised,
                               const c10::intrusive_ptr<KeptState>& state) {
  const LinearOperands operands = quantised_operands(input, bias);
  state->quantised = quantised;
  state->compute_dtype = operands.weight.scalar_type();
  state->parameters_wanted = false;
  return KeptProjection::apply(operands.input, at::TensorList({weight}), state);
}

}  // namespace

ScopedKeeping::ScopedKeeping(const KeptOutputs& keep, KeptTensors* store, Mode mode)
    : keep_(keep), store_(store), mode_(mode), previous_(t_current) {
  t_current = this;
}

ScopedKeeping::~ScopedKeeping() { t_current = previous_; }

ProjectionLog::ProjectionLog() {
  std::lock_guard<std::mutex> lock(g_projection_log_mutex);
  g_projection_log = this;
}

ProjectionLog::~ProjectionLog() {
  std::lock_guard<std::mutex> lock(g_projection_log_mutex);
  g_projection_log = nullptr;
}

void ProjectionLog::record(const torch::Tensor& weight) {
  if (!g_projection_log.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(g_projection_log_mutex);
  if (ProjectionLog* log = g_projection_log.load()) {
    ++log->runs_[{weight.data_ptr(), torch::GradMode::is_enabled()}];
  }
}

int ProjectionLog::count(const torch::Tensor& weight, bool grad_mode) const {
  std::lock_guard<std::mutex> lock(g_projection_log_mutex);
  const auto it = runs_.find({weight.data_ptr(), grad_mode});
  return it == runs_.end() ? 0 : it->second;
}

bool projection_is_kept(std::optional<KeptOutput> which) {
  return which && t_current && t_current->keeps(*which);
}

torch::Tensor projection(std::optional<KeptOutput> which, const torch::Tensor& input,
                         const torch::Tensor& weight, const torch::Tensor& bias,
                         const QuantisedWeightPtr& quantised) {
  const ScopedKeeping* scope = t_current;
  if (!projection_is_kept(which)) return run_linear(input, weight, bias, quantised);
  if (scope->mode_ == ScopedKeeping::Mode::kRecord) {
    torch::Tensor output = run_linear(input, weight, bias, quantised);
    scope->store_->tensors.push_back(output);
    return output;
  }
  TORCH_CHECK(!scope->store_->tensors.empty(),
              "keep: the recomputation asked for more kept outputs than its forward saved");
  auto state = c10::make_intrusive<KeptState>();
  state->output = std::move(scope->store_->tensors.front());
  scope->store_->tensors.pop_front();
  if (quantised) return replay_quantised(input, weight, bias, quantised, state);
  const LinearOperands operands = autocast_linear_operands(input, weight, bias);
  if (!linear_backward_supported(operands.input, operands.weight, operands.bias)) {
    // Another layout takes another route through at::linear: run it (same values).
    return run_linear(input, weight, bias, nullptr);
  }
  state->weight = operands.weight;
  state->bias = operands.bias;
  state->weight_dtype = weight.scalar_type();
  state->parameters_wanted = weight.requires_grad();
  if (bias.defined()) state->bias_dtype = bias.scalar_type();
  std::vector<torch::Tensor> params = {weight};
  if (bias.defined()) params.push_back(bias);
  return KeptProjection::apply(operands.input, at::TensorList(params), state);
}

}  // namespace rematlab
