// Bringing a fresh Trainer to the state its run had before a given step: same weights,
// optimizer moments, data position and dropout stream, because it takes the same steps.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "train/trainer.h"

namespace rematlab {

// A stored run's configuration as a replay trains it here: the same numerics (policy, offload
// mode, seed, data), without a timeline or a budget, and a disk offload goes to a private
// folder of the system's temporary directory, removed after, never into the run's own folder.
RunConfig replay_config(const RunConfig& run);

// The trainer was stopped (`cancel`) before it reached the step.
struct ReplayCancelled {};

// Trains steps [0, `step`) of `trainer`'s run as run() would (its config's step count, so a
// `schedule` policy sees the same progress) and stops before step `step`, which is then the
// next one its data and generators give. Returns the losses of the steps taken. Throws
// ReplayCancelled when `cancel` is set; a run that ends earlier (divergence, budget) returns
// fewer losses than `step`.
std::vector<double> replay_until(Trainer& trainer, int64_t step,
                                 const std::atomic<bool>* cancel = nullptr);

}  // namespace rematlab
