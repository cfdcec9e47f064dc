// The NCCL backend, built only where LibTorch has CUDA (see core/CMakeLists.txt); the CPU-only
// build takes nccl_unavailable.cpp instead.
#include <torch/version.h>

#include <cstdlib>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "parallel/dist_context.h"

namespace rematlab::parallel {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    const c10::Device& device,
                                                    std::chrono::milliseconds timeout) {
  // Start and end events per collective, so its duration is known (comm_ms): NCCL's work
  // objects complete their futures when a collective is queued, not when it ends.
  ::setenv("TORCH_NCCL_ENABLE_TIMING", "1", 0);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
  backend->setBoundDeviceId(device);
  return backend;
}

void close_nccl_backend(c10d::Backend& backend) {
  // abort, not shutdown: shutdown finalises the communicators, waiting for every kernel, which
  // hangs a rank that failed or was cancelled with a collective its peers never joined (until
  // the watchdog's timeout). After a clean run nothing is in flight and abort ends at once.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7)
  backend.abort();
#else
  (void)backend;  // Backend has no abort before 2.7: the destructor aborts, after its warning
#endif
}

}  // namespace rematlab::parallel
