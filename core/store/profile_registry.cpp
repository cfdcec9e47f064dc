#include "store/profile_registry.h"

#include <chrono>
#include <memory>

#include "checkpoint/checkpoint_policy.h"
#include "common/json_text.h"
#include "common/utc_time.h"
#include "plan/chain_costs_json.h"
#include "plan/profile_key.h"

namespace rematlab {

std::optional<KnownChainCosts> kept_chain_costs(const RunConfig& config, RunStore& store,
                                                int repeats) {
  const std::string key = plan::profile_key(config, repeats);
  const auto kept = store.chain_profile(key);
  if (!kept) return std::nullopt;
  try {
    KnownChainCosts known;
    known.key = key;
    known.costs = plan::chain_costs_from_json(parse_json(kept->costs));
    // Two stages a block: a row of another shape was not written by a profile of this key.
    if (static_cast<int64_t>(known.costs.stages.size()) == 2 * config.model.layers &&
        kept->profile_ms >= 0.0 && kept->profile_ms < 1e9) {
      known.profile_ms = kept->profile_ms;
      known.source = "runs database: measured " + kept->measured;
      return known;
    }
  } catch (const std::exception&) {
    // A row this build cannot read, or with figures no measurement gives (chain_costs_json.h):
    // to be measured again, and replaced.
  }
  return std::nullopt;
}

void keep_chain_costs(RunStore* store, KnownChainCosts& known) {
  const std::string measured = utc_now();
  if (store && !store->read_only()) {
    try {
      store->save_chain_profile(known.key,
                                {plan::to_json(known.costs).dump(), known.profile_ms, measured});
      known.source = "runs database: measured " + measured + " (kept now)";
    } catch (const std::exception& error) {
      // The run needs no kept profile: it goes on, and the next one measures again.
      known.source = "measured " + measured + " (not kept: " + error.what() + ")";
    }
  } else {
    known.source =
        "measured " + measured +
        (store ? " (not kept: the database is open read-only)" : " (not kept: no database)");
  }
}

KnownChainCosts known_chain_costs(const RunConfig& config, RunStore* store,
                                  const plan::ProfileOptions& options, bool fresh) {
  if (store && !fresh) {
    if (auto kept = kept_chain_costs(config, *store, options.repeats)) return *kept;
  }
  KnownChainCosts known;
  known.key = plan::profile_key(config, options.repeats);
  const auto start = std::chrono::steady_clock::now();
  known.costs = plan::profile_chain(config, options);
  known.profile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  keep_chain_costs(store, known);
  return known;
}

void resolve_chain_costs(RunConfig& config, RunStore* store, const std::atomic<bool>* cancel) {
  if (!CheckpointPolicy::parse(config.checkpoint).is_plan()) return;
  plan::ProfileOptions options;
  options.cancel = cancel;
  config.known_chain_costs =
      std::make_shared<const KnownChainCosts>(known_chain_costs(config, store, options));
}

}  // namespace rematlab
