#include "common/process_identity.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace rematlab {
namespace {

int64_t start_ticks_of(int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // The command name (field 2) may contain spaces and parentheses; fields resume after the last
  // ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  for (int index = 3; fields >> field; ++index) {
    if (index == 22) return std::stoll(field);
  }
  return 0;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace

ProcessIdentity current_process() {
  ProcessIdentity self;
  self.host = host_name();
  self.pid = ::getpid();
  self.start_ticks = start_ticks_of(self.pid);
  return self;
}

bool process_may_be_alive(const ProcessIdentity& process) {
  if (process.host != host_name()) return true;
  if (process.pid <= 0) return false;
  if (::kill(static_cast<pid_t>(process.pid), 0) != 0 && errno == ESRCH) return false;
  const int64_t ticks = start_ticks_of(process.pid);
  return process.start_ticks == 0 || ticks == 0 || ticks == process.start_ticks;
}

}  // namespace rematlab
