// Measured memory, never estimated: live tensor bytes on the compute device, current and peak,
// and optionally a timeline of every allocation and free with the phase it happened in.
//
// CPU: LibTorch's allocator reports each allocation and free to a thread-local reporter
// (c10::MemoryReportingInfoBase); the tracker is that reporter for the thread that created it
// and for the autograd threads LibTorch hands that thread's state to. CUDA: the caching
// allocator's own allocated-bytes counters (peak reset per step); the reporter still feeds the
// timeline.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "memory/memory_phase.h"
#include "memory/timeline_point.h"

namespace c10 {
class DebugInfoGuard;
}

namespace rematlab {

class MemoryTracker {
 public:
  // Starts tracking on the calling thread. Create it before the tensors it should see: frees
  // of blocks allocated before are not reported by LibTorch.
  explicit MemoryTracker(c10::Device device);
  ~MemoryTracker();
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  int64_t current_bytes() const;
  int64_t peak_bytes() const;
  // Starts a new peak window at the current live bytes (one per training step).
  void reset_peak();
  // CUDA only, 0 on CPU: the caching allocator's reserved bytes (peak of the window) and the
  // device's used memory now (see device_memory::device_used_bytes).
  int64_t reserved_bytes() const;
  int64_t device_used_bytes() const;

  void set_phase(MemoryPhase phase);
  MemoryPhase phase() const;

  // Records every allocation and free (capped at kMaxTimelinePoints) until end_timeline().
  void begin_timeline();
  std::vector<TimelinePoint> end_timeline();
  static constexpr std::size_t kMaxTimelinePoints = 2'000'000;

  class Reporter;  // LibTorch's reporting hook; defined in the .cpp

 private:
  c10::Device device_;
  std::shared_ptr<Reporter> reporter_;
  std::unique_ptr<c10::DebugInfoGuard> install_guard_;
};

}  // namespace rematlab
