// rematlab-cli: the headless face of RematLab. Exit codes: 0 done (an oom or cancelled run is a
// result), 1 internal failure, 2 bad input (one line naming what is wrong), 3 `check` found
// gradients that differ from `none`, 4 a rank stopped because another failed, 130 stopped by a
// signal before there was a result (a profile, a check) or by a second signal.
#include <c10/util/Exception.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <charconv>
#include <csignal>
#include <cstddef>
#include <iostream>
#include <set>

#include "cli/commands.h"
#include "common/errors.h"
#include "runtime/host_allocator.h"

namespace {

// Ctrl-C, SIGTERM and SIGHUP ask the running command to stop between micro-batches (and between
// the pieces of a profile): the run is recorded `cancelled` with every step it completed and its
// offload files are removed. A second signal ends the process at once (exit 130): the run is then
// left `running` until the database next opens and finds its process gone (`interrupted`), and
// files it was offloading stay until a later run cleans up after it.
std::atomic<bool> g_cancel{false};

extern "C" void request_cancel(int) {
  if (g_cancel.exchange(true)) std::_Exit(130);
}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

class CancelOnStopSignals {
 public:
  CancelOnStopSignals() {
    struct sigaction action {};
    action.sa_handler = request_cancel;
    sigemptyset(&action.sa_mask);
    for (int signal : kStopSignals) ::sigaction(signal, &action, &previous_[index(signal)]);
    // A launcher starts its ranks and workers with these signals blocked, so that one sent before
    // this handler existed waited (pending) instead of killing the process: let it in now.
    sigset_t stop;
    sigemptyset(&stop);
    for (int signal : kStopSignals) sigaddset(&stop, signal);
    ::pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
  }
  ~CancelOnStopSignals() { restore(); }
  // For a command that never reads the cancel flag: a stop signal must end it as it would any
  // program, not be swallowed.
  void restore() {
    for (int signal : kStopSignals) ::sigaction(signal, &previous_[index(signal)], nullptr);
  }
  CancelOnStopSignals(const CancelOnStopSignals&) = delete;
  CancelOnStopSignals& operator=(const CancelOnStopSignals&) = delete;

 private:
  static std::size_t index(int signal) { return signal == SIGINT ? 0 : signal == SIGTERM ? 1 : 2; }
  struct sigaction previous_[3]{};
};

int fail(int code, const std::string& message) {
  std::cerr << "rematlab-cli: error: " << message << std::endl;
  return code;
}

// CLI11 reads integers with strtoll in base 0: "010" is 8, "0x10" is 16, and a number past the
// type's range saturates silently (--steps 99999999999999999999 became 2^63 - 1 and never
// ended). Every integer option is checked as a decimal whole number in range first.
CLI::Validator decimal_integer(bool allow_negative) {
  return CLI::Validator(
      [allow_negative](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range) return "'" + text + "' is out of range";
        if (error != std::errc() || stop != end) return "'" + text + "' is not a whole number";
        if (!allow_negative && value < 0) return "'" + text + "' must not be negative";
        return "";
      },
      allow_negative ? "INT" : "UINT");
}

// CLI11 reads an empty value as no value and takes "0x1p1" and " 1.5" too: every real-number
// option is checked as one decimal number (nan and inf pass here; each option's range says).
CLI::Validator decimal_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0.0;
        const char* end = text.data() + text.size();
        const auto [stop, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range) return "'" + text + "' is out of range";
        if (error != std::errc() || stop != end) return "'" + text + "' is not a number";
        return "";
      },
      "FLOAT");
}

void check_number_options(CLI::App& app) {
  for (CLI::App* command : app.get_subcommands({})) {
    for (CLI::Option* option : command->get_options()) {
      const std::string type = option->get_type_name();
      if (type == "INT" || type == "UINT") option->check(decimal_integer(type == "INT"));
      if (type == "FLOAT") option->check(decimal_number());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rematlab::cli;
  // First: a signal in the program's first moments must cancel, not kill.
  CancelOnStopSignals stop_handler;
  rematlab::configure_host_allocator_for_training();
  CLI::App app{"RematLab: activation checkpointing, measured.", "rematlab-cli"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  app.footer(
      "Stopping: Ctrl-C, SIGTERM or SIGHUP stop a command between micro-batches (and between the "
      "pieces of a profile); a run is recorded `cancelled` with every step it completed, and its "
      "offload files are removed. A second signal ends the program at once (exit 130): the run "
      "is then marked `interrupted` when its database is next opened, and offload files it left "
      "are removed by a later run.");

  std::vector<Command> commands = {
      add_run_command(app, g_cancel),
      add_check_command(app, g_cancel),
      add_study_command(app, g_cancel),
      add_sweep_command(app, g_cancel),
      add_max_batch_command(app, g_cancel),
      add_version_command(app),
      add_estimate_command(app),
      add_layout_command(app, g_cancel),
      add_peak_command(app),
      add_upgrade_command(app),
      add_profile_command(app, g_cancel),
      add_plan_command(app, g_cancel),
      add_diagnose_command(app, g_cancel),
  };
  for (Command& report : add_report_commands(app)) commands.push_back(std::move(report));
  check_number_options(app);

  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const auto& command : commands) {
      known += (known.empty() ? "" : ", ") + command.subcommand->get_name();
      found = found || command.subcommand->get_name() == argv[1];
    }
    if (!found)
      return fail(2, "unknown command '" + std::string(argv[1]) + "' (use " + known + ")");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::ParseError& error) {
    return fail(2, error.what());
  }

  // The commands that read the cancel flag (between micro-batches, profile pieces, probes,
  // replays, layouts and while waiting for other ranks); the others take a stop signal's default
  // action.
  static const std::set<std::string> kStoppable = {
      "run", "check", "study", "sweep", "max-batch", "profile", "plan", "diagnose", "layout"};
  try {
    for (const auto& command : commands) {
      if (!command.subcommand->parsed()) continue;
      if (kStoppable.count(command.subcommand->get_name()) == 0) {
        if (g_cancel.load()) return 130;  // stopped before it began
        stop_handler.restore();
      }
      return command.run();
    }
    return fail(2, "no command given (see --help)");
  } catch (const rematlab::InvalidInput& error) {
    return fail(2, error.what());
  } catch (const rematlab::Interrupted& stopped) {
    return fail(130, stopped.what());
  } catch (const c10::Error& error) {
    return fail(1, std::string("LibTorch: ") + error.what_without_backtrace());
  } catch (const std::exception& error) {
    return fail(1, error.what());
  }
}
