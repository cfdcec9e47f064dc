// rematlab-cli's subcommands. Each registers itself and its flags on the CLI11 app and returns
// the callback that runs it; the callback returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <atomic>
#include <functional>
#include <vector>

namespace rematlab::cli {

// `check`: the gradients under the policy differ from those under none (scripts can rely on it).
inline constexpr int kExitGradientsDiffer = 3;

struct Command {
  CLI::App* subcommand = nullptr;
  std::function<int()> run;
};

Command add_run_command(CLI::App& app, const std::atomic<bool>& cancel);
Command add_check_command(CLI::App& app, const std::atomic<bool>& cancel);
Command add_study_command(CLI::App& app, const std::atomic<bool>& cancel);
Command add_version_command(CLI::App& app);
Command add_sweep_command(CLI::App& app, const std::atomic<bool>& cancel);
Command add_max_batch_command(CLI::App& app, const std::atomic<bool>& cancel);
// runs, show, compare, export
std::vector<Command> add_report_commands(CLI::App& app);
Command add_estimate_command(CLI::App& app);
Command add_layout_command(CLI::App& app, const std::atomic<bool>& cancel);
Command add_peak_command(CLI::App& app);
Command add_upgrade_command(CLI::App& app);
Command add_profile_command(CLI::App& app, const std::atomic<bool>& cancel);
Command add_plan_command(CLI::App& app, const std::atomic<bool>& cancel);
Command add_diagnose_command(CLI::App& app, const std::atomic<bool>& cancel);

}  // namespace rematlab::cli
