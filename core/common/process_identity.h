// Who is running: enough to tell, later, whether the process that left a record still exists.
// A pid alone is not enough (pids are reused), so the process's start time goes with it.
#pragma once

#include <cstdint>
#include <string>

namespace rematlab {

struct ProcessIdentity {
  std::string host;
  int64_t pid = 0;
  int64_t start_ticks = 0;  // /proc/PID/stat field 22; 0 when unknown
};

ProcessIdentity current_process();

// False only when `process` ran on this host and is certainly gone (no such pid, or the pid now
// belongs to a process that started at another time). A process on another host is assumed alive.
bool process_may_be_alive(const ProcessIdentity& process);

}  // namespace rematlab
