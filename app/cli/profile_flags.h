// What `plan` and `profile` share: how many repeats each median takes, and the runs database
// that keeps measured chain costs for the next time (store/profile_registry.h).
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <string>

#include "run/chain_costs.h"
#include "run/run_config.h"

namespace rematlab::cli {

struct ProfileFlags {
  int repeats = 5;
  std::string db;
  bool reprofile = false;

  void add_to(CLI::App& command);
  // The chain's costs for `config`: kept in --db, or measured now (progress on stderr) and kept
  // there. Throws InvalidInput for a bad --repeats, plan::ProfileCancelled when `cancel` is set
  // while it measures.
  KnownChainCosts costs_for(const RunConfig& config, const std::atomic<bool>& cancel) const;
};

}  // namespace rematlab::cli
