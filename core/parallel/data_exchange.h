// What a data-parallel exchange (DataParallel, FullyShardedParameters) offers beside the
// Trainer's seams: its model-state figures, and where its sharded gradients lie. The second is
// for TensorParallelExchange, which runs one over each set of ranks holding the same tensor part:
// it sums the rows the tensor ranks formed only parts of, and counts once in the gradient norm
// the elements every tensor rank holds alike, wherever a rank keeps only a shard of them.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel/bucket_layout.h"
#include "parallel/gradient_exchange.h"
#include "parallel/shard_update.h"

namespace rematlab::parallel {

// Bytes of buffers a data exchange holds beside the model states, now and at most.
class BufferBytes {
 public:
  void add(int64_t bytes) {
    current_ += bytes;
    peak_ = std::max(peak_, current_);
  }
  void remove(int64_t bytes) { current_ -= bytes; }
  int64_t peak() const { return peak_; }

 private:
  int64_t current_ = 0;
  int64_t peak_ = 0;
};

class DataExchange : public GradientExchange {
 public:
  // As measured after the last step's update.
  virtual const ModelStateBytes& model_state_bytes() const = 0;

  // How attach()'s parameters fall into shards over the data ranks; empty when every rank keeps
  // whole gradients and steps its own optimizer (no sharding).
  virtual const std::vector<BucketLayout>& shard_layouts() const = 0;
  // After after_backward(true) and before step(): this rank's summed gradients, one tensor per
  // layout, written in place by whoever changes them.
  virtual std::vector<torch::Tensor> gradient_shards() = 0;
  // How the sharded update counts this rank's part of the squared gradient norm.
  virtual void count_squares_with(ShardSquares squares) = 0;

  // The most bytes its communication buffers held at once over the run, beyond the model
  // states: whole units and their whole gradients (fully sharded), a bucket's whole gradients
  // from its first gradient until its reduction (gradients mode), gradients kept aside for a bucket
  // already sent, the copies of updated shards being gathered (sharded optimizer state).
  virtual int64_t buffer_peak_bytes() const = 0;
};

}  // namespace rematlab::parallel
