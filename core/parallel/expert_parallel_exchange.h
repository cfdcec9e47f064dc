// Expert parallelism over E data ranks: every rank trains its own rows, as data parallelism
// does, and holds every parameter but the experts', of which it holds the E-th share
// (collective/expert_parallel_group.h); the ranks [g·E, (g+1)·E) together hold every expert
// once. A token's rows go to the rank of its expert and come back, so an expert's gradient sums
// what the whole group's rows gave it.
//
// After backward the replicated parameters are averaged over every data rank, as data
// parallelism averages them; an expert's gradient, already the sum over its group's E ranks, is
// averaged over the ranks holding the same expert (one per group) and divided by E, which makes
// it the same mean over every data rank's rows. The gradient norm counts the replicated
// parameters once and every expert once. Model states are not sharded (run_config refuses it).
#pragma once

#include <memory>
#include <unordered_set>
#include <vector>

#include "collective/expert_parallel_group.h"
#include "parallel/data_parallel.h"
#include "parallel/dist_context.h"
#include "parallel/gradient_exchange.h"

namespace rematlab::parallel {

class ExpertParallelExchange final : public GradientExchange {
 public:
  // `world` holds every rank of the run (all of them data ranks); its size must be a multiple of
  // `expert_ranks`.
  ExpertParallelExchange(const std::shared_ptr<DistContext>& world, int expert_ranks,
                         DataParallelOptions data_options);

  ExpertParallel expert_parallel() const override { return experts_; }
  void use_experts(std::vector<torch::Tensor> held) override;
  void attach(const std::vector<torch::Tensor>& params) override;
  int64_t world_size() const override { return replicated_->world_size(); }
  int64_t rank() const override { return replicated_->rank(); }
  bool any_rank(bool local) override { return replicated_->any_rank(local); }
  double mean(double local) override { return replicated_->mean(local); }
  std::vector<double> max_over_ranks(const std::vector<double>& local) override {
    return replicated_->max_over_ranks(local);
  }
  void before_backward(bool last) override;
  void after_backward(bool last) override;
  std::optional<double> step(torch::optim::Optimizer& optimizer, double max_norm) override;
  void report(StepMetrics& metrics) override;

  const ModelStateBytes& model_state_bytes() const { return state_bytes_; }
  int64_t buffer_peak_bytes() const;

 private:
  std::shared_ptr<DistContext> group_context_;  // this rank's expert group
  ExpertParallel experts_;
  std::shared_ptr<DataParallel> replicated_;  // every data rank: the replicated parameters
  // The ranks holding the same experts (one per group); null when there is one group.
  std::shared_ptr<DataParallel> expert_replicas_;
  std::unordered_set<const void*> held_;  // use_experts()'s tensors
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> replicated_params_;
  std::vector<torch::Tensor> expert_params_;
  torch::optim::Optimizer* optimizer_ = nullptr;
  ModelStateBytes state_bytes_;
};

}  // namespace rematlab::parallel
