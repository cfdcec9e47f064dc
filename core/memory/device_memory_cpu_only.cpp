// Built when LibTorch has no CUDA: CUDA devices are rejected before any of this is reached.
#include "memory/device_memory.h"

namespace rematlab::device_memory {

bool uses_caching_allocator(const c10::Device&) { return false; }
AllocatorCounters counters(const c10::Device&) { return {}; }
void reset_peak(const c10::Device&) {}
int64_t device_used_bytes(const c10::Device&) { return 0; }
void empty_cache(const c10::Device&) {}
void synchronize(const c10::Device&) {}
std::string cuda_device_name(const c10::Device&) { return ""; }
int64_t total_bytes(const c10::Device&) { return 0; }

}  // namespace rematlab::device_memory
