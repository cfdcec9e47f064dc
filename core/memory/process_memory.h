// The process's resident set, for information beside the device counters.
#pragma once

#include <cstdint>

namespace rematlab {

struct ProcessMemory {
  int64_t rss_bytes = 0;
  int64_t rss_peak_bytes = 0;  // high-water mark since the process started
};

// Reads /proc/self/status on Linux; zeros elsewhere.
ProcessMemory read_process_memory();

}  // namespace rematlab
