// `sweep --spec FILE.json`: every combination of the spec's axes, recorded under one experiment;
// with `max_batch`, the article's table (max batch under a budget per strategy).
#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/store_output.h"
#include "common/errors.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "sweep/default_study.h"
#include "sweep/sweep_runner.h"

namespace rematlab::cli {

Command add_sweep_command(CLI::App& app, const std::atomic<bool>& cancel) {
  struct Options {
    std::string spec;
    bool default_study = false;
    std::string db = default_database_path();
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  auto* command = app.add_subcommand("sweep", "Run every combination of a sweep spec's axes");
  auto* spec_option = command->add_option("--spec", options->spec, "Sweep spec (JSON)");
  auto* study_option =
      command->add_flag("--default-study", options->default_study,
                        "The default study: the article's table at max batch under 384 MiB");
  spec_option->excludes(study_option);
  command->add_option("--db", options->db, "Runs database")->capture_default_str();
  command->add_flag("--json", options->json, "Print one JSON object as the last line of stdout");
  return {command, [options, &cancel]() {
            if (options->spec.empty() && !options->default_study) {
              throw InvalidInput("--spec", "give a sweep spec file (or --default-study)");
            }
            // Every error before anything runs.
            SweepSpec spec = options->default_study ? parse_sweep_spec(default_study_spec())
                                                    : load_sweep_spec(options->spec);
            RunStore store(options->db);
            if (store.recovered_runs() > 0) {
              std::cerr << store.recovered_runs()
                        << " run(s) left running by a process that ended are "
                        << "now marked interrupted" << std::endl;
            }
            RunWriter writer(options->db);
            SweepRunner runner(std::move(spec), &writer, &store);
            for (const std::string& skipped : runner.skipped()) {
              std::cerr << "skipped: " << skipped << std::endl;
            }
            SweepCallbacks callbacks;
            callbacks.cancel = &cancel;
            callbacks.on_progress = print_sweep_progress;
            const std::vector<SweepRunResult> results = runner.run(callbacks);
            writer.flush();

            std::cout << "Experiment " << runner.experiment_id().value_or(0) << " in "
                      << options->db << ": " << results.size() << " of " << runner.points().size()
                      << " runs\n\n"
                      << format_strategy_table(results);
            if (results.size() < runner.points().size() ||
                (!results.empty() && results.back().summary.status == RunStatus::kCancelled)) {
              std::cout << "(stopped: cancelled at run " << results.size() << " of "
                        << runner.points().size() << ")\n";
            }
            if (options->json) {
              print_json_line({{"experiment_id", runner.experiment_id().value_or(0)},
                               {"runs", strategy_rows_json(results)}});
            }
            return 0;
          }};
}

}  // namespace rematlab::cli
