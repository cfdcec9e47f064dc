#include "memory/process_memory.h"

#include <fstream>
#include <string>

namespace rematlab {

ProcessMemory read_process_memory() {
  ProcessMemory memory;
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    int64_t kib = 0;
    if (key == "VmRSS:" && status >> kib) memory.rss_bytes = kib * 1024;
    if (key == "VmHWM:" && status >> kib) memory.rss_peak_bytes = kib * 1024;
    status.ignore(1 << 12, '\n');
  }
  return memory;
}

}  // namespace rematlab
