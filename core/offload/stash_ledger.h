// The bookkeeping both offload stores share: the order inputs were stashed in (backward fetches
// them in reverse and prefetches the one before), the bytes held off the device with their
// per-step peak, and the time backward waited. Not thread-safe: a store calls it under its lock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

namespace rematlab {

template <typename Entry>
class StashLedger {
 public:
  void stashed(const std::shared_ptr<Entry>& entry) { order_.push_back(entry); }

  // The entry stashed last (backward needs it first), or null.
  std::shared_ptr<Entry> last() const { return order_.empty() ? nullptr : order_.back().lock(); }
  // The entry stashed just before `entry` (backward needs it next), or null.
  std::shared_ptr<Entry> before(const std::shared_ptr<Entry>& entry) const {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      if (it->lock() == entry)
        return std::next(it) == order_.rend() ? nullptr : std::next(it)->lock();
    }
    return nullptr;
  }

  void hold(int64_t bytes) {
    held_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, held_bytes_);
  }
  void release(int64_t bytes) { held_bytes_ -= bytes; }
  void waited(double ms) { wait_ms_ += ms; }

  // A new step: its peak starts from what is still held, and entries whose graph is gone are
  // forgotten.
  void reset_step() {
    peak_bytes_ = held_bytes_;
    wait_ms_ = 0.0;
    order_.erase(std::remove_if(order_.begin(), order_.end(),
                                [](const std::weak_ptr<Entry>& e) { return e.expired(); }),
                 order_.end());
  }
  int64_t peak_bytes() const { return peak_bytes_; }
  double wait_ms() const { return wait_ms_; }

 private:
  std::vector<std::weak_ptr<Entry>> order_;
  int64_t held_bytes_ = 0;
  int64_t peak_bytes_ = 0;
  double wait_ms_ = 0.0;
};

}  // namespace rematlab
