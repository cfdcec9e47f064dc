// How many intra-op threads a run computes with. `--threads 0` means LibTorch's default, which
// is a number fixed for the process (OMP_NUM_THREADS, or the physical cores), not whatever the
// calling thread was last set to: OpenMP keeps the count per thread, so a worker thread that
// trained with --threads 2 would otherwise train its next default run, profile or key with 2.
#pragma once

namespace rematlab {

// `requested`, or LibTorch's default for 0.
int resolved_thread_count(int requested);

// Makes the calling thread compute with resolved_thread_count(requested) threads; returns it.
int use_thread_count(int requested);

}  // namespace rematlab
