// The seams a Trainer offers to data parallelism (core/parallel/data_parallel.h). The Trainer owns
// the model and the lifecycle of a step; an exchange decides which rows of each global batch this
// process trains, communicates gradients while backward runs, and may take over the optimizer
// step (sharded optimizer states). A Trainer without one trains alone, exactly as before.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <vector>

#include "collective/expert_parallel_group.h"
#include "model/parameter_units.h"
#include "model/tensor_parallel_layout.h"
#include "run/step_metrics.h"

namespace rematlab::parallel {

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;

  // Tensor parallelism: the group the model's split layers use (null: none), and, once the
  // Trainer split the model (before attach), what it split.
  virtual TensorParallel tensor_parallel() const { return nullptr; }
  virtual void use_layout(TensorParallelLayout /*layout*/) {}

  // Expert parallelism: the group the model's experts are split over (null: none), and, once the
  // Trainer split them (before attach), the parameters this rank holds unlike the group's others.
  virtual ExpertParallel expert_parallel() const { return nullptr; }
  virtual void use_experts(std::vector<torch::Tensor> /*held*/) {}

  // Fully sharded parameters: given the model's units (TransformerImpl::parameter_units) before
  // attach, what the model must call to have them whole while it runs; null when every rank
  // keeps every parameter whole.
  virtual std::shared_ptr<ParameterUnits> shard_parameters(
      const std::vector<std::vector<torch::Tensor>>& /*units*/) {
    return nullptr;
  }

  // Once, after the model is built: every process must start from the same parameters, and the
  // gradient hooks are registered here. `params` outlive the exchange's use of them.
  virtual void attach(const std::vector<torch::Tensor>& params) = 0;

  // The processes that train one global batch of world_size() × batch rows; this one trains rows
  // [rank() × batch, (rank() + 1) × batch).
  virtual int64_t world_size() const = 0;
  virtual int64_t rank() const = 0;

  // True when `local` is true in any process. Every process must take the same decision at the
  // same point (a cancel, a skipped fp16 step), or the others would wait for it forever.
  virtual bool any_rank(bool local) = 0;
  // The mean over processes (the step's loss).
  virtual double mean(double local) = 0;
  // Element by element, the largest over every process of the run (a plan's measured costs).
  virtual std::vector<double> max_over_ranks(const std::vector<double>& local) = 0;

  // Around each micro-batch's backward; gradients are communicated only for the step's last
  // micro-batch (`last`). after_backward returns once they are averaged over processes.
  virtual void before_backward(bool last) = 0;
  virtual void after_backward(bool last) = 0;

  // The optimizer step: clips to `max_norm` (infinite: no clipping) and updates. Returns the
  // gradient norm, or nothing when the Trainer should step `optimizer` itself (every process
  // then holds the same averaged gradients and applies the same update).
  virtual std::optional<double> step(torch::optim::Optimizer& optimizer, double max_norm) = 0;

  // The step's communication figures (comm_ms, comm_wait_ms), once per step.
  virtual void report(StepMetrics& metrics) = 0;
};

}  // namespace rematlab::parallel
