// The runs database, read: `runs`, `show ID`, `compare ID…`, `export --csv FILE`.
#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/store_output.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "store/csv_export.h"
#include "store/run_comparison.h"
#include "store/run_store.h"

namespace rematlab::cli {
namespace {

struct ReportOptions {
  std::string db = kDefaultDatabase;
  bool json = false;
};

void add_common(CLI::App& command, ReportOptions& options) {
  command.add_option("--db", options.db, "Runs database")->capture_default_str();
  command.add_flag("--json", options.json, "Print one JSON object as the last line of stdout");
}

nlohmann::json run_json(const RunRecord& run) {
  return {{"id", run.id},           {"experiment_id", run.experiment_id ? nlohmann::json(*run.experiment_id) : nlohmann::json()},
          {"experiment", run.experiment}, {"name", run.name},
          {"status", run.status},   {"message", run.message},
          {"started", run.started}, {"ended", run.ended},
          {"device", run.device},   {"host", run.host},
          {"libtorch", run.libtorch}, {"steps_recorded", run.steps_recorded},
          {"config", run.config},   {"summary", run.summary}};
}

}  // namespace

std::vector<Command> add_report_commands(CLI::App& app) {
  std::vector<Command> commands;

  {
    auto options = std::make_shared<ReportOptions>();
    auto experiment = std::make_shared<std::optional<int64_t>>();
    auto status = std::make_shared<std::string>();
    auto* command = app.add_subcommand("runs", "List the runs in the database");
    add_common(*command, *options);
    command->add_option("--experiment", *experiment, "Only this experiment's runs");
    command->add_option("--status", *status, "Only runs with this status");
    commands.push_back({command, [options, experiment, status]() {
      RunStore store(options->db, /*create=*/false);
      RunFilter filter;
      filter.experiment_id = *experiment;
      filter.status = *status;
      const auto runs = store.runs(filter);
      if (options->json) {
        nlohmann::json list = nlohmann::json::array();
        for (const RunRecord& run : runs) list.push_back(run_json(run));
        print_json_line({{"runs", list}});
      } else {
        std::cout << format_runs_table(runs);
      }
      return 0;
    }});
  }

  {
    auto options = std::make_shared<ReportOptions>();
    auto id = std::make_shared<int64_t>(0);
    auto* command = app.add_subcommand("show", "One run: its config, summary and probes");
    add_common(*command, *options);
    command->add_option("ID", *id, "Run id")->required();
    commands.push_back({command, [options, id]() {
      RunStore store(options->db, /*create=*/false);
      const RunRecord run = store.run(*id);
      const auto probes = store.probes(*id);
      nlohmann::json json = run_json(run);
      nlohmann::json trials = nlohmann::json::array();
      for (const ProbeRecord& p : probes) {
        trials.push_back({{"batch", p.batch}, {"status", p.status}, {"peak_bytes", p.peak_bytes}});
      }
      json["trials"] = trials;
      if (options->json) {
        print_json_line(json);
      } else {
        std::cout << json.dump(2) << "\n";
      }
      return 0;
    }});
  }

  {
    auto options = std::make_shared<ReportOptions>();
    auto ids = std::make_shared<std::vector<int64_t>>();
    auto* command = app.add_subcommand(
        "compare", "Runs side by side: config differences and every metric against the first");
    add_common(*command, *options);
    command->add_option("IDS", *ids, "Run ids; the first is the reference")->required();
    commands.push_back({command, [options, ids]() {
      RunStore store(options->db, /*create=*/false);
      std::vector<RunRecord> runs;
      for (int64_t id : *ids) runs.push_back(store.run(id));
      const auto rows = compare_runs(runs);
      if (options->json) {
        nlohmann::json list = nlohmann::json::array();
        for (const ComparisonRow& row : rows) {
          nlohmann::json ratios = nlohmann::json::array();
          for (const auto& ratio : row.ratio) ratios.push_back(ratio ? nlohmann::json(*ratio) : nlohmann::json());
          list.push_back({{"field", row.field}, {"metric", row.metric}, {"values", row.values},
                          {"ratio", ratios}});
        }
        print_json_line({{"runs", *ids}, {"rows", list}});
      } else {
        std::cout << format_comparison(runs, rows);
      }
      return 0;
    }});
  }

  {
    auto options = std::make_shared<ReportOptions>();
    auto csv = std::make_shared<std::string>();
    auto ids = std::make_shared<std::vector<int64_t>>();
    auto experiment = std::make_shared<std::optional<int64_t>>();
    auto steps = std::make_shared<bool>(false);
    auto* command = app.add_subcommand("export", "Write runs (or their steps) as CSV");
    add_common(*command, *options);
    command->add_option("--csv", *csv, "Output file")->required();
    auto* runs_option = command->add_option("--runs", *ids, "Only these run ids");
    command->add_option("--experiment", *experiment, "Only this experiment's runs")
        ->excludes(runs_option);
    command->add_flag("--steps", *steps, "One row per step of the chosen runs (every step)");
    commands.push_back({command, [options, csv, ids, experiment, steps]() {
      RunStore store(options->db, /*create=*/false);
      RunFilter filter;
      filter.ids = *ids;
      filter.experiment_id = *experiment;
      for (int64_t id : *ids) store.run(id);  // an unknown id is an error, not an empty row
      const auto runs = store.runs(filter);
      write_file_atomically(*csv, *steps ? steps_csv(store, runs) : runs_csv(runs));
      std::cerr << "wrote " << runs.size() << " run(s)" << (*steps ? "' steps" : "") << " to "
                << *csv << std::endl;
      if (options->json) print_json_line({{"csv", *csv}, {"runs", runs.size()}});
      return 0;
    }});
  }
  return commands;
}

}  // namespace rematlab::cli
