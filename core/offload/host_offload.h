// Host offload: saved segment inputs are copied to pinned host memory on a side CUDA stream
// right after the segment's forward, and copied back one segment ahead in backward. CUDA only;
// a LibTorch without CUDA builds a stub that refuses.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "offload/offload_store.h"

namespace rematlab {

// True when this build of the engine can offload to host memory (LibTorch built with CUDA).
bool host_offload_available();

// `device` must be a CUDA device. Throws InvalidInput("--offload", …) when host offload is not
// available in this build.
std::unique_ptr<OffloadStore> make_host_offload_store(const c10::Device& device);

}  // namespace rematlab
