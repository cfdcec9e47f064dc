// Host offload on CUDA. Ordering, in one place:
//  stash (forward, compute stream C):  event on C → side stream S waits → S copies the input
//    into pinned host memory. The input is marked as used on S, so the caching allocator does
//    not hand its block to anyone before S's copy has read it, even though the graph drops the
//    device tensor as soon as the next segment has consumed it.
//  prefetch (backward): S allocates a device tensor and copies the pinned data back, recording
//    an event; it starts for the last segment when backward begins, and for the previous segment
//    each time one is fetched, so one transfer is always in flight behind the recomputation.
//  fetch (backward, on C): waits for that event (the wait is timed: it is transfer time that
//    compute did not hide), makes C wait on it too, and marks the tensor as used on C, since it
//    was allocated on S. The pinned buffer is released to LibTorch's host allocator, which keeps
//    it until the copy that read it has finished.
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <mutex>

#include "memory/memory_phase.h"
#include "offload/host_offload.h"
#include "offload/stash_ledger.h"

namespace rematlab {
namespace {

struct HostEntry {
  torch::Tensor pinned;     // the host copy; released once the data is back on the device
  torch::Tensor on_device;  // the prefetched copy, allocated on the side stream
  at::cuda::CUDAEvent copied_back;
  bool prefetching = false;
  int64_t bytes = 0;
};

class HostOffloadCore {
 public:
  explicit HostOffloadCore(const c10::Device& device)
      : device_(device), side_stream_(c10::cuda::getStreamFromPool(false, device.index())) {}

  std::shared_ptr<HostEntry> stash(const torch::Tensor& input) {
    c10::cuda::CUDAGuard device_guard(device_);
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    auto entry = std::make_shared<HostEntry>();
    entry->bytes = static_cast<int64_t>(input.nbytes());
    entry->pinned =
        torch::empty(input.sizes(), input.options().device(torch::kCPU).pinned_memory(true));

    at::cuda::CUDAEvent produced;
    produced.record(compute);
    produced.block(side_stream_);
    {
      c10::cuda::CUDAStreamGuard on_side(side_stream_);
      entry->pinned.copy_(input, /*non_blocking=*/true);
    }
    input.record_stream(side_stream_.unwrap());

    std::lock_guard<std::mutex> lock(mutex_);
    ledger_.stashed(entry);
    ledger_.hold(entry->bytes);
    return entry;
  }

  torch::Tensor fetch(const std::shared_ptr<HostEntry>& entry) {
    c10::cuda::CUDAGuard device_guard(device_);
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    std::lock_guard<std::mutex> lock(mutex_);
    prefetch_locked(*entry);  // no-op when the prefetch is already in flight
    if (!entry->copied_back.query()) {
      ScopedMemoryPhase phase(MemoryPhase::kOffloadWait);
      const auto start = std::chrono::steady_clock::now();
      entry->copied_back.synchronize();
      ledger_.waited(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    entry->copied_back.block(compute);
    torch::Tensor result = std::move(entry->on_device);
    result.record_stream(compute.unwrap());
    release_locked(*entry);
    // Backward visits segments in reverse: start bringing back the one before this.
    if (auto previous = ledger_.before(entry)) prefetch_locked(*previous);
    return result;
  }

  void begin_backward() {
    c10::cuda::CUDAGuard device_guard(device_);
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto last = ledger_.last()) prefetch_locked(*last);
  }

  // The graph that owned the entry is gone (backward is done, or it was dropped).
  void abandon(HostEntry& entry) {
    std::lock_guard<std::mutex> lock(mutex_);
    entry.on_device = torch::Tensor();  // allocated on the side stream; freeing there is safe
    release_locked(entry);
  }

  void reset_step_counters() {
    std::lock_guard<std::mutex> lock(mutex_);
    ledger_.reset_step();
  }
  int64_t peak_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return ledger_.peak_bytes();
  }
  double wait_ms() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return ledger_.wait_ms();
  }

 private:
  void prefetch_locked(HostEntry& entry) {
    if (entry.prefetching || !entry.pinned.defined()) return;
    c10::cuda::CUDAStreamGuard on_side(side_stream_);
    entry.on_device = torch::empty(entry.pinned.sizes(), entry.pinned.options().device(device_));
    entry.on_device.copy_(entry.pinned, /*non_blocking=*/true);
    entry.copied_back.record(side_stream_);
    entry.prefetching = true;
  }

  // LibTorch's pinned allocator recorded the copies that read the buffer; it reuses it only
  // after they finish, so dropping our reference here is safe.
  void release_locked(HostEntry& entry) {
    if (!entry.pinned.defined()) return;
    entry.pinned = torch::Tensor();
    ledger_.release(entry.bytes);
  }

  const c10::Device device_;
  const c10::cuda::CUDAStream side_stream_;
  mutable std::mutex mutex_;
  StashLedger<HostEntry> ledger_;
};

class HostTicket : public OffloadTicket {
 public:
  HostTicket(std::shared_ptr<HostOffloadCore> core, std::shared_ptr<HostEntry> entry)
      : core_(std::move(core)), entry_(std::move(entry)) {}
  ~HostTicket() override { core_->abandon(*entry_); }
  torch::Tensor fetch() override { return core_->fetch(entry_); }

 private:
  std::shared_ptr<HostOffloadCore> core_;
  std::shared_ptr<HostEntry> entry_;
};

class HostOffloadStore : public OffloadStore {
 public:
  explicit HostOffloadStore(const c10::Device& device)
      : core_(std::make_shared<HostOffloadCore>(device)) {}
  std::shared_ptr<OffloadTicket> stash(const torch::Tensor& input) override {
    return std::make_shared<HostTicket>(core_, core_->stash(input));
  }
  void begin_backward() override { core_->begin_backward(); }
  void reset_step_counters() override { core_->reset_step_counters(); }
  int64_t offloaded_peak_bytes() const override { return core_->peak_bytes(); }
  double wait_ms() const override { return core_->wait_ms(); }

 private:
  std::shared_ptr<HostOffloadCore> core_;
};

}  // namespace

bool host_offload_available() { return true; }

std::unique_ptr<OffloadStore> make_host_offload_store(const c10::Device& device) {
  return std::make_unique<HostOffloadStore>(device);
}

}  // namespace rematlab
