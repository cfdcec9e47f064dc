// `profile`: the chain's costs on this device, sublayer by sublayer, as the planner sees them.
#include <iostream>
#include <memory>

#include "checkpoint/checkpoint_policy.h"
#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/profile_flags.h"
#include "cli/run_options.h"
#include "common/byte_size.h"
#include "plan/chain_costs_json.h"

namespace rematlab::cli {

Command add_profile_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand(
      "profile",
      "Measure each sublayer's forward and backward time and memory on this device (what "
      "`plan` chooses from)");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  auto flags = std::make_shared<ProfileFlags>();
  flags->add_to(*command);
  return {command, [options, flags, &cancel]() {
            const RunConfig config = options->resolve();
            const KnownChainCosts known = flags->costs_for(config, cancel);
            const ChainCosts& costs = known.costs;
            std::vector<std::vector<std::string>> rows;
            for (std::size_t i = 0; i < costs.stages.size(); ++i) {
              const StageCost& stage = costs.stages[i];
              rows.push_back(
                  {sublayer_name(static_cast<int64_t>(i)), format_number(stage.forward_ms, 2),
                   format_number(stage.early_stop_saving_ms, 2),
                   format_number(stage.backward_ms, 2), format_bytes(stage.kept_bytes),
                   format_bytes(stage.output_bytes), format_bytes(stage.forward_transient_bytes),
                   format_bytes(stage.backward_transient_bytes)});
            }
            std::cout << format_table({"sublayer", "forward ms", "early stop saves", "backward ms",
                                       "kept", "output", "forward transient", "backward transient"},
                                      rows)
                      << "chain input " << format_bytes(costs.input_bytes) << ", head and loss "
                      << format_bytes(costs.head_peak_bytes) << ", embedding backward "
                      << format_bytes(costs.embedding_backward_peak_bytes)
                      << "; fixed per step (embedding, head, optimizer) "
                      << format_number(costs.fixed_ms, 1) << " ms\n"
                      << "times scaled by " << format_number(costs.time_scale, 3)
                      << " to a whole forward and backward under none, measured\n";
            if (options->json) {
              nlohmann::json result = plan::to_json(costs);
              result["profile_ms"] = known.profile_ms;
              result["profile_source"] = known.source;
              print_json_line(result);
            }
            return 0;
          }};
}

}  // namespace rematlab::cli
