// Tensor parallelism over T ranks, with data parallelism over the groups of them: rank r holds
// part r mod T of every split layer, and the ranks with the same part (r mod T) train different
// rows of each global batch, averaging their gradients as data parallelism does. So ranks
// [g·T, (g+1)·T) together hold one whole model (Megatron's order: a layer's collectives go to
// its neighbours). After backward the rows whose gradients each tensor rank formed only part of
// are summed over the tensor group; the gradient norm counts every split parameter's parts once
// and every replicated parameter once. The data-parallel side may shard model states
// (--shard optimizer|gradients|parameters, over the ranks with the same part): then the sums and
// the norm work on the shards of this rank's part.
#pragma once

#include <memory>
#include <unordered_set>

#include "collective/tensor_parallel_group.h"
#include "model/tensor_parallel_layout.h"
#include "parallel/data_exchange.h"
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
  std::shared_ptr<ParameterUnits> shard_parameters(
      const std::vector<std::vector<torch::Tensor>>& units) override;
  void attach(const std::vector<torch::Tensor>& params) override;
  // The data-parallel degree and this rank's place in it: which rows it trains.
  int64_t world_size() const override;
  int64_t rank() const override;
  bool any_rank(bool local) override;
  double mean(double local) override;
  std::vector<double> max_over_ranks(const std::vector<double>& local) override;
  void before_backward(bool last) override;
  void after_backward(bool last) override;
  std::optional<double> step(torch::optim::Optimizer& optimizer, double max_norm) override;
  void report(StepMetrics& metrics) override;

  // The squared norm of the attached gradients over the tensor group, every split element once
  // and every replicated one once, `except` left out (a pipeline's tied head on its last stage).
  // Unsharded only.
  double squared_norm(const torch::Tensor& except = {});

  // Sharded over the data ranks: `param`'s gradient counts in the norm elsewhere (a pipeline's
  // tied head, which its first stage counts), not here. Before attach.
  void count_elsewhere(const torch::Tensor& param) { counted_elsewhere_ = param; }
  // Sharded: this rank's part of the squared norm from its gradient shards, summed over the
  // tensor ranks (every split element once, every replicated one once); the data ranks add
  // theirs up (as the data exchange counts it unless told otherwise: PipelineExchange adds the
  // stages' too).
  double sharded_squares(const std::vector<torch::Tensor>& shard_grads) const;

  const ModelStateBytes& model_state_bytes() const { return data_->model_state_bytes(); }
  int64_t buffer_peak_bytes() const { return data_->buffer_peak_bytes(); }
  // The exchange over the ranks holding this rank's tensor part.
  DataExchange& data() { return *data_; }

 private:
  // Elements of attach()'s parameters: those every tensor rank holds alike (replicated
  // parameters, and rows of split ones every rank keeps whole), and the rows whose gradients
  // each rank formed only part of.
  std::vector<ElementRange> replicated_elements() const;
  std::vector<ElementRange> split_elements() const;
  std::size_t index_of(const torch::Tensor& param) const;  // in attach()'s order
  std::vector<ElementRange> partial_elements() const;
  // The squared norm from this rank's squares of split and of replicated elements.
  double squares_over_ranks(double split, double replicated) const;
  void sum_partial_rows();
  void sum_partial_shards();
  // A pipeline stage holds part of the model: the layout's parameters another stage holds (the
  // ones released, without gradient) go.
  void keep_layout_of_attached();

  std::shared_ptr<DistContext> world_;
  TensorParallel tensor_;
  std::shared_ptr<DataExchange> data_;
  TensorParallelLayout layout_;
  std::unordered_set<const void*> split_;  // layout_.split's tensors, to tell them in a step
  std::vector<torch::Tensor> params_;
  torch::Tensor counted_elsewhere_;         // undefined: every attached parameter counts here
  std::vector<ElementRange> split_ranges_;  // split_elements(), from attach()
  std::vector<ElementRange> replicated_ranges_;
  // Sharded data side: where the ranges above and partial_elements() lie in this rank's
  // shards.
  std::vector<ShardPiece> replicated_pieces_;
  std::vector<ShardPiece> split_pieces_;
  std::vector<ShardPiece> partial_pieces_;
};

}  // namespace rematlab::parallel
