// What a chain profile (plan/chain_profile.h) depends on, as one line of JSON: the host and
// LibTorch that measure it, the device, precision and numerics switches, the threads, the model,
// micro-batch and accumulation, and the repeats each median takes. Configs with one key profile
// alike, so costs kept under it are reused instead of measured again; what only the training
// changes (steps, learning rate, seed, the checkpoint policy itself) is left out.
#pragma once

#include <optional>
#include <string>

#include "run/run_config.h"

namespace rematlab::plan {

// Whether a run measures (or brings) its chain's costs: for plan:BUDGET, and for --pp-split
// balanced.
bool needs_chain_costs(const RunConfig& config);

// The key of `config` profiled here (this host, this LibTorch).
std::string profile_key(const RunConfig& config, int repeats);
// The key `config` had when it ran on `host` with LibTorch `libtorch`: a recorded run is of the
// profiled configuration when its key is the profile's.
std::string profile_key(const RunConfig& config, int repeats, const std::string& host,
                        const std::string& libtorch);

// A key read back: the configuration (its training-only fields at their defaults) and where it
// was measured. Nothing for a key this build does not write (another profiling method, or not a
// key at all): its costs are never reused, so they are not offered either. Nor for a key whose
// config holds settings this build cannot read (a newer RematLab's, or a hand edit): their
// defaults would pass for the configuration measured. That refusal is said in `refused` (when
// given), naming the settings.
struct ProfiledConfiguration {
  RunConfig config;
  int repeats = 0;
  std::string host;
  std::string libtorch;
};
std::optional<ProfiledConfiguration> read_profile_key(const std::string& key,
                                                      std::string* refused = nullptr);

}  // namespace rematlab::plan
