#include "runtime/host_allocator.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace rematlab {

void configure_host_allocator_for_training() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);  // glibc's upper limit on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
#endif
}

}  // namespace rematlab
