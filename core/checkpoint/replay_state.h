// What a recomputation must see exactly as the original forward saw it: the random-number
// generators (so dropout draws the same masks) and the autocast state (so recomputation runs in
// the same precision). Captured before a segment's forward, re-entered for its recomputation.
#pragma once

#include <ATen/ATen.h>

#include <optional>

#include "common/precision.h"

namespace rematlab {

class RngSnapshot {
 public:
  // The CPU generator, plus `device`'s default generator when it is not the CPU.
  static RngSnapshot capture(const c10::Device& device);
  void restore() const;

 private:
  at::Tensor cpu_state_;
  std::optional<c10::Device> device_;
  at::Tensor device_state_;
};

// Restores `snapshot` for its lifetime and puts back the generators' state as it was before.
class ScopedRngReplay {
 public:
  ScopedRngReplay(const RngSnapshot& snapshot, const c10::Device& device);
  ~ScopedRngReplay();
  ScopedRngReplay(const ScopedRngReplay&) = delete;
  ScopedRngReplay& operator=(const ScopedRngReplay&) = delete;

 private:
  RngSnapshot previous_;
};

struct AutocastSnapshot {
  bool cpu_enabled = false;
  at::ScalarType cpu_dtype = at::kBFloat16;
  bool device_enabled = false;  // the compute device's type, when it is not the CPU
  at::ScalarType device_dtype = at::kHalf;
  at::DeviceType device_type = at::kCPU;

  static AutocastSnapshot capture(at::DeviceType device_type);
  // The state a run of `precision` on `device` trains under: nothing for fp32, else autocast to
  // bf16 or fp16 on that device's type (the rest as it is now).
  static std::optional<AutocastSnapshot> for_precision(Precision precision,
                                                       const c10::Device& device);
};

// Enters an autocast state (CPU and one device type) for its lifetime, like `torch.autocast`: the
// previous state comes back on exit and the cast cache is cleared when the outermost scope ends,
// so no stale low-precision weight copy outlives the optimizer step.
class ScopedAutocast {
 public:
  explicit ScopedAutocast(const AutocastSnapshot& state);
  ~ScopedAutocast();
  ScopedAutocast(const ScopedAutocast&) = delete;
  ScopedAutocast& operator=(const ScopedAutocast&) = delete;

 private:
  AutocastSnapshot previous_;
};

// Marks a segment's recomputation on this thread for its lifetime: what a forward records once
// (a mixture of experts' balance loss) is not recorded again when the segment runs a second time.
class ScopedRecomputation {
 public:
  ScopedRecomputation();
  ~ScopedRecomputation();
  ScopedRecomputation(const ScopedRecomputation&) = delete;
  ScopedRecomputation& operator=(const ScopedRecomputation&) = delete;

 private:
  bool previous_;
};

// Whether this thread is inside a segment's recomputation.
bool recomputing();

}  // namespace rematlab
