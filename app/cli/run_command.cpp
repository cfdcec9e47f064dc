#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/run_options.h"
#include "common/byte_size.h"
#include "train/trainer.h"

namespace rematlab::cli {
namespace {

void print_summary(const RunSummary& summary) {
  std::cout << "status           " << to_string(summary.status)
            << (summary.message.empty() ? "" : " (" + summary.message + ")") << "\n"
            << "params           " << summary.params << "\n"
            << "loss             " << format_number(summary.first_loss, 4) << " -> "
            << format_number(summary.final_loss, 4) << "\n"
            << "tokens/s         " << format_number(summary.tokens_per_s, 0) << "\n"
            << "step             " << format_number(summary.step_ms, 1) << " ms (forward "
            << format_number(summary.forward_ms, 1) << ", backward "
            << format_number(summary.backward_ms, 1) << ")\n"
            << "peak             " << format_bytes(summary.peak_bytes) << "\n"
            << "baseline         " << format_bytes(summary.baseline_bytes) << "\n"
            << "peak activation  " << format_bytes(summary.peak_activation_bytes) << "\n"
            << "process RSS peak " << format_bytes(summary.rss_peak_bytes) << "\n";
}

}  // namespace

Command add_run_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand("run", "Train a model and measure memory, time and loss");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  return {command, [options, &cancel]() {
    Trainer trainer(options->resolve());
    TrainerCallbacks callbacks;
    callbacks.cancel = &cancel;
    callbacks.on_step = [](const StepMetrics& step) { print_step_progress(step, ""); };
    const RunSummary summary = trainer.run(callbacks);
    if (options->json) {
      print_json_line(to_json(summary));
    } else {
      print_summary(summary);
    }
    return 0;  // an oom, cancelled or diverged run is a result, not a failure
  }};
}

}  // namespace rematlab::cli
