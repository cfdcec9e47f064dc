#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "common/errors.h"
#include "runtime/runtime_info.h"

namespace rematlab::cli {

Command add_version_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "version", "LibTorch version, the BLAS it really uses, thread counts and devices");
  auto json = std::make_shared<bool>(false);
  auto threads = std::make_shared<int>(0);
  command->add_flag("--json", *json, "Print one JSON object");
  command->add_option("--threads", *threads, "Set the intra-op thread count first");
  return {command, [json, threads]() {
            if (*threads < 0) throw InvalidInput("--threads", "must not be negative");
            set_intra_op_threads(*threads);
            const RuntimeInfo info = probe_runtime(/*measure_matmul=*/true);
            std::cout << "rematlab-cli " << REMATLAB_VERSION << "\n";
            if (*json) {
              print_json_line(to_json(info));
            } else {
              std::cout << to_text(info);
            }
            return 0;
          }};
}

}  // namespace rematlab::cli
