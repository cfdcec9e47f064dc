#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/run_options.h"
#include "train/gradient_check.h"

namespace rematlab::cli {

Command add_check_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "check", "Compare one step's gradients under --checkpoint against none (same seed, batch)");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  return {command, [options]() {
    RunConfig config = options->resolve();
    const GradientCheckResult result = check_gradients(config);
    std::cerr << (result.identical ? "identical: " : "DIFFERENT: ") << config.checkpoint
              << " against none, " << result.params_compared << " parameters compared"
              << std::endl;
    if (options->json) {
      print_json_line(to_json(result));
    } else {
      std::cout << to_json(result).dump(2) << std::endl;
    }
    return 0;
  }};
}

}  // namespace rematlab::cli
