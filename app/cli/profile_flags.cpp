#include "cli/profile_flags.h"

#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "common/errors.h"
#include "store/profile_registry.h"
#include "store/run_store.h"

namespace rematlab::cli {

void ProfileFlags::add_to(CLI::App& command) {
  command.add_option("--repeats", repeats, "Timed runs of each sublayer (median)")
      ->capture_default_str();
  command.add_option("--db", db,
                     "Keep the measured costs in this runs database, and reuse those it kept for "
                     "the same configuration on this host");
  command.add_flag("--reprofile", reprofile,
                   "With --db: measure again and replace what the database kept");
}

KnownChainCosts ProfileFlags::costs_for(const RunConfig& config,
                                        const std::atomic<bool>& cancel) const {
  if (repeats < 1 || repeats > 1000) throw InvalidInput("--repeats", "must be between 1 and 1000");
  if (reprofile && db.empty()) throw InvalidInput("--reprofile", "needs --db");
  std::unique_ptr<RunStore> store;
  if (!db.empty()) store = std::make_unique<RunStore>(db);
  plan::ProfileOptions options;
  options.repeats = repeats;
  options.cancel = &cancel;
  options.on_progress = [](int64_t done, int64_t of) {
    std::cerr << "\rprofiling sublayer " << done << "/" << of << std::flush;
  };
  const KnownChainCosts known = known_chain_costs(config, store.get(), options, reprofile);
  std::cerr << "\r" << known.costs.stages.size() << " sublayers profiled in "
            << format_number(known.profile_ms / 1e3, 1) << " s; " << known.source << std::endl;
  return known;
}

}  // namespace rematlab::cli
