// What a chain profile (plan/chain_profile.h) depends on, as one line of JSON: the host and
// LibTorch that measure it, the device, precision and numerics switches, the threads, the model,
// micro-batch and accumulation, and the repeats each median takes. Configs with one key profile
// alike, so costs kept under it are reused instead of measured again; what only the training
// changes (steps, learning rate, seed, the checkpoint policy itself) is left out.
#pragma once

#include <string>

#include "train/run_config.h"

namespace rematlab::plan {

std::string profile_key(const RunConfig& config, int repeats);

}  // namespace rematlab::plan
