#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "compat/torch_compat.h"
#include "memory/device_memory.h"

namespace rematlab::device_memory {
namespace {
// StatType::AGGREGATE; the enum moved namespaces between LibTorch 2.x releases, its value did not.
constexpr std::size_t kAggregate = 0;

// "cuda" names the current device: the allocator's counters need its number (asked with -1 they
// throw "Invalid device argument").
c10::DeviceIndex cuda_index(const c10::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
}  // namespace

bool uses_caching_allocator(const c10::Device& device) { return device.is_cuda(); }

AllocatorCounters counters(const c10::Device& device) {
  if (!device.is_cuda()) return {};
  compat::initialize_cuda();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(cuda_index(device));
  AllocatorCounters result;
  result.allocated = stats.allocated_bytes[kAggregate].current;
  result.peak_allocated = stats.allocated_bytes[kAggregate].peak;
  result.reserved = stats.reserved_bytes[kAggregate].current;
  result.peak_reserved = stats.reserved_bytes[kAggregate].peak;
  return result;
}

void reset_peak(const c10::Device& device) {
  if (!device.is_cuda()) return;
  compat::initialize_cuda();
  c10::cuda::CUDACachingAllocator::resetPeakStats(cuda_index(device));
}

// The runtime's view rather than NVML's: the same number nvidia-smi reports for the device,
// without linking the NVML library, which LibTorch does not bring.
int64_t device_used_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  const c10::cuda::CUDAGuard guard(cuda_index(device));
  std::size_t free = 0;
  std::size_t total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(total - free);
}

void empty_cache(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) c10::cuda::device_synchronize();
}

int64_t total_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  const c10::cuda::CUDAGuard guard(cuda_index(device));
  std::size_t free = 0;
  std::size_t total = 0;
  C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(total);
}

std::string cuda_device_name(const c10::Device& device) {
  if (!device.is_cuda()) return "";
  cudaDeviceProp properties{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&properties, cuda_index(device)));
  return properties.name;
}

}  // namespace rematlab::device_memory
