// Measures the chain's costs on this device for one run configuration (model, batch, precision,
// threads): each sublayer's forward and backward time, what it keeps for backward, its output
// and its transient peaks; the head, the embedding and the optimizer as fixed costs. Times are
// medians over repeats; bytes are the allocator's own counts (MemoryTracker).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/errors.h"
#include "run/chain_costs.h"
#include "run/run_config.h"

namespace rematlab {
class TensorParallelGroup;  // collective/tensor_parallel_group.h; no LibTorch here (the window)
}

namespace rematlab::plan {

struct ProfileOptions {
  int repeats = 5;  // timed runs of each piece (after one untimed)
  // Called after each measured stage with (done, of): the profile of a large model takes a while.
  std::function<void(int64_t, int64_t)> on_progress;
  // Read between pieces (a Stop in the window): when set, profile_chain throws ProfileCancelled.
  const std::atomic<bool>* cancel = nullptr;
  // Under tensor parallelism (config.tp > 1, required then): the group this rank's part of the
  // model runs its collectives on. Every rank of it profiles at once: the pieces' collectives
  // meet, and their time is in the pieces'.
  std::shared_ptr<TensorParallelGroup> tensor_parallel;
};

struct ProfileCancelled : Interrupted {
  ProfileCancelled() : Interrupted("stopped while profiling; nothing was recorded or kept") {}
};

// How a run or sweep point stopped while its plan's chain was profiled is recorded.
inline constexpr const char* kStoppedWhileProfiling =
    "stopped by the user while its chain was profiled for the plan";

// Throws InvalidInput for a configuration a run would refuse. The config's checkpoint policy and
// budget are ignored: the chain is measured as it runs without them. Times are per optimizer step
// (config.accum micro-batches); bytes per micro-batch (accumulation does not add to the peak).
ChainCosts profile_chain(const RunConfig& config, const ProfileOptions& options = {});

}  // namespace rematlab::plan
