// The run's process-wide numerics switches: TF32 for CUDA fp32 matmuls and deterministic
// algorithms. LibTorch keeps both in global state, so a guard turns on what a run asks for, for
// that run's lifetime, and restores what was there before. A switch left off leaves LibTorch's
// setting as it is (by default: no TF32 for matmuls, nondeterministic algorithms allowed), so
// a caller that turned one on for the whole process keeps it.
#pragma once

namespace rematlab {

struct NumericsSettings {
  bool tf32 = false;
  bool deterministic = false;
};

class ScopedNumerics {
 public:
  // Deterministic mode also sets CUBLAS_WORKSPACE_CONFIG=:4096:8 when it is unset: cuBLAS is
  // deterministic only with a fixed workspace, and LibTorch refuses its matmuls otherwise. The
  // variable is read when cuBLAS first runs in the process, so the guard must exist before any
  // CUDA work.
  explicit ScopedNumerics(NumericsSettings settings);
  ~ScopedNumerics();
  ScopedNumerics(const ScopedNumerics&) = delete;
  ScopedNumerics& operator=(const ScopedNumerics&) = delete;

 private:
  NumericsSettings requested_;
  bool cublas_tf32_ = false;
  bool cudnn_tf32_ = false;
  bool deterministic_ = false;
  bool deterministic_warn_only_ = false;
};

}  // namespace rematlab
