#include "runtime/thread_count.h"

#include <ATen/Parallel.h>

namespace rematlab {

int resolved_thread_count(int requested) {
  return requested > 0 ? requested : at::intraop_default_num_threads();
}

int use_thread_count(int requested) {
  const int threads = resolved_thread_count(requested);
  at::set_num_threads(threads);
  return threads;
}

}  // namespace rematlab
