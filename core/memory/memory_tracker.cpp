#include "memory/memory_tracker.h"

#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include "memory/device_memory.h"

namespace rematlab {

// Lock order, by design: the CUDA caching allocator calls reportMemoryUsage while it may hold
// its own mutex, so this class never calls into the allocator while it holds mutex_ (that would
// be the opposite order: a deadlock as soon as the disk-offload worker and autograd allocate at
// once). The timeline's CUDA bytes come from the `total_allocated` the allocator passes in, not
// from asking it; the allocator's counters are read only by MemoryTracker, outside mutex_.
class MemoryTracker::Reporter : public c10::MemoryReportingInfoBase {
 public:
  explicit Reporter(c10::Device device)
      : device_(device), allocator_counts_(device_memory::uses_caching_allocator(device)) {}

  bool memoryProfilingEnabled() const override { return true; }

  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, size_t total_allocated,
                         size_t /*total_reserved*/, c10::Device device) override {
    if (device.type() != device_.type()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    current_ += alloc_size;
    peak_ = std::max(peak_, current_);
    allocator_total_ = static_cast<int64_t>(total_allocated);
    record_locked();
  }

  int64_t current() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_;
  }
  int64_t peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
  }

  MemoryPhase phase() const { return phase_.load(); }
  void set_phase(MemoryPhase phase) {
    phase_.store(phase);
    std::lock_guard<std::mutex> lock(mutex_);
    record_locked();  // a point at each phase change, so quiet phases still show on the timeline
  }

  void begin_timeline() {
    std::lock_guard<std::mutex> lock(mutex_);
    timeline_.clear();
    timeline_start_ = Clock::now();
    recording_ = true;
    record_locked();
  }
  std::vector<TimelinePoint> end_timeline() {
    std::lock_guard<std::mutex> lock(mutex_);
    record_locked();
    recording_ = false;
    return std::move(timeline_);
  }

 private:
  using Clock = std::chrono::steady_clock;

  void record_locked() {
    if (!recording_ || timeline_.size() >= kMaxTimelinePoints) return;
    const double ms =
        std::chrono::duration<double, std::milli>(Clock::now() - timeline_start_).count();
    // On CUDA the caching allocator's total (as it last reported it) is the truth.
    timeline_.push_back({ms, allocator_counts_ ? allocator_total_ : current_, phase_.load()});
  }

  const c10::Device device_;
  const bool allocator_counts_;  // CUDA: the caching allocator's totals, not our own sum
  mutable std::mutex mutex_;
  int64_t allocator_total_ = 0;
  int64_t current_ = 0;
  int64_t peak_ = 0;
  std::atomic<MemoryPhase> phase_{MemoryPhase::kIdle};
  bool recording_ = false;
  Clock::time_point timeline_start_;
  std::vector<TimelinePoint> timeline_;
};

MemoryTracker::MemoryTracker(c10::Device device)
    : device_(device), reporter_(std::make_shared<Reporter>(device)) {
  install_guard_ =
      std::make_unique<c10::DebugInfoGuard>(c10::DebugInfoKind::PROFILER_STATE, reporter_);
  reset_peak();
}

MemoryTracker::~MemoryTracker() = default;

int64_t MemoryTracker::current_bytes() const {
  if (device_memory::uses_caching_allocator(device_)) {
    return device_memory::counters(device_).allocated;
  }
  return reporter_->current();
}

int64_t MemoryTracker::peak_bytes() const {
  if (device_memory::uses_caching_allocator(device_)) {
    return device_memory::counters(device_).peak_allocated;
  }
  return reporter_->peak();
}

int64_t MemoryTracker::reserved_bytes() const {
  return device_memory::counters(device_).peak_reserved;  // zeros on CPU
}

int64_t MemoryTracker::device_used_bytes() const {
  return device_memory::device_used_bytes(device_);
}

void MemoryTracker::reset_peak() {
  if (device_memory::uses_caching_allocator(device_)) device_memory::reset_peak(device_);
  reporter_->reset_peak();
}

void MemoryTracker::set_phase(MemoryPhase phase) { reporter_->set_phase(phase); }
MemoryPhase MemoryTracker::phase() const { return reporter_->phase(); }

void MemoryTracker::begin_timeline() { reporter_->begin_timeline(); }
std::vector<TimelinePoint> MemoryTracker::end_timeline() { return reporter_->end_timeline(); }

namespace {
// The reporter LibTorch carries for this thread (and into autograd's threads), if it is ours.
MemoryTracker::Reporter* active_reporter() {
  return dynamic_cast<MemoryTracker::Reporter*>(
      c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE));
}
}  // namespace

ScopedMemoryPhase::ScopedMemoryPhase(MemoryPhase phase) {
  if (auto* reporter = active_reporter()) {
    previous_ = reporter->phase();
    active_ = true;
    reporter->set_phase(phase);
  }
}

ScopedMemoryPhase::~ScopedMemoryPhase() {
  if (!active_) return;
  if (auto* reporter = active_reporter()) reporter->set_phase(previous_);
}

std::string to_string(MemoryPhase phase) {
  switch (phase) {
    case MemoryPhase::kIdle:
      return "idle";
    case MemoryPhase::kForward:
      return "forward";
    case MemoryPhase::kBackward:
      return "backward";
    case MemoryPhase::kRecompute:
      return "recompute";
    case MemoryPhase::kOptimizer:
      return "optimizer";
    case MemoryPhase::kOffloadWait:
      return "offload_wait";
  }
  return "idle";
}

MemoryPhase parse_memory_phase(const std::string& text) {
  for (MemoryPhase phase : {MemoryPhase::kForward, MemoryPhase::kBackward, MemoryPhase::kRecompute,
                            MemoryPhase::kOptimizer, MemoryPhase::kOffloadWait}) {
    if (to_string(phase) == text) return phase;
  }
  return MemoryPhase::kIdle;
}

}  // namespace rematlab
