// `sweep --spec FILE.json`: every combination of the spec's axes, recorded under one experiment;
// with `max_batch`, the article's table (max batch under a budget per strategy). `--workers N`
// spreads the points over N processes here, and under torchrun or Slurm every rank is a worker
// (cli/sweep_distributed.h).
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/store_output.h"
#include "cli/sweep_distributed.h"
#include "common/errors.h"
#include "parallel/dist_context.h"
#include "parallel/dist_env.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "sweep/default_study.h"
#include "sweep/sweep_runner.h"

namespace rematlab::cli {
namespace {

// What the spec's config.json files do not model, said once: not by every rank that read it,
// nor again by the workers `--workers` starts (the parent said it).
void say_spec_warnings(const SweepSpec& spec, const parallel::DistEnv& env) {
  if (env.rank != 0 || env.launcher == "rematlab") return;
  for (const std::string& warning : spec.warnings) std::cerr << "warning: " << warning << "\n";
}

}  // namespace

Command add_sweep_command(CLI::App& app, const std::atomic<bool>& cancel) {
  struct Options {
    std::string spec;
    bool default_study = false;
    std::string db = default_database_path();
    bool json = false;
    std::optional<int> workers;
    std::optional<double> timeout_s;
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
  command->add_option("--workers", options->workers,
                      "Spread the points over N worker processes on this host, each with its "
                      "share of the cores (docs/distributed.md)");
  command->add_option("--dist-timeout", options->timeout_s,
                      "With workers: seconds a worker may stay silent before its point is failed "
                      "(default 120)");
  return {
      command, [options, &cancel]() {
        if (options->spec.empty() && !options->default_study) {
          throw InvalidInput("--spec", "give a sweep spec file (or --default-study)");
        }
        if (options->workers &&
            (*options->workers < 1 || *options->workers > std::min(max_threads(), 1024))) {
          throw InvalidInput("--workers", "must be between 1 and " +
                                              std::to_string(std::min(max_threads(), 1024)));
        }
        if (options->timeout_s && !(*options->timeout_s >= 1.0 && *options->timeout_s <= 86400.0)) {
          throw InvalidInput("--dist-timeout", "must be between 1 and 86400 seconds");
        }
        // Every error before anything runs.
        SweepSpec spec = options->default_study ? parse_sweep_spec(default_study_spec())
                                                : load_sweep_spec(options->spec);
        const parallel::DistEnv env = parallel::dist_env_from_process();
        say_spec_warnings(spec, env);
        SweepRunOptions spread{options->db, options->json, parallel::kDefaultTimeout};
        if (options->timeout_s) {
          spread.timeout =
              std::chrono::milliseconds(static_cast<int64_t>(*options->timeout_s * 1000.0));
        }
        if (env.distributed() || env.launcher == "rematlab") {
          if (options->workers) {
            throw InvalidInput(
                "--workers", "this process is already worker " + std::to_string(env.rank) + " of " +
                                 std::to_string(env.world_size) + " (started by " + env.launcher +
                                 "); leave starting workers to the launcher");
          }
          return sweep_as_worker(spec, env, spread, cancel);
        }
        if (options->workers) {
          return sweep_with_local_workers(spec, *options->workers, spread, cancel);
        }
        RunStore store(options->db);
        if (store.recovered_runs() > 0) {
          std::cerr << store.recovered_runs() << " run(s) left running by a process that ended are "
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
        print_sweep_outcome(options->db, runner.experiment_id(), results, runner.points().size(),
                            options->json);
        return 0;
      }};
}

}  // namespace rematlab::cli
