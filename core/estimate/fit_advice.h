// The least costly way to make one training step fit a device: checkpoint policies tried in the
// order of what they cost in recomputation (none, the attention core, whole blocks at the
// interval with the lowest peak, then the loss in slices and offloaded segment inputs), first on
// the ranks asked for, then sharding model states over more ranks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "estimate/architecture.h"
#include "estimate/model_state.h"

namespace rematlab::estimate {

struct FitAdvice {
  std::string checkpoint;   // a policy `run --checkpoint` takes
  int64_t loss_chunks = 1;  // slices of the head and loss (`run --loss-chunks`)
  bool offload = false;     // `run --offload disk`
  int64_t world_size = 1;   // `run --nproc`
  std::string shard = "none";
  int64_t needed_bytes = 0;  // model states per rank + activation peak
};

struct FitQuestion {
  Architecture arch;
  int64_t batch = 1;
  Precision precision = Precision::kFp32;
  Optimizer optimizer = Optimizer::kAdamW;
  int64_t params = 0;  // model states are counted from this many parameters
  int64_t world_size = 1;
  std::string shard = "none";
  int64_t max_world_size = 64;  // the most ranks advice may suggest
};

// The first step of the ladder that fits `memory_bytes`, or nothing when even every:K with
// slices and offload on max_world_size ranks with sharded gradients does not.
std::optional<FitAdvice> advise_fit(const FitQuestion& question, int64_t memory_bytes);

}  // namespace rematlab::estimate
