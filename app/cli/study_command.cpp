// `study`: the strategy table for a list of policies on one model, batch and seed, each row
// against the first. A sweep with one axis (checkpoint, where POLICY+OFFLOAD adds an offload), so
// it validates, runs and compares exactly as `sweep` does; recorded when --db is given.
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/run_options.h"
#include "cli/store_output.h"
#include "common/errors.h"
#include "store/run_store.h"
#include "store/run_writer.h"
#include "sweep/sweep_runner.h"

namespace rematlab::cli {
namespace {

nlohmann::ordered_json study_spec(const RunConfig& base, const std::string& policies) {
  nlohmann::ordered_json axis = nlohmann::ordered_json::array();
  std::stringstream stream(policies);
  std::string policy;
  while (std::getline(stream, policy, ';')) {
    if (!policy.empty()) axis.push_back(policy);
  }
  if (axis.empty()) throw InvalidInput("--policies", "no policy given");
  const nlohmann::json config = to_json(base);
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  for (const auto& item : config.items()) fields[item.key()] = item.value();
  return {{"name", "study"}, {"base", fields}, {"axes", {{"checkpoint", axis}}}};
}

}  // namespace

Command add_study_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand(
      "study", "The strategy table: peak memory and throughput per checkpoint policy");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  auto policies =
      std::make_shared<std::string>("none;every:1;every:1+disk;every:2;sublayer:1,2;selective");
  auto db = std::make_shared<std::string>();
  command
      ->add_option("--policies", *policies,
                   "Policies to compare, separated by ';'; POLICY+OFFLOAD adds offload")
      ->capture_default_str();
  command->add_option("--db", *db, "Record the runs in this runs database");
  return {command, [options, policies, db, &cancel]() {
            const RunConfig base = options->resolve();
            // Every combination is checked here, before anything runs.
            SweepSpec spec = parse_sweep_spec(study_spec(base, *policies));
            std::unique_ptr<RunStore> store;
            std::unique_ptr<RunWriter> writer;
            if (!db->empty()) {
              store = std::make_unique<RunStore>(*db);
              writer = std::make_unique<RunWriter>(*db);
            }
            SweepRunner runner(std::move(spec), writer.get(), store.get());
            SweepCallbacks callbacks;
            callbacks.cancel = &cancel;
            callbacks.on_progress = print_sweep_progress;
            const std::vector<SweepRunResult> results = runner.run(callbacks);
            if (results.empty()) {
              std::cerr << "study cancelled before its first run finished" << std::endl;
              return 0;
            }
            std::cout << "Model " << base.preset << " (" << base.model.layers << " blocks, d "
                      << base.model.d_model << ", seq " << base.model.seq_len << "), batch "
                      << base.batch << ", " << base.steps << " steps, " << to_string(base.precision)
                      << ", " << base.device << "\n\n"
                      << format_strategy_table(results);
            if (options->json) print_json_line({{"rows", strategy_rows_json(results)}});
            return 0;
          }};
}

}  // namespace rematlab::cli
