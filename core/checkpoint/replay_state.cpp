#include "checkpoint/replay_state.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>

#include <mutex>

#include "compat/torch_compat.h"

namespace rematlab {
namespace {

at::Generator default_generator(const c10::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

at::Tensor state_of(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

void apply(const AutocastSnapshot& state) {
  compat::set_autocast_enabled(at::kCPU, state.cpu_enabled);
  compat::set_autocast_dtype(at::kCPU, state.cpu_dtype);
  if (state.device_type != at::kCPU) {
    compat::set_autocast_enabled(state.device_type, state.device_enabled);
    compat::set_autocast_dtype(state.device_type, state.device_dtype);
  }
}

}  // namespace

RngSnapshot RngSnapshot::capture(const c10::Device& device) {
  RngSnapshot snapshot;
  snapshot.cpu_state_ = state_of(default_generator(c10::Device(c10::kCPU)));
  if (!device.is_cpu()) {
    snapshot.device_ = device;
    snapshot.device_state_ = state_of(default_generator(device));
  }
  return snapshot;
}

void RngSnapshot::restore() const {
  set_state(default_generator(c10::Device(c10::kCPU)), cpu_state_);
  if (device_) set_state(default_generator(*device_), device_state_);
}

ScopedRngReplay::ScopedRngReplay(const RngSnapshot& snapshot, const c10::Device& device)
    : previous_(RngSnapshot::capture(device)) {
  snapshot.restore();
}

ScopedRngReplay::~ScopedRngReplay() { previous_.restore(); }

AutocastSnapshot AutocastSnapshot::capture(at::DeviceType device_type) {
  AutocastSnapshot state;
  state.cpu_enabled = compat::autocast_enabled(at::kCPU);
  state.cpu_dtype = compat::autocast_dtype(at::kCPU);
  state.device_type = device_type;
  if (device_type != at::kCPU) {
    state.device_enabled = compat::autocast_enabled(device_type);
    state.device_dtype = compat::autocast_dtype(device_type);
  }
  return state;
}

ScopedAutocast::ScopedAutocast(const AutocastSnapshot& state)
    : previous_(AutocastSnapshot::capture(state.device_type)) {
  apply(state);
  at::autocast::increment_nesting();
}

ScopedAutocast::~ScopedAutocast() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  apply(previous_);
}

std::optional<AutocastSnapshot> AutocastSnapshot::for_precision(Precision precision,
                                                                const c10::Device& device) {
  if (precision == Precision::kFp32) return std::nullopt;
  AutocastSnapshot state = capture(device.type());
  const at::ScalarType dtype = precision == Precision::kBf16 ? at::kBFloat16 : at::kHalf;
  if (device.is_cpu()) {
    state.cpu_enabled = true;
    state.cpu_dtype = dtype;
  } else {
    state.device_enabled = true;
    state.device_dtype = dtype;
  }
  return state;
}

namespace {
thread_local bool in_recomputation = false;
}  // namespace

ScopedRecomputation::ScopedRecomputation() : previous_(in_recomputation) {
  in_recomputation = true;
}

ScopedRecomputation::~ScopedRecomputation() { in_recomputation = previous_; }

bool recomputing() { return in_recomputation; }

}  // namespace rematlab
