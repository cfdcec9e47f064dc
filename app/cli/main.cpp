// rematlab-cli: the headless face of RematLab. Exit codes: 0 done (an oom run is a result),
// 2 bad input (one line naming what is wrong), 1 internal failure.
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <atomic>
#include <csignal>
#include <iostream>

#include "cli/commands.h"
#include "common/errors.h"
#include "runtime/host_allocator.h"

namespace {

// Ctrl-C asks the running command to stop between micro-batches; a second Ctrl-C kills.
std::atomic<bool> g_cancel{false};

extern "C" void request_cancel(int) {
  if (g_cancel.exchange(true)) std::_Exit(130);
}

class CancelOnInterrupt {
 public:
  CancelOnInterrupt() : previous_(std::signal(SIGINT, request_cancel)) {}
  ~CancelOnInterrupt() { std::signal(SIGINT, previous_); }
  CancelOnInterrupt(const CancelOnInterrupt&) = delete;
  CancelOnInterrupt& operator=(const CancelOnInterrupt&) = delete;

 private:
  void (*previous_)(int);
};

int fail(int code, const std::string& message) {
  std::cerr << "rematlab-cli: error: " << message << std::endl;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rematlab::cli;
  rematlab::configure_host_allocator_for_training();
  CLI::App app{"RematLab: activation checkpointing, measured.", "rematlab-cli"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");

  std::vector<Command> commands = {
      add_run_command(app, g_cancel),
      add_check_command(app),
      add_study_command(app, g_cancel),
      add_sweep_command(app, g_cancel),
      add_max_batch_command(app, g_cancel),
      add_version_command(app),
      add_estimate_command(app),
      add_peak_command(app),
  };
  for (Command& report : add_report_commands(app)) commands.push_back(std::move(report));

  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const auto& command : commands) {
      known += (known.empty() ? "" : ", ") + command.subcommand->get_name();
      found = found || command.subcommand->get_name() == argv[1];
    }
    if (!found) return fail(2, "unknown command '" + std::string(argv[1]) + "' (use " + known + ")");
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

  CancelOnInterrupt interrupt_handler;
  try {
    for (const auto& command : commands) {
      if (command.subcommand->parsed()) return command.run();
    }
    return fail(2, "no command given (see --help)");
  } catch (const rematlab::InvalidInput& error) {
    return fail(2, error.what());
  } catch (const c10::Error& error) {
    return fail(1, std::string("LibTorch: ") + error.what_without_backtrace());
  } catch (const std::exception& error) {
    return fail(1, error.what());
  }
}
