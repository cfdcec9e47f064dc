// A LibTorch without CUDA has no NCCL: distributed CUDA runs are refused.
#include "common/errors.h"
#include "parallel/dist_context.h"

namespace rematlab::parallel {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                    int, const c10::Device&,
                                                    std::chrono::milliseconds) {
  throw InvalidInput("--device", "this LibTorch has no CUDA, so no NCCL for distributed runs");
}

void close_nccl_backend(c10d::Backend&) {}

}  // namespace rematlab::parallel
