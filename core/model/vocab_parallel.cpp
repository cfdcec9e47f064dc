#include "model/vocab_parallel.h"

#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "checkpoint/replay_state.h"

namespace rematlab {
namespace {

namespace F = torch::nn::functional;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Which of `targets` this rank holds, and their rows in its shard (0 where it holds none).
struct LocalTargets {
  torch::Tensor held;  // bool, per token
  torch::Tensor rows;  // long, per token
};

LocalTargets local_targets(const torch::Tensor& targets, const VocabShard& shard) {
  const torch::Tensor held = (targets >= shard.first) & (targets < shard.first + shard.rows);
  return {held, torch::where(held, targets - shard.first, torch::zeros_like(targets))};
}

struct HeadState : torch::CustomClassHolder {
  TensorParallel group;
  VocabShard shard;
  int64_t chunks = 1;
  AutocastSnapshot autocast;               // the forward's, for the slices' recomputation
  std::vector<torch::Tensor> log_normals;  // per slice: log Σ exp(logits) over the whole vocab
};

constexpr const char* kHeadKey = "rematlab.vocab_parallel_head";

torch::Tensor slice_logits(const torch::Tensor& hidden, const torch::Tensor& weight) {
  return F::linear(hidden, weight).to(torch::kFloat);
}

class VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& targets,
                               const c10::intrusive_ptr<HeadState>& state) {
    ctx->save_for_backward({hidden, weight, targets});
    ctx->saved_data[kHeadKey] = c10::IValue::make_capsule(state);
    TensorParallelGroup& group = *state->group;
    const auto hidden_slices = hidden.chunk(state->chunks, /*dim=*/0);
    const auto target_slices = targets.chunk(state->chunks, /*dim=*/0);
    torch::Tensor total = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    for (std::size_t i = 0; i < hidden_slices.size(); ++i) {
      const torch::Tensor logits = slice_logits(hidden_slices[i], weight);
      const torch::Tensor top =
          group.max(std::get<0>(logits.max(-1)), "the largest logit over tensor ranks");
      const LocalTargets local = local_targets(target_slices[i], state->shard);
      const torch::Tensor picked =
          logits.gather(-1, local.rows.unsqueeze(-1)).squeeze(-1) * local.held;
      // This rank's part of the softmax's normaliser and of the target's logit, summed over the
      // ranks in one collective.
      const torch::Tensor parts =
          group.sum(torch::stack({(logits - top.unsqueeze(-1)).exp().sum(-1), picked}),
                    "the softmax's normaliser and the target's logit over tensor ranks");
      const torch::Tensor normal = parts[0];
      const torch::Tensor target_logit = parts[1];
      const torch::Tensor log_normal = normal.log() + top;
      state->log_normals.push_back(log_normal);
      total = total + (log_normal - target_logit).sum();
    }
    return total / static_cast<double>(hidden.size(0));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state =
        c10::static_intrusive_pointer_cast<HeadState>(ctx->saved_data.at(kHeadKey).toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor grad = grad_outputs.at(0) / static_cast<double>(hidden.size(0));
    const bool hidden_wanted = hidden.requires_grad();
    const bool weight_wanted = weight.requires_grad();
    torch::Tensor grad_hidden = hidden_wanted ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor grad_weight;
    const auto hidden_slices = hidden.chunk(state->chunks, /*dim=*/0);
    const auto target_slices = saved[2].chunk(state->chunks, /*dim=*/0);
    int64_t row = 0;
    TORCH_CHECK(state->log_normals.size() == hidden_slices.size(),
                "the vocabulary-parallel loss's backward runs once per forward");
    const ScopedAutocast autocast(state->autocast);
    torch::AutoGradMode enable_grad(true);
    for (std::size_t i = 0; i < hidden_slices.size(); ++i) {
      const torch::Tensor h = hidden_slices[i].detach().requires_grad_(hidden_wanted);
      const torch::Tensor w = weight.detach().requires_grad_(weight_wanted);
      const torch::Tensor logits = slice_logits(h, w);
      // d loss / d logits = softmax − one-hot of the target, on this rank's columns.
      torch::Tensor grad_logits = (logits.detach() - state->log_normals[i].unsqueeze(-1)).exp();
      const LocalTargets local = local_targets(target_slices[i], state->shard);
      grad_logits.scatter_add_(-1, local.rows.unsqueeze(-1),
                               -local.held.to(grad_logits.scalar_type()).unsqueeze(-1));
      grad_logits.mul_(grad);
      std::vector<torch::Tensor> wrt;
      if (hidden_wanted) wrt.push_back(h);
      if (weight_wanted) wrt.push_back(w);
      const variable_list grads = torch::autograd::grad({logits}, wrt, {grad_logits});
      if (hidden_wanted) grad_hidden.narrow(0, row, h.size(0)).copy_(grads.front());
      if (weight_wanted)
        grad_weight = grad_weight.defined() ? grad_weight.add_(grads.back()) : grads.back();
      row += h.size(0);
    }
    state->log_normals.clear();
    return {grad_hidden, grad_weight, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_embedding(const torch::Tensor& tokens, const torch::Tensor& weight,
                                       const VocabShard& shard, const TensorParallel& group,
                                       bool sequence_parallel) {
  const LocalTargets local = local_targets(tokens, shard);
  const torch::Tensor mine =
      F::embedding(local.rows, weight) * local.held.unsqueeze(-1).to(weight.scalar_type());
  return sequence_parallel ? scatter_sequence(mine, group) : out_of_region(mine, group);
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, const VocabShard& shard,
                                           int64_t chunks, const TensorParallel& group) {
  auto state = c10::make_intrusive<HeadState>();
  state->group = group;
  state->shard = shard;
  state->chunks = std::max<int64_t>(1, chunks);
  state->autocast = AutocastSnapshot::capture(hidden.device().type());
  return VocabParallelCrossEntropy::apply(hidden, weight, targets, state);
}

}  // namespace rematlab
