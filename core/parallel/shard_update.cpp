#include "parallel/shard_update.h"

#include <cmath>
#include <stdexcept>

#include "update/parameter_update.h"

namespace rematlab::parallel {

int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& entry : optimizer.state()) {
    const auto* state = dynamic_cast<const torch::optim::AdamWParamState*>(entry.second.get());
    if (!state) continue;
    for (const torch::Tensor& tensor :
         {state->exp_avg(), state->exp_avg_sq(), state->max_exp_avg_sq()}) {
      if (tensor.defined()) bytes += static_cast<int64_t>(tensor.nbytes());
    }
  }
  return bytes;
}

double sum_of_squares(const std::vector<torch::Tensor>& tensors) {
  double squares = 0.0;
  for (const torch::Tensor& tensor : tensors) {
    const double norm = tensor.norm().item<double>();
    squares += norm * norm;
  }
  return squares;
}

std::vector<torch::Tensor> shard_views(const std::vector<torch::Tensor>& shards,
                                       const std::vector<ShardPiece>& pieces) {
  std::vector<torch::Tensor> views;
  for (const ShardPiece& piece : pieces) {
    views.push_back(shards[piece.bucket].narrow(0, piece.offset, piece.count));
  }
  return views;
}

double ShardUpdate::step(DistContext& context, const std::vector<torch::Tensor>& shards,
                         torch::optim::Optimizer& model_optimizer, double max_norm,
                         CommTimer& timer) {
  torch::NoGradGuard no_grad;
  if (!optimizer_) {
    auto* adamw = dynamic_cast<torch::optim::AdamW*>(&model_optimizer);
    if (!adamw) throw std::logic_error("sharded optimizer states need AdamW");
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        shards, static_cast<const torch::optim::AdamWOptions&>(adamw->defaults()));
  }
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& shard : shards) grads.push_back(shard.grad());
  const double local_squares = squares_ ? squares_(grads) : sum_of_squares(grads);
  const double total = std::sqrt(timer.blocking([&] { return context.sum(local_squares); }));
  clip_to_norm(shards, max_norm, total);
  optimizer_->step();
  return total;
}

int64_t ShardUpdate::state_bytes() const {
  return optimizer_ ? optimizer_state_bytes(*optimizer_) : 0;
}

}  // namespace rematlab::parallel
