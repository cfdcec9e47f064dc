// `profile`: the chain's costs on this device, sublayer by sublayer, as the planner sees them.
#include <iostream>
#include <memory>

#include "checkpoint/checkpoint_policy.h"
#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/run_options.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "plan/chain_profile.h"

namespace rematlab::cli {
Command add_profile_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "profile",
      "Measure each sublayer's forward and backward time and memory on this device (what "
      "`plan` chooses from)");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  auto repeats = std::make_shared<int>(5);
  command->add_option("--repeats", *repeats, "Timed runs of each sublayer (median)")
      ->capture_default_str();
  return {
      command, [options, repeats]() {
        RunConfig config = options->resolve();
        if (*repeats < 1 || *repeats > 1000) {
          throw InvalidInput("--repeats", "must be between 1 and 1000");
        }
        plan::ProfileOptions profile_options;
        profile_options.repeats = *repeats;
        const plan::ChainCosts costs = plan::profile_chain(config, profile_options);
        std::vector<std::vector<std::string>> rows;
        nlohmann::json stages = nlohmann::json::array();
        for (std::size_t i = 0; i < costs.stages.size(); ++i) {
          const plan::StageCost& stage = costs.stages[i];
          rows.push_back({sublayer_name(static_cast<int64_t>(i)),
                          format_number(stage.forward_ms, 2), format_number(stage.backward_ms, 2),
                          format_bytes(stage.kept_bytes), format_bytes(stage.output_bytes),
                          format_bytes(stage.forward_transient_bytes),
                          format_bytes(stage.backward_transient_bytes)});
          stages.push_back({{"name", sublayer_name(static_cast<int64_t>(i))},
                            {"forward_ms", stage.forward_ms},
                            {"backward_ms", stage.backward_ms},
                            {"kept_bytes", stage.kept_bytes},
                            {"output_bytes", stage.output_bytes},
                            {"forward_transient_bytes", stage.forward_transient_bytes},
                            {"backward_transient_bytes", stage.backward_transient_bytes}});
        }
        std::cout << format_table({"sublayer", "forward ms", "backward ms", "kept", "output",
                                   "forward transient", "backward transient"},
                                  rows)
                  << "chain input " << format_bytes(costs.input_bytes) << ", head and loss "
                  << format_bytes(costs.head_peak_bytes) << ", embedding backward "
                  << format_bytes(costs.embedding_backward_peak_bytes)
                  << "; fixed per step (embedding, head, optimizer) "
                  << format_number(costs.fixed_ms, 1) << " ms\n";
        if (options->json) {
          print_json_line({{"stages", stages},
                           {"input_bytes", costs.input_bytes},
                           {"head_peak_bytes", costs.head_peak_bytes},
                           {"embedding_backward_peak_bytes", costs.embedding_backward_peak_bytes},
                           {"fixed_ms", costs.fixed_ms}});
        }
        return 0;
      }};
}

}  // namespace rematlab::cli
