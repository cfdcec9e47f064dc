// A child process for tests that need several: started with extra environment variables, its
// output in files, waited for with a deadline, and killed (with its whole process group) if the
// test ends first, so no test leaves a process behind.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace rematlab::testing {

// Polls `condition` every `every` until it holds or `timeout` passes; its last answer.
inline bool wait_until(const std::function<bool()>& condition, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds every = std::chrono::milliseconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(every);
  }
  return condition();
}

// Every process's id, from /proc.
inline std::vector<pid_t> all_processes() {
  std::vector<pid_t> pids;
  DIR* proc = ::opendir("/proc");
  if (!proc) return pids;
  while (const dirent* entry = ::readdir(proc)) {
    const std::string name = entry->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pids.push_back(static_cast<pid_t>(std::stol(name)));
  }
  ::closedir(proc);
  return pids;
}

// Every process whose environment holds `entry` ("TMPDIR=/tmp/x": a case's own marker).
inline std::vector<pid_t> processes_with(const std::string& entry) {
  std::vector<pid_t> found;
  for (const pid_t pid : all_processes()) {
    std::ifstream environment("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
    for (std::string each; std::getline(environment, each, '\0');) {
      if (each == entry) found.push_back(pid);
    }
  }
  return found;
}

// The processes whose parent is `parent`.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> children;
  for (const pid_t pid : all_processes()) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream fields(line.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == parent) children.push_back(pid);
  }
  return children;
}

class ChildProcess {
 public:
  // `args[0]` is the program. stdout and stderr go to the given files.
  ChildProcess(const std::vector<std::string>& args, const std::vector<std::string>& env,
               const std::string& out_path, const std::string& err_path) {
    std::vector<std::string> storage = args;
    for (const std::string& item : env) storage.push_back(item);
    for (char** entry = environ; *entry; ++entry) {
      // getenv takes the first match: the given variables replace inherited ones.
      const std::string inherited = *entry;
      const std::string name = inherited.substr(0, inherited.find('=') + 1);
      bool replaced = false;
      for (const std::string& item : env) replaced = replaced || item.rfind(name, 0) == 0;
      if (!replaced) storage.push_back(inherited);
    }
    std::vector<char*> argv, envp;
    for (std::size_t i = 0; i < storage.size(); ++i) {
      (i < args.size() ? argv : envp).push_back(storage[i].data());
    }
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      // Async-signal-safe calls only until exec. Its own process group: the test can kill it
      // and everything it started at once.
      ::setpgid(0, 0);
      const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (out < 0 || err < 0 || ::dup2(out, STDOUT_FILENO) < 0 || ::dup2(err, STDERR_FILENO) < 0) {
        ::_exit(126);
      }
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
  }
  ~ChildProcess() {
    if (!status_) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // The wait status, or nothing if it is still running after `timeout`.
  std::optional<int> wait_for(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!status_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status_;
  }

  // The exit code, -1 when killed by a signal, nothing when still running.
  std::optional<int> exit_code(std::chrono::milliseconds timeout) {
    const std::optional<int> status = wait_for(timeout);
    if (!status) return std::nullopt;
    return WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

}  // namespace rematlab::testing
