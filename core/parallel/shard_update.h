// The update of sharded model states (ZeRO): each rank keeps AdamW's moments for its shards of
// the parameters only and updates those shards; the gradient norm for clipping is summed over
// every rank's shards, then the shards' gradients are clipped as clip_grad_norm_ clips.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "parallel/bucket_layout.h"
#include "parallel/comm_timer.h"
#include "parallel/dist_context.h"

namespace rematlab::parallel {

// Bytes of model states this rank holds between steps (unique storages).
struct ModelStateBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t optimizer = 0;
};

// AdamW moments held by `optimizer`, in bytes.
int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer);

// The sum of the tensors' squared norms, each computed in its own dtype and added in double.
double sum_of_squares(const std::vector<torch::Tensor>& tensors);

// The elements `pieces` name in this rank's `shards` (one tensor per bucket), as views.
std::vector<torch::Tensor> shard_views(const std::vector<torch::Tensor>& shards,
                                       const std::vector<ShardPiece>& pieces);

// This rank's contribution to the squared gradient norm, summed over the data ranks, from its
// shards' gradients. By default every element counts; under tensor parallelism
// (TensorParallelExchange) elements every tensor rank holds alike count once.
using ShardSquares = std::function<double(const std::vector<torch::Tensor>& shard_grads)>;

class ShardUpdate {
 public:
  void count_squares_with(ShardSquares squares) { squares_ = std::move(squares); }
  // Steps this rank's `shards`, whose .grad must hold their averaged gradients, with the
  // hyperparameters of `model_optimizer` (AdamW); the norm's sum over ranks is timed as waited
  // on `timer`. Returns the global gradient norm.
  double step(DistContext& context, const std::vector<torch::Tensor>& shards,
              torch::optim::Optimizer& model_optimizer, double max_norm, CommTimer& timer);
  // The moments held here (0 before the first step).
  int64_t state_bytes() const;

 private:
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  ShardSquares squares_;
};

}  // namespace rematlab::parallel
