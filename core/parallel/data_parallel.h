// Data parallelism on c10d: parameters broadcast from rank 0, gradients averaged over ranks in
// buckets sent asynchronously from hooks on the parameters' gradient accumulators as backward
// (and recomputation) produces them, and optionally the optimizer state (ZeRO-1) or the optimizer
// state and the gradients (ZeRO-2) partitioned across ranks.
//
// Each bucket is one flat buffer and the parameters' .grad are views into it, so a bucket is
// sent without a copy. A bucket is sent once every one of its parameters' accumulators has run
// in the step's last micro-batch (in gradients mode, in every backward: each is reduced into
// the shards, and the whole buffers let go), and buckets are sent in the same order on every
// rank (a collective must be issued in the same order everywhere). A gradient that arrives for a
// bucket already sent (a parameter accumulated twice) is kept aside and sent after the step's
// last backward, so the result stays exact. Sharded: the model's parameters are views into flat
// per-bucket buffers too; rank r owns shard r of each bucket, keeps AdamW state only for it,
// updates it, and every bucket is then all-gathered.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "parallel/bucket_layout.h"
#include "parallel/comm_timer.h"
#include "parallel/data_exchange.h"
#include "parallel/dist_context.h"
#include "parallel/shard_update.h"
#include "run/shard_mode.h"

namespace rematlab::parallel {

inline constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;

struct DataParallelOptions {
  ShardMode shard = ShardMode::kNone;
  int64_t bucket_bytes = kDefaultBucketBytes;
  // Gradients mode reduces each backward's gradients into the shards as it forms them (a round
  // each), so none stay whole while the step's micro-batches accumulate. A round ends with every
  // bucket reduced, so that ranks whose experts got no tokens still issue the same collectives;
  // or, with this set, only those that got a gradient in it (a pipeline stage's: an interleaved
  // stage's backward reaches one chunk's buckets, the same on every data rank of the stage).
  bool rounds_skip_untouched = false;
  // Parameters of different groups never share a bucket (null: one group). A pipeline stage's
  // model chunks are groups, so that no bucket goes out in two chunks' backwards; its tied head is
  // one alone, so that its shards cover the same elements on the first and the last stage, which
  // add them. Asked once per parameter at attach.
  std::function<int64_t(const torch::Tensor&)> bucket_group = nullptr;
};

class DataParallel final : public DataExchange {
 public:
  DataParallel(std::shared_ptr<DistContext> context, DataParallelOptions options);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

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
  const std::vector<BucketLayout>& shard_layouts() const override;
  std::vector<torch::Tensor> gradient_shards() override;
  void count_squares_with(ShardSquares squares) override;
  int64_t buffer_peak_bytes() const override;

  const std::vector<BucketLayout>& buckets() const;
  // Gradients that arrived for a bucket already sent, over the run (tests).
  int64_t late_gradients() const;
  DistContext& context() { return *context_; }

 private:
  struct Engine;  // what the gradient hooks reach, through a weak pointer
  void hook_accumulators(const std::vector<torch::Tensor>& params);
  // After a sharded update: every rank's updated shard into everyone's flat parameters.
  void gather_updated_parameters();
  std::shared_ptr<DistContext> context_;
  DataParallelOptions options_;
  std::shared_ptr<Engine> engine_;
  ShardUpdate shard_update_;  // sharded modes
  torch::optim::Optimizer* last_optimizer_ = nullptr;
  ModelStateBytes state_bytes_;
};

}  // namespace rematlab::parallel
