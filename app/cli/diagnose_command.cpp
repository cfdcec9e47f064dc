// `diagnose ID`: the advisor's findings for one run of the database (core/advise). Opens the
// database read-only; the replays it trains write nothing but a disk-offload run's offload files,
// into a private temporary folder removed after (never the run's own folder).
#include <iostream>
#include <memory>

#include "advise/advisor.h"
#include "cli/cli_output.h"
#include "cli/commands.h"

namespace rematlab::cli {

Command add_diagnose_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand(
      "diagnose",
      "Findings for one run: non-finite loss (replayed to the first sublayer), memory not "
      "reduced, throughput dropped, parameters without gradient");
  auto db = std::make_shared<std::string>(default_database_path());
  auto id = std::make_shared<int64_t>(0);
  auto json = std::make_shared<bool>(false);
  auto no_replay = std::make_shared<bool>(false);
  command->add_option("ID", *id, "Run id")->required();
  command->add_option("--db", *db, "Runs database")->capture_default_str();
  command->add_flag("--json", *json, "Print one JSON object as the last line of stdout");
  command->add_flag("--no-replay", *no_replay,
                    "Judge from the records only: train nothing again (no sublayer is named for "
                    "a divergence, no missing gradients are looked for)");
  return {command, [db, id, json, no_replay, &cancel]() {
            RunStore store(*db, StoreAccess::kReadOnly, /*create=*/false);
            advise::AdviseOptions options;
            options.replay = !*no_replay;
            options.cancel = &cancel;
            const advise::Diagnosis diagnosis = advise::diagnose_run(store, *id, options);
            if (*json) {
              print_json_line(advise::to_json(diagnosis));
            } else {
              std::cout << advise::format_diagnosis(diagnosis);
            }
            return 0;
          }};
}

}  // namespace rematlab::cli
