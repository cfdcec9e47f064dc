#include "model/chunked_loss.h"

#include <torch/csrc/autograd/custom_function.h>

#include "checkpoint/replay_state.h"

namespace rematlab {
namespace {

namespace F = torch::nn::functional;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor slice_loss(const torch::Tensor& hidden, const torch::Tensor& weight,
                         const torch::Tensor& targets) {
  return F::cross_entropy(F::linear(hidden, weight), targets,
                          F::CrossEntropyFuncOptions().reduction(torch::kSum));
}

struct SliceReplay : torch::CustomClassHolder {
  int64_t chunks = 1;
  AutocastSnapshot autocast;  // the forward's, for the slices' recomputation
};

constexpr const char* kReplayKey = "rematlab.sliced_loss";

// The whole sliced head and loss as one autograd node. Forward keeps only the hidden states:
// no slice's logits outlive it. Backward runs each slice again, writes its input gradient into
// its rows and adds its weight gradient into one sum, so the head's gradient reaches the graph
// once (one accumulation, one data-parallel hook, as unsliced), beside at most one slice's
// logits and their gradients.
class SlicedCrossEntropy : public torch::autograd::Function<SlicedCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& targets,
                               const c10::intrusive_ptr<SliceReplay>& replay) {
    ctx->save_for_backward({hidden, weight, targets});
    ctx->saved_data[kReplayKey] = c10::IValue::make_capsule(replay);
    const auto hidden_slices = hidden.chunk(replay->chunks, /*dim=*/0);
    const auto target_slices = targets.chunk(replay->chunks, /*dim=*/0);
    torch::Tensor total;
    for (std::size_t i = 0; i < hidden_slices.size(); ++i) {
      const torch::Tensor part = slice_loss(hidden_slices[i], weight, target_slices[i]);
      total = total.defined() ? total + part : part;
    }
    return total / static_cast<double>(hidden.size(0));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto replay =
        c10::static_intrusive_pointer_cast<SliceReplay>(ctx->saved_data.at(kReplayKey).toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    // Each slice's sum enters the mean with the same factor.
    const torch::Tensor grad = grad_outputs.at(0) / static_cast<double>(hidden.size(0));
    const bool hidden_wanted = hidden.requires_grad();
    const bool weight_wanted = weight.requires_grad();
    torch::Tensor grad_hidden = hidden_wanted ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor grad_weight;
    const auto hidden_slices = hidden.chunk(replay->chunks, /*dim=*/0);
    const auto target_slices = saved[2].chunk(replay->chunks, /*dim=*/0);
    int64_t row = 0;
    const ScopedAutocast autocast(replay->autocast);
    torch::AutoGradMode enable_grad(true);
    for (std::size_t i = 0; i < hidden_slices.size(); ++i) {
      const torch::Tensor h = hidden_slices[i].detach().requires_grad_(hidden_wanted);
      const torch::Tensor w = weight.detach().requires_grad_(weight_wanted);
      std::vector<torch::Tensor> wrt;
      if (hidden_wanted) wrt.push_back(h);
      if (weight_wanted) wrt.push_back(w);
      const variable_list grads =
          torch::autograd::grad({slice_loss(h, w, target_slices[i])}, wrt, {grad});
      if (hidden_wanted) grad_hidden.narrow(0, row, h.size(0)).copy_(grads.front());
      if (weight_wanted)
        grad_weight = grad_weight.defined() ? grad_weight.add_(grads.back()) : grads.back();
      row += h.size(0);
    }
    return {grad_hidden, grad_weight, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor chunked_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t chunks) {
  if (chunks <= 1) return F::cross_entropy(F::linear(hidden, weight), targets);
  auto replay = c10::make_intrusive<SliceReplay>();
  replay->chunks = chunks;
  replay->autocast = AutocastSnapshot::capture(hidden.device().type());
  return SlicedCrossEntropy::apply(hidden, weight, targets, replay);
}

}  // namespace rematlab
