// Runs the real rematlab-cli binary for a test and captures what it printed, the way a user's
// shell would see it. Shared by the suites that check the CLI contract.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/posix_files.h"
#include "scratch_dir.h"

namespace rematlab::testing {

// The smallest model the data-parallel and signal suites train on several ranks.
inline constexpr const char* kTiny =
    "--preset tiny --layers 2 --d-model 32 --heads 2 --seq-len 16 --vocab 64 --batch 2 "
    "--threads 1";

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// `arguments` go through the shell (quote as a shell would); `wrapper` (e.g. strace …) runs the
// binary.
inline CliResult cli_through(const std::string& wrapper, const std::string& arguments) {
  const std::string base =
      files::join(files::temp_directory(), "rematlab_cli_test_" + std::to_string(::getpid()));
  const std::string command = wrapper + (wrapper.empty() ? "" : " ") +
                              std::string(REMATLAB_CLI_PATH) + " " + arguments + " >" + base +
                              ".out 2>" + base + ".err";
  const int status = std::system(command.c_str());
  CliResult result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(base + ".out"),
                   slurp(base + ".err")};
  files::remove_file(base + ".out");
  files::remove_file(base + ".err");
  return result;
}

inline CliResult cli(const std::string& arguments) { return cli_through("", arguments); }

// The contract: with --json the last line of stdout is one JSON object.
inline nlohmann::json last_line_json(const std::string& out) {
  std::string text = out;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return nlohmann::json::parse(text.substr(text.rfind('\n') + 1));
}

inline int count_lines(const std::string& text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace rematlab::testing
