// Device-specific memory counters behind one interface. The CUDA implementation is the only
// file of the engine that talks to the CUDA caching allocator; a CPU-only LibTorch builds the
// stubs instead.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace rematlab::device_memory {

struct AllocatorCounters {
  int64_t allocated = 0;  // live tensor bytes
  int64_t peak_allocated = 0;
  int64_t reserved = 0;  // held by the caching allocator, used or not
  int64_t peak_reserved = 0;
};

bool uses_caching_allocator(const c10::Device& device);  // true for CUDA
AllocatorCounters counters(const c10::Device& device);
void reset_peak(const c10::Device& device);
// The device's used memory, total minus free as the driver reports it (cudaMemGetInfo): what
// nvidia-smi shows, every process and the CUDA context included. 0 for the CPU.
int64_t device_used_bytes(const c10::Device& device);
// Returns cached, unused blocks to the driver (after an out-of-memory, say).
void empty_cache(const c10::Device& device);
void synchronize(const c10::Device& device);
// The CUDA device's total memory; 0 for the CPU.
int64_t total_bytes(const c10::Device& device);
// The CUDA device's product name ("NVIDIA H200"); empty for the CPU.
std::string cuda_device_name(const c10::Device& device);

}  // namespace rematlab::device_memory
