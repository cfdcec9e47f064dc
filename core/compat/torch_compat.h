// The one place where differences between LibTorch versions are absorbed. Supported: LibTorch
// 2.x (the pinned PyPI wheel, any official 2.x zip) and Debian's libtorch-dev 1.13 (CPU only).
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <string>

namespace rematlab::compat {

constexpr bool kTorchAtLeast_2_4 =
    TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4);

// Autocast state is per device type; LibTorch 2.4 unified the CPU/CUDA-specific calls.
inline bool autocast_enabled(at::DeviceType type) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(type);
#else
  return type == at::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

inline void set_autocast_enabled(at::DeviceType type, bool enabled) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(type, enabled);
#else
  if (type == at::kCPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

inline at::ScalarType autocast_dtype(at::DeviceType type) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::get_autocast_dtype(type);
#else
  return type == at::kCPU ? at::autocast::get_autocast_cpu_dtype()
                          : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_autocast_dtype(at::DeviceType type, at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(type, dtype);
#else
  if (type == at::kCPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

inline std::string torch_version() { return TORCH_VERSION; }

}  // namespace rematlab::compat
