// What the training step is doing, so a memory timeline can be coloured by it.
#pragma once

#include <string>

namespace rematlab {

enum class MemoryPhase { kIdle, kForward, kBackward, kRecompute, kOptimizer, kOffloadWait };

std::string to_string(MemoryPhase phase);
MemoryPhase parse_memory_phase(const std::string& text);  // unknown text: kIdle

// Labels the active memory tracker (see MemoryTracker) with `phase` for this scope. Works on
// autograd's worker threads too, since LibTorch carries the tracker into them; a no-op when no
// tracker is active.
class ScopedMemoryPhase {
 public:
  explicit ScopedMemoryPhase(MemoryPhase phase);
  ~ScopedMemoryPhase();
  ScopedMemoryPhase(const ScopedMemoryPhase&) = delete;
  ScopedMemoryPhase& operator=(const ScopedMemoryPhase&) = delete;

 private:
  MemoryPhase previous_ = MemoryPhase::kIdle;
  bool active_ = false;
};

}  // namespace rematlab
