// Chain profiles kept in the runs database: a `plan:` run, `rematlab-cli plan` and `profile`
// measure a configuration's chain once and reuse the costs when the same configuration comes
// again (plan/profile_key.h: same host, LibTorch, device, numerics, threads, model, batch and
// repeats). Profiling takes seconds to minutes; a sweep of plan budgets, or a ladder rerun, then
// pays it once. A kept profile is as old as its date: `--reprofile` measures it again.
#pragma once

#include <atomic>
#include <optional>

#include "plan/chain_profile.h"
#include "run/chain_costs.h"
#include "run/run_config.h"
#include "store/run_store.h"

namespace rematlab {

// The costs kept in `store` (may be null) for `config` at options.repeats, unless `fresh`; else
// measured now and kept when the store is writable (replacing a kept one).
KnownChainCosts known_chain_costs(const RunConfig& config, RunStore* store,
                                  const plan::ProfileOptions& options = {}, bool fresh = false);

// The costs kept in `store` for `config` at `repeats`, when it has readable ones.
std::optional<KnownChainCosts> kept_chain_costs(const RunConfig& config, RunStore& store,
                                                int repeats);
// Keeps `known` (measured just now) in `store` when it is writable, and says in its source
// whether it was kept (a write that fails is said there too, not thrown).
void keep_chain_costs(RunStore* store, KnownChainCosts& known);

// For a `plan:` config: sets config.known_chain_costs, so that the trainer plans without
// profiling when the database kept its costs. Nothing for any other policy. A profile is
// stopped by `cancel` (plan::ProfileCancelled), and nothing is kept.
void resolve_chain_costs(RunConfig& config, RunStore* store,
                         const std::atomic<bool>* cancel = nullptr);

}  // namespace rematlab
