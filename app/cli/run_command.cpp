#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "cli/run_options.h"
#include "common/byte_size.h"
#include "store/peak_flops_registry.h"
#include "store/run_store.h"
#include "store/run_writer.h"
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
            << "process RSS peak " << format_bytes(summary.rss_peak_bytes) << "\n"
            << "MFU / HFU        " << format_number(100.0 * summary.mfu, 1) << " % / "
            << format_number(100.0 * summary.hfu, 1) << " % of "
            << format_number(summary.peak_flops / 1e9, 1) << " GFLOP/s ("
            << summary.peak_flops_source << ")\n";
}

}  // namespace

Command add_run_command(CLI::App& app, const std::atomic<bool>& cancel) {
  auto* command = app.add_subcommand("run", "Train a model and measure memory, time and loss");
  auto options = std::make_shared<RunOptions>();
  options->add_to(*command);
  auto db = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  command->add_option("--db", *db, "Record the run (and every step) in this runs database");
  command->add_option("--name", *name, "The run's name in the database (default: its policy)");
  return {command, [options, db, name, &cancel]() {
            RunConfig config = options->resolve();
            // The trainer first: everything it sets up (the model, an offload directory) can still
            // fail as bad input before a database is created or written.
            Trainer trainer(config);
            std::unique_ptr<RunStore> store;
            if (!db->empty()) store = std::make_unique<RunStore>(*db);  // creates or migrates it
            // Before training: the peak kept for this device, or one measured now while it is
            // quiet.
            resolve_peak_flops(config, store.get());
            trainer.use_peak_flops(config.peak_flops, config.peak_flops_source);
            std::unique_ptr<RunWriter> writer;
            std::optional<int64_t> run_id;
            if (store) {
              writer = std::make_unique<RunWriter>(*db);
              run_id = writer->begin_run(std::nullopt, name->empty() ? describe_run(config) : *name,
                                         config);
            }
            TrainerCallbacks callbacks;
            callbacks.cancel = &cancel;
            callbacks.on_step = [&](const StepMetrics& step) {
              print_step_progress(step, "");
              if (writer) writer->add_step(*run_id, step);
            };
            RunSummary summary;
            try {
              summary = trainer.run(callbacks);
            } catch (const std::exception& error) {
              if (writer) writer->fail_run(*run_id, error.what());
              throw;
            }
            summary.run_id = run_id;
            if (writer) writer->finish_run(*run_id, summary);
            if (options->json) {
              print_json_line(to_json(summary));
            } else {
              print_summary(summary);
            }
            return 0;  // an oom, cancelled or diverged run is a result, not a failure
          }};
}

}  // namespace rematlab::cli
