// Tensor parallelism over T ranks, with data parallelism over the groups of them: rank r holds
// part r mod T of every split layer, and the ranks with the same part (r mod T) train different
// rows of each global batch, averaging their gradients as data parallelism does. So ranks
// [g·T, (g+1)·T) together hold one whole model (Megatron's order: a layer's collectives go to
// its neighbours). After backward the rows whose gradients each tensor rank formed only part of
// are summed over the tensor group; the gradient norm counts every split parameter's parts once
// and every replicated parameter once.
#pragma once

#include <memory>
#include <unordered_set>

#include "collective/tensor_parallel_group.h"
#include "model/tensor_parallel_layout.h"
#include "parallel/data_parallel.h"
#include "parallel/dist_context.h"
#include "parallel/gradient_exchange.h"

namespace rematlab::parallel {

class TensorParallelExchange final : public GradientExchange {
 public:
  // `world` holds every rank of the run; its size must be a multiple of `tensor_ranks`.
  TensorParallelExchange(const std::shared_ptr<DistContext>& world, int tensor_ranks,
                         DataParallelOptions data_options);

  TensorParallel tensor_parallel() const override { return tensor_; }
  void use_layout(TensorParallelLayout layout) override;
  void attach(const std::vector<torch::Tensor>& params) override;
  // The data-parallel degree and this rank's place in it: which rows it trains.
  int64_t world_size() const override;
  int64_t rank() const override;
  bool any_rank(bool local) override;
  double mean(double local) override;
  void before_backward(bool last) override;
  void after_backward(bool last) override;
  std::optional<double> step(torch::optim::Optimizer& optimizer, double max_norm) override;
  void report(StepMetrics& metrics) override;

  const ModelStateBytes& model_state_bytes() const { return data_->model_state_bytes(); }

 private:
  std::shared_ptr<DistContext> world_;
  TensorParallel tensor_;
  std::shared_ptr<DataParallel> data_;
  TensorParallelLayout layout_;
  std::unordered_set<const void*> split_;  // layout_.split's tensors, to tell them in a step
  std::vector<torch::Tensor> params_;
};

}  // namespace rematlab::parallel
