// Built with a LibTorch that has no CUDA: host offload cannot exist, say so clearly.
#include "common/errors.h"
#include "offload/host_offload.h"

namespace rematlab {

bool host_offload_available() { return false; }

std::unique_ptr<OffloadStore> make_host_offload_store(const c10::Device& /*device*/) {
  throw InvalidInput("--offload", "host offload needs a LibTorch built with CUDA; use disk");
}

}  // namespace rematlab
