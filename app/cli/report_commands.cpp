// The runs database, read: `runs`, `show ID`, `compare ID…`, `export --csv FILE`. Each opens the
// database read-only: a report never creates, migrates or changes the file.
#include <algorithm>
#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/store_output.h"
#include "common/errors.h"
#include "common/json_numbers.h"
#include "common/posix_files.h"
#include "store/csv_export.h"
#include "store/run_comparison.h"
#include "store/run_store.h"

namespace rematlab::cli {
namespace {

struct ReportOptions {
  std::string db = default_database_path();
  bool json = false;

  RunStore open() const { return RunStore(db, StoreAccess::kReadOnly, /*create=*/false); }
};

void add_common(CLI::App& command, ReportOptions& options) {
  command.add_option("--db", options.db, "Runs database")->capture_default_str();
  command.add_flag("--json", options.json, "Print one JSON object as the last line of stdout");
}

nlohmann::json run_json(const RunRecord& run) {
  return {{"id", run.id},
          {"experiment_id", run.experiment_id ? nlohmann::json(*run.experiment_id) : nullptr},
          {"experiment", run.experiment},
          {"name", run.name},
          {"status", to_string(run.status)},
          {"message", run.message},
          {"started", run.started},
          {"ended", run.ended},
          {"host", run.host},
          {"libtorch", run.libtorch},
          {"steps_recorded", run.steps_recorded},
          {"config", to_json(run.config)},
          {"unread_config_fields", run.unread_config_fields},
          {"request", to_json(run.request)},
          {"result", run.has_result ? to_json(run.result) : nlohmann::json(nullptr)}};
}

Command add_runs(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  auto experiment = std::make_shared<std::optional<int64_t>>();
  auto status = std::make_shared<std::string>();
  auto* command = app.add_subcommand("runs", "List the runs in the database");
  add_common(*command, *options);
  command->add_option("--experiment", *experiment, "Only this experiment's runs");
  command->add_option("--status", *status,
                      "Only runs with this status: running, ok, oom, cancelled, diverged, failed "
                      "or interrupted");
  return {command, [options, experiment, status]() {
            RunFilter filter;
            filter.experiment_id = *experiment;
            if (!status->empty()) {
              filter.status = parse_run_status(*status);
              if (!filter.status)
                throw InvalidInput("--status", "unknown status '" + *status + "'");
            }
            RunStore store = options->open();
            const auto runs = store.runs(filter);
            if (options->json) {
              nlohmann::json list = nlohmann::json::array();
              for (const RunRecord& run : runs) list.push_back(run_json(run));
              print_json_line({{"runs", list}});
            } else {
              std::cout << format_runs_table(runs);
            }
            return 0;
          }};
}

Command add_show(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  auto id = std::make_shared<int64_t>(0);
  auto* command = app.add_subcommand("show", "One run: its config, request, result and probes");
  add_common(*command, *options);
  command->add_option("ID", *id, "Run id")->required();
  return {command, [options, id]() {
            RunStore store = options->open();
            nlohmann::json json = run_json(store.run(*id));
            nlohmann::json trials = nlohmann::json::array();
            for (const BatchProbe& probe : store.probes(*id)) trials.push_back(to_json(probe));
            json["trials"] = trials;
            if (options->json) {
              print_json_line(json);
            } else {
              std::cout << dump_json(json, 2) << "\n";
            }
            return 0;
          }};
}

Command add_compare(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  auto ids = std::make_shared<std::vector<int64_t>>();
  auto baseline = std::make_shared<std::optional<int64_t>>();
  auto* command = app.add_subcommand(
      "compare", "Runs side by side: config differences and every metric against a baseline");
  add_common(*command, *options);
  command->add_option("IDS", *ids, "Run ids")->required();
  command->add_option("--baseline", *baseline,
                      "The run the ratios are taken against (default: "
                      "the first id)");
  return {command, [options, ids, baseline]() {
            RunStore store = options->open();
            std::vector<RunRecord> runs;
            for (int64_t id : *ids) runs.push_back(store.run(id));
            std::size_t reference = 0;
            if (*baseline) {
              const auto found = std::find(ids->begin(), ids->end(), **baseline);
              if (found == ids->end()) {
                throw InvalidInput("--baseline", "run " + std::to_string(**baseline) +
                                                     " is not among the runs compared");
              }
              reference = static_cast<std::size_t>(found - ids->begin());
            }
            const RunComparison comparison = compare_runs(runs, reference);
            if (options->json) {
              print_json_line(to_json(comparison, runs));
            } else {
              std::cout << format_comparison(runs, comparison);
            }
            return 0;
          }};
}

Command add_export(CLI::App& app) {
  auto options = std::make_shared<ReportOptions>();
  auto csv = std::make_shared<std::string>();
  auto ids = std::make_shared<std::vector<int64_t>>();
  auto experiment = std::make_shared<std::optional<int64_t>>();
  auto steps = std::make_shared<bool>(false);
  auto* command = app.add_subcommand("export", "Write runs (or their steps) as CSV");
  add_common(*command, *options);
  command->add_option("--csv", *csv, "Output file (- for standard output)")->required();
  auto* runs_option = command->add_option("--runs", *ids, "Only these run ids");
  command->add_option("--experiment", *experiment, "Only this experiment's runs")
      ->excludes(runs_option);
  command->add_flag("--steps", *steps, "One row per step of the chosen runs (every step)");
  return {
      command, [options, csv, ids, experiment, steps]() {
        for (const std::string& part : {options->db, options->db + "-wal", options->db + "-shm"}) {
          if (files::same_file(*csv, part)) {
            throw InvalidInput("--csv", "'" + *csv + "' is the runs database itself ('" + part +
                                            "'); choose another file");
          }
        }
        RunStore store = options->open();
        RunFilter filter;
        filter.ids = *ids;
        filter.experiment_id = *experiment;
        for (int64_t id : *ids) store.run(id);  // an unknown id is an error, not an empty row
        if (*experiment) {
          const auto known = store.experiments();
          if (std::none_of(known.begin(), known.end(),
                           [&](const ExperimentRecord& each) { return each.id == **experiment; })) {
            throw InvalidInput("--experiment", "no experiment " + std::to_string(**experiment) +
                                                   " in '" + options->db + "'");
          }
        }
        const auto runs = store.runs(filter);
        const std::string text = *steps ? steps_csv(store, runs) : runs_csv(runs);
        if (*csv == "-") {
          std::cout << text << std::flush;
        } else {
          write_file_atomically(*csv, text);
        }
        std::cerr << "wrote " << runs.size() << " run(s)" << (*steps ? "' steps" : "") << " to "
                  << *csv << std::endl;
        if (options->json) print_json_line({{"csv", *csv}, {"runs", runs.size()}});
        return 0;
      }};
}

}  // namespace

std::vector<Command> add_report_commands(CLI::App& app) {
  return {add_runs(app), add_show(app), add_compare(app), add_export(app)};
}

}  // namespace rematlab::cli
