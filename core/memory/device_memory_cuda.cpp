#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "memory/device_memory.h"

namespace rematlab::device_memory {
namespace {
// StatType::AGGREGATE; the enum moved namespaces between LibTorch 2.x releases, its value did not.
constexpr std::size_t kAggregate = 0;
}

bool uses_caching_allocator(const c10::Device& device) { return device.is_cuda(); }

AllocatorCounters counters(const c10::Device& device) {
  if (!device.is_cuda()) return {};
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  AllocatorCounters result;
  result.allocated = stats.allocated_bytes[kAggregate].current;
  result.peak_allocated = stats.allocated_bytes[kAggregate].peak;
  result.reserved = stats.reserved_bytes[kAggregate].current;
  return result;
}

void reset_peak(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

void empty_cache(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::device_synchronize();
}

}  // namespace rematlab::device_memory
