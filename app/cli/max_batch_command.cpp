// `max-batch`: the largest micro-batch whose step fits --budget, with every probe shown.
#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/run_options.h"
#include "common/byte_size.h"
#include "common/errors.h"
#include "sweep/max_batch.h"

namespace rematlab::cli {

Command add_max_batch_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command =
      app.add_subcommand("max-batch", "The largest micro-batch whose training step fits --budget");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  auto limit = std::make_shared<int64_t>(1024);
  auto probe_steps = std::make_shared<int64_t>(2);
  command->add_option("--limit", *limit, "Largest batch to try")->capture_default_str();
  command
      ->add_option("--probe-steps", *probe_steps,
                   "Training steps per probe (the second has the optimizer state)")
      ->capture_default_str();
  return {command, [options, limit, probe_steps, &cancel]() {
            const RunConfig base = options->resolve();
            const bool on_cuda = base.device.rfind("cuda", 0) == 0;
            if (base.budget_bytes <= 0 && !on_cuda) {
              throw InvalidInput(
                  "--budget", "is required on the CPU (on CUDA the device's memory is the limit)");
            }
            if (*limit <= 0) throw InvalidInput("--limit", "must be positive");
            check_probe_steps(*probe_steps, "--probe-steps");
            const MaxBatchResult result = search_max_batch(*limit, [&](int64_t batch) {
              BatchProbe probe = probe_by_training(base, batch, *probe_steps, &cancel);
              std::cerr << "batch " << batch << ": " << to_string(probe.status) << ", peak "
                        << format_bytes(probe.peak_bytes) << std::endl;
              return probe;
            });
            nlohmann::json trials = nlohmann::json::array();
            for (const BatchProbe& probe : result.probes) trials.push_back(to_json(probe));
            if (result.cancelled)
              std::cerr << "cancelled; the answer below is a lower bound" << std::endl;
            if (options->json) {
              print_json_line({{"max_batch", result.max_batch},
                               {"peak_bytes", result.peak_bytes},
                               {"budget_bytes", base.budget_bytes},
                               {"trials", trials},
                               {"cancelled", result.cancelled}});
            } else {
              std::cout << "max batch " << result.max_batch << " (peak "
                        << format_bytes(result.peak_bytes) << " of "
                        << format_bytes(base.budget_bytes) << ", " << result.probes.size()
                        << " probes)\n";
            }
            return 0;
          }};
}

}  // namespace rematlab::cli
