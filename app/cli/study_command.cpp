// The default study: the article's strategy table measured on this machine. One run per
// strategy with the same model, batch and seed; each row against the baseline row.
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/run_options.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "train/trainer.h"

namespace rematlab::cli {
namespace {

struct Strategy {
  std::string name;
  std::string checkpoint;
  std::string offload;
};

std::vector<Strategy> parse_strategies(const std::string& list) {
  std::vector<Strategy> strategies;
  std::stringstream stream(list);
  std::string policy;
  while (std::getline(stream, policy, ';')) {
    if (policy.empty()) continue;
    // POLICY or POLICY+OFFLOAD, e.g. every:1+disk (validated with the rest of each run's config).
    const auto plus = policy.find('+');
    Strategy strategy;
    strategy.checkpoint = policy.substr(0, plus);
    strategy.offload = plus == std::string::npos ? "none" : policy.substr(plus + 1);
    strategy.name = strategy.checkpoint == "none" ? "Baseline" : "Checkpoint " + strategy.checkpoint;
    if (strategy.offload != "none") strategy.name += " + " + strategy.offload + " offload";
    strategies.push_back(strategy);
  }
  if (strategies.empty()) throw InvalidInput("--policies", "no policy given");
  return strategies;
}

}  // namespace

Command add_study_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand(
      "study", "The strategy table: peak memory and throughput per checkpoint policy");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  auto policies =
      std::make_shared<std::string>("none;every:1;every:1+disk;every:2;sublayer:1,2;selective");
  command->add_option("--policies", *policies,
                      "Policies to compare, separated by ';'; POLICY+OFFLOAD adds offload")
      ->capture_default_str();
  return {command, [options, policies, &cancel]() {
    const RunConfig base = options->resolve();
    const auto strategies = parse_strategies(*policies);
    std::vector<RunConfig> configs;
    for (const Strategy& strategy : strategies) {  // every combination checked before any runs
      RunConfig config = base;
      config.checkpoint = strategy.checkpoint;
      config.offload = strategy.offload;
      validate(config);
      configs.push_back(config);
    }
    std::vector<RunSummary> results;
    for (std::size_t i = 0; i < configs.size() && !cancel.load(); ++i) {
      const std::string label = "[" + std::to_string(i + 1) + "/" + std::to_string(configs.size()) +
                                " " + strategies[i].name + "] ";
      Trainer trainer(configs[i]);
      TrainerCallbacks callbacks;
      callbacks.cancel = &cancel;
      callbacks.on_step = [&label](const StepMetrics& step) { print_step_progress(step, label); };
      results.push_back(trainer.run(callbacks));
    }

    if (results.empty()) {
      std::cerr << "study cancelled before its first run finished" << std::endl;
      return 0;
    }
    nlohmann::json rows_json = nlohmann::json::array();
    std::vector<std::vector<std::string>> rows;
    const RunSummary& baseline = results.front();
    for (std::size_t i = 0; i < results.size(); ++i) {
      const RunSummary& r = results[i];
      rows.push_back({strategies[i].name, to_string(r.status), std::to_string(r.config.batch),
                      format_bytes(r.peak_bytes), format_bytes(r.peak_activation_bytes),
                      format_bytes(r.offloaded_peak_bytes),
                      format_percent_change(static_cast<double>(r.peak_activation_bytes),
                                            static_cast<double>(baseline.peak_activation_bytes)),
                      format_number(r.tokens_per_s, 0),
                      format_percent_change(r.tokens_per_s, baseline.tokens_per_s),
                      format_number(r.final_loss, 4)});
      nlohmann::json row = to_json(r);
      row["strategy"] = strategies[i].name;
      rows_json.push_back(row);
    }
    std::cout << "Model " << base.preset << " (" << base.model.layers << " blocks, d "
              << base.model.d_model << ", seq " << base.model.seq_len << "), batch " << base.batch
              << ", " << base.steps << " steps, " << to_string(base.precision) << ", "
              << base.device << "\n\n"
              << format_table({"strategy", "status", "batch", "peak", "peak act", "offloaded",
                               "act vs base", "tokens/s", "tok/s vs base", "final loss"},
                              rows);
    if (options->json) print_json_line({{"rows", rows_json}});
    return 0;
  }};
}

}  // namespace rematlab::cli
