#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/run_options.h"
#include "common/json_numbers.h"
#include "train/gradient_check.h"

namespace rematlab::cli {

Command add_check_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand(
      "check",
      "Compare one step's gradients under --checkpoint against none (same seed, batch); "
      "exit code 3 when they differ");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  auto reference_seed = std::make_shared<std::optional<uint64_t>>();
  command->add_option("--reference-seed", *reference_seed,
                      "Another seed for the none side, to see the check report DIFFERENT "
                      "(exit code 3)");
  auto at_step = std::make_shared<int64_t>(0);
  command->add_option("--at-step", *at_step,
                      "Train both sides this many steps under their own policy first and "
                      "compare the next step (default 0: the first)");
  return {command, [options, reference_seed, at_step, &cancel]() {
            RunConfig config = options->resolve();
            GradientCheckResult result;
            try {
              result = check_gradients(config, &cancel, *reference_seed, *at_step);
            } catch (const GradientCheckCancelled&) {
              std::cerr << "rematlab-cli: stopped before the check was done" << std::endl;
              return 130;
            }
            std::cerr << (result.identical ? "identical: " : "DIFFERENT: ") << config.checkpoint
                      << " against none, " << result.params_compared << " parameters compared"
                      << std::endl;
            if (options->json) {
              print_json_line(to_json(result));
            } else {
              std::cout << dump_json(to_json(result), 2) << std::endl;
            }
            return result.identical ? 0 : kExitGradientsDiffer;
          }};
}

}  // namespace rematlab::cli
