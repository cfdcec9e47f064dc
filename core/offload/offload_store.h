// Checkpoint offload: the inputs that recomputed segments save for backward are moved off the
// compute device after the segment's forward and brought back, one segment ahead, in backward.
// Only those saved inputs are offloaded: never parameters, gradients or optimizer state.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace rematlab {

// A disk or transfer failure during offload; the step fails, everything else stays intact.
class OffloadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One saved input, off the device. Owned by the autograd node that will need it back.
class OffloadTicket {
 public:
  virtual ~OffloadTicket() = default;
  // The tensor as it was stashed (same values, dtype, shape, device); waits if necessary.
  virtual torch::Tensor fetch() = 0;
};

class OffloadStore {
 public:
  virtual ~OffloadStore() = default;
  // Takes `input` off the device; the store drops its reference once it is stored elsewhere.
  virtual std::shared_ptr<OffloadTicket> stash(const torch::Tensor& input) = 0;
  // Forward is over: start bringing back the last stashed input, which backward needs first.
  virtual void begin_backward() = 0;

  // Per-step counters: the most bytes held off the device at once, and the time backward spent
  // waiting for data to come back (transfers that were not hidden behind compute).
  virtual void reset_step_counters() = 0;
  virtual int64_t offloaded_peak_bytes() const = 0;
  virtual double wait_ms() const = 0;

  // The store that recomputed segments on this thread offload to, or nullptr.
  static OffloadStore* active();
};

// Makes `store` the active one for this thread while in scope (the trainer's forward).
class ScopedOffload {
 public:
  explicit ScopedOffload(OffloadStore* store);
  ~ScopedOffload();
  ScopedOffload(const ScopedOffload&) = delete;
  ScopedOffload& operator=(const ScopedOffload&) = delete;

 private:
  OffloadStore* previous_;
};

}  // namespace rematlab
