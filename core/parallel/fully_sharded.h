// Fully sharded data parallelism (ZeRO-3, as FSDP does it): every rank keeps 1/D of each
// parameter, gradient and optimizer state. The model's parameters fall into units
// (model/parameter_units.h); a unit's parameters are views into one flat buffer, padded to a
// multiple of D, whose memory exists only while the unit is whole:
//   - forward: gathered from every rank's shard before the unit runs (the next unit's gather is
//     launched before it computes), freed after;
//   - backward: gathered again before the unit's backward (the previous unit's gather is
//     launched once a unit's gradients are complete, the last unit's when backward begins; a
//     hook on the unit's output waits for it);
//   - recomputation: a checkpointed segment gathers its units again to run them, freeing each
//     after it ran except the last, whose backward comes next (so a recomputed segment of n
//     units costs n - 1 gathers more than its backward alone).
// Unit 0 (embeddings, final norm, head) stays whole from the start of forward until its
// gradients are complete at the end of backward: the head ends forward and begins backward.
// Once every parameter of a unit has its gradient, the unit's gradients are summed over ranks
// into this rank's shard (a reduce-scatter; on Gloo an all-reduce, as in DataParallel), which
// overlaps the next unit's backward until that one's first gradient, and the whole gradients
// are freed: besides unit 0 a rank holds at most two sublayer units' worth whole. That happens
// every micro-batch, so no rank ever holds the whole model's gradients. The update is ZeRO's:
// AdamW on this rank's shards (ShardUpdate).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <vector>

#include "parallel/bucket_layout.h"
#include "parallel/data_exchange.h"
#include "parallel/dist_context.h"
#include "parallel/shard_update.h"

namespace rematlab::parallel {

// All-gathers of parameter units in one step, by what asked for them.
struct ParameterGathers {
  int64_t forward = 0;
  int64_t backward = 0;
  int64_t recompute = 0;  // the gathers recomputation added
  int64_t total() const { return forward + backward + recompute; }
};

class FullyShardedParameters final : public DataExchange {
 public:
  explicit FullyShardedParameters(std::shared_ptr<DistContext> context);
  ~FullyShardedParameters() override;
  FullyShardedParameters(const FullyShardedParameters&) = delete;
  FullyShardedParameters& operator=(const FullyShardedParameters&) = delete;

  std::shared_ptr<ParameterUnits> shard_parameters(
      const std::vector<std::vector<torch::Tensor>>& units) override;
  void attach(const std::vector<torch::Tensor>& params) override;
  int64_t world_size() const override;
  int64_t rank() const override;
  bool any_rank(bool local) override;
  double mean(double local) override;
  std::vector<double> max_over_ranks(const std::vector<double>& local) override;
  void before_backward(bool last) override;
  void after_backward(bool last) override;
  std::optional<double> step(torch::optim::Optimizer& optimizer, double max_norm) override;
  void report(StepMetrics& metrics) override;

  const ModelStateBytes& model_state_bytes() const override { return state_bytes_; }
  const std::vector<BucketLayout>& shard_layouts() const override { return units(); }
  std::vector<torch::Tensor> gradient_shards() override;
  void count_squares_with(ShardSquares squares) override;
  int64_t buffer_peak_bytes() const override;
  // The last reported step's gathers.
  const ParameterGathers& gathers() const { return last_gathers_; }
  // Each unit's layout; unit i's slots index attach()'s parameters.
  const std::vector<BucketLayout>& units() const;
  // Every parameter whole, as new tensors in attach()'s order. A collective: every rank calls it.
  std::vector<torch::Tensor> whole_parameters();

 private:
  struct Engine;  // what the model and the gradient hooks reach, through weak pointers
  class Units;    // the model's handle on the engine (ParameterUnits)
  std::shared_ptr<DistContext> context_;
  std::shared_ptr<Engine> engine_;
  ShardUpdate update_;
  ModelStateBytes state_bytes_;
  ParameterGathers last_gathers_;
};

}  // namespace rematlab::parallel
