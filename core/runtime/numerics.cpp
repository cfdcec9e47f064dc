#include "runtime/numerics.h"

#include <ATen/Context.h>

#include <cstdlib>

namespace rematlab {

// Only LibTorch's original switches, which 1.13 has too: newer LibTorch refuses a mix of these
// and its per-backend precision API, so nothing in the project uses the latter.
ScopedNumerics::ScopedNumerics(NumericsSettings settings) : requested_(settings) {
  auto& context = at::globalContext();
  cublas_tf32_ = context.allowTF32CuBLAS();
  cudnn_tf32_ = context.allowTF32CuDNN();
  deterministic_ = context.deterministicAlgorithms();
  deterministic_warn_only_ = context.deterministicAlgorithmsWarnOnly();
  if (settings.tf32) {
    context.setAllowTF32CuBLAS(true);
    context.setAllowTF32CuDNN(true);
  }
  if (settings.deterministic) {
    ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    context.setDeterministicAlgorithms(true, /*warn_only=*/false);
  }
}

ScopedNumerics::~ScopedNumerics() {
  auto& context = at::globalContext();
  if (requested_.tf32) {
    context.setAllowTF32CuBLAS(cublas_tf32_);
    context.setAllowTF32CuDNN(cudnn_tf32_);
  }
  if (requested_.deterministic) {
    context.setDeterministicAlgorithms(deterministic_, deterministic_warn_only_);
  }
}

}  // namespace rematlab
