// One point of a step's memory timeline. Plain values, no LibTorch: the database and the window
// carry timelines too.
#pragma once

#include <cstdint>

#include "memory/memory_phase.h"

namespace rematlab {

struct TimelinePoint {
  double time_ms = 0.0;  // since the timeline began
  int64_t bytes = 0;     // live bytes after the event
  MemoryPhase phase = MemoryPhase::kIdle;
};

}  // namespace rematlab
