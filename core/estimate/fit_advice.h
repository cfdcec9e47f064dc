// The least costly way to make one training step fit a device: checkpoint policies (none, the
// attention core, whole blocks at the interval with the lowest peak), each with the loss whole or
// in slices, tried in the order of the FLOPs they recompute, then disk offload on top; first on
// the ranks asked for, then sharding model states over more ranks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "estimate/architecture.h"
#include "estimate/model_state.h"
#include "estimate/tensor_layout.h"

namespace rematlab::estimate {

struct FitAdvice {
  std::string checkpoint;   // a policy `run --checkpoint` takes
  int64_t loss_chunks = 1;  // slices of the head and loss (`run --loss-chunks`)
  bool offload = false;     // `run --offload disk`
  int64_t world_size = 1;   // `run --nproc`
  std::string shard = "none";
  int64_t expert_ranks = 1;  // `run --ep`
  int64_t needed_bytes = 0;  // model states per rank + activation peak
};

// The most ranks advice suggests unless a question says otherwise.
inline constexpr int64_t kAdviceMaxRanks = 64;

struct FitQuestion {
  Architecture arch;
  int64_t batch = 1;
  Precision precision = Precision::kFp32;
  Optimizer optimizer = Optimizer::kAdamW;
  int64_t params = 0;   // model states are counted from this many parameters (one tensor rank's)
  TensorLayout layout;  // kept: more ranks are more data ranks of this tensor-parallel degree
  int64_t world_size = 1;
  std::string shard = "none";
  // Expert parallelism (`run --ep`): kept, and on more ranks split over as many of them as
  // divide the experts; it shards nothing, as `run` trains it.
  int64_t expert_ranks = 1;
  int64_t max_world_size = kAdviceMaxRanks;
  int64_t best_interval = 0;  // the every:K with the lowest peak, when known (0: found here)
};

// The first rung that fits `memory_bytes`, or nothing when even every:K with slices and offload
// on max_world_size ranks with sharded gradients does not.
std::optional<FitAdvice> advise_fit(const FitQuestion& question, int64_t memory_bytes);

}  // namespace rematlab::estimate
