// rematlab-cli: the headless face of RematLab. Exit codes: 0 done (an oom run is a result),
// 1 internal failure, 2 bad input (one line naming what is wrong), 3 `check` found gradients that
// differ from `none`.
#include <c10/util/Exception.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <charconv>
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

void check_integer_options(CLI::App& app) {
  for (CLI::App* command : app.get_subcommands({})) {
    for (CLI::Option* option : command->get_options()) {
      const std::string type = option->get_type_name();
      if (type == "INT" || type == "UINT") option->check(decimal_integer(type == "INT"));
    }
  }
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
      add_upgrade_command(app),
      add_profile_command(app),
      add_plan_command(app),
      add_diagnose_command(app, g_cancel),
  };
  for (Command& report : add_report_commands(app)) commands.push_back(std::move(report));
  check_integer_options(app);

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
