// `plan`: measure the chain's costs on this device (as `profile`), then choose the fastest
// segment list whose predicted activation peak fits --budget, and say what the uniform policies
// would have done at the same budget.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/profile_flags.h"
#include "cli/run_options.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "plan/frontier.h"
#include "plan/segment_planner.h"

namespace rematlab::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

nlohmann::json prediction_json(const plan::PlanPrediction& prediction, int64_t tokens) {
  return {{"predicted_peak_bytes", prediction.peak_bytes},
          {"predicted_step_ms", prediction.step_ms},
          {"predicted_recompute_ms", prediction.recompute_ms},
          {"predicted_tokens_per_s", static_cast<double>(tokens) / (prediction.step_ms / 1e3)}};
}

// The uniform policies predicted from `costs`: their JSON, and a table row each in `rows`.
nlohmann::json uniform_policies(const ChainCosts& costs, const RunConfig& config,
                                std::vector<std::vector<std::string>>& rows) {
  nlohmann::json uniform = nlohmann::json::array();
  for (const auto& [policy, p] : plan::predict_uniform_policies(costs, config.model.layers)) {
    nlohmann::json entry = prediction_json(p, config.tokens_per_step());
    entry["policy"] = policy;
    uniform.push_back(entry);
    rows.push_back({policy, format_bytes(p.peak_bytes), format_number(p.step_ms, 1)});
  }
  return uniform;
}

// The fastest plan under each budget: its JSON, a table row each in `rows`, and the longest any
// took to plan in `planning_ms`.
nlohmann::json plan_each(const ChainCosts& costs, const std::vector<int64_t>& budgets,
                         int64_t tokens, std::vector<std::vector<std::string>>& rows,
                         double& planning_ms) {
  nlohmann::json rungs = nlohmann::json::array();
  for (const int64_t each : budgets) {
    const auto start = Clock::now();
    const auto planned = plan::plan_under_budget(costs, each);
    planning_ms = std::max(planning_ms, ms_since(start));
    nlohmann::json rung = {{"budget_bytes", each}};
    if (planned) {
      rung["plan"] = planned->plan.canonical();
      rung["segments"] = planned->plan.describe();
      rung.update(prediction_json(planned->prediction, tokens));
      rows.push_back({format_bytes(each), planned->plan.canonical(),
                      format_bytes(planned->prediction.peak_bytes),
                      format_number(planned->prediction.step_ms, 1),
                      format_number(planned->prediction.recompute_ms, 1)});
    } else {
      const int64_t smallest = plan::smallest_feasible_budget(costs);
      rung["plan"] = nullptr;
      rung["smallest_feasible_bytes"] = smallest;
      rows.push_back({format_bytes(each),
                      "none fits; the smallest budget one fits is " + format_bytes(smallest), "",
                      "", ""});
    }
    rungs.push_back(rung);
  }
  return rungs;
}

}  // namespace

Command add_plan_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand(
      "plan",
      "Measure each sublayer on this device, then print the fastest checkpoint plan whose "
      "activation peak (above the model states) fits --budget, or a ladder of budgets");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command,
                  "Activation memory the plan must fit, above the model states "
                  "(bytes, KiB, MiB, GiB)");
  auto flags = std::make_shared<ProfileFlags>();
  flags->add_to(*command);
  auto ladder = std::make_shared<int>(0);
  command->add_option("--ladder", *ladder,
                      "Instead of --budget: plans at N budgets from the smallest any plan fits "
                      "to none's peak (one profile)");
  return {command, [options, flags, ladder, &cancel]() {
            const RunConfig config = options->resolve();
            const int64_t budget = config.budget_bytes;
            if ((budget > 0) == (*ladder > 0)) {
              throw InvalidInput("--budget",
                                 "give the activation memory to plan for (e.g. "
                                 "--budget 200MiB) or --ladder N, one of the two");
            }
            if (*ladder == 1 || *ladder > 100) {
              throw InvalidInput("--ladder", "must be between 2 and 100 budgets");
            }
            const KnownChainCosts known = flags->costs_for(config, cancel);
            const ChainCosts& costs = known.costs;
            const int64_t tokens = config.tokens_per_step();

            nlohmann::json result = {{"profile_ms", known.profile_ms},
                                     {"profile_source", known.source},
                                     {"memory_slots", plan::kDefaultMemorySlots}};
            std::vector<std::vector<std::string>> uniform_rows;
            result["uniform"] = uniform_policies(costs, config, uniform_rows);

            std::vector<int64_t> budgets = {budget};
            if (*ladder > 0) {
              budgets = plan::ladder_budgets(costs, *ladder);
              result["smallest_feasible_bytes"] = budgets.front();
            }
            std::vector<std::vector<std::string>> plan_rows;
            double planning_ms = 0.0;
            const nlohmann::json rungs = plan_each(costs, budgets, tokens, plan_rows, planning_ms);
            result["planning_ms"] = planning_ms;
            if (*ladder > 0) {
              result["ladder"] = rungs;
            } else {
              result.update(rungs[0]);
            }
            std::cout << format_table(
                             {"budget", "plan", "predicted peak", "step ms", "recompute ms"},
                             plan_rows)
                      << "\nplanned in at most " << format_number(planning_ms, 1) << " ms each ("
                      << plan::kDefaultMemorySlots << " memory slots per budget)\n\n"
                      << "uniform policies, predicted from the same profile:\n"
                      << format_table({"policy", "predicted peak", "step ms"}, uniform_rows);
            if (options->json) print_json_line(result);
            return 0;
          }};
}

}  // namespace rematlab::cli
