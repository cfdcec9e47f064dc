// The one place where differences between LibTorch versions are absorbed. Supported: LibTorch
// 2.x (the pinned PyPI wheel, any official 2.x zip) and Debian's libtorch-dev 1.13 (CPU only).
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <array>
#include <optional>
#include <string>

namespace rematlab::compat {

constexpr bool kTorchAtLeast_2_4 = TORCH_VERSION_MAJOR > 2 ||
                                   (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4);

// The CUDA runtime and the caching allocator start with the first CUDA tensor; the allocator's
// counters asked for before that throw ("Invalid device argument: did you call init?"), which is
// how a run that measures its memory before it builds its model failed on the first GPU.
inline void initialize_cuda() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
  at::globalContext().lazyInitDevice(at::kCUDA);
#else
  at::globalContext().lazyInitCUDA();
#endif
}

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

// Fully sharded parameters free a flat buffer's memory between its uses while every view of it
// (the parameters, what autograd saved of them) keeps its shape; the storage object itself stays,
// so allocate_storage() gives every view its memory back. Freed, a view refuses to be read
// ("data is not allocated yet") rather than reading freed memory.
inline void free_storage(const at::Tensor& tensor) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, tensor.device()));
  storage->set_nbytes(0);
}

inline void allocate_storage(const at::Tensor& tensor, std::size_t nbytes) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

// The fused-attention kernel LibTorch's dispatcher picks for q, k, v (and an additive `mask`,
// when defined) as if they required grad (whether they do is one of its criteria, and it counts
// only with grad mode on, so the choice is asked for in grad mode): at::SDPBackend's value, or -1
// where this LibTorch cannot tell (< 2.4).
inline int sdpa_backend_with_grad(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  double dropout, bool causal, bool grouped,
                                  const at::Tensor& mask = {}) {
  const c10::AutoGradMode with_grad(true);
  const std::optional<at::Tensor> attn_mask =
      mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  return static_cast<int>(at::_fused_sdp_choice(
      q.detach().requires_grad_(true), k.detach().requires_grad_(true),
      v.detach().requires_grad_(true), attn_mask, dropout, causal, std::nullopt, grouped));
#elif TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR == 4
  (void)grouped;
  return static_cast<int>(
      at::_fused_sdp_choice(q.detach().requires_grad_(true), k.detach().requires_grad_(true),
                            v.detach().requires_grad_(true), attn_mask, dropout, causal));
#else
  (void)q, (void)k, (void)v, (void)dropout, (void)causal, (void)grouped, (void)attn_mask;
  return -1;
#endif
}

// at::SDPBackend::math as sdpa_backend_with_grad returns it: the explicit kernel the dispatcher
// falls back to (-2 where this LibTorch cannot tell, matching no answer).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
inline constexpr int kSdpaMathBackend = static_cast<int>(at::SDPBackend::math);
#else
inline constexpr int kSdpaMathBackend = -2;
#endif

// Fused attention, causal or under an additive `mask` (when defined). `grouped`: k and v have
// fewer heads than q, each shared by heads/kv_heads query heads (LibTorch 2.5 takes that
// natively; before, they are repeated).
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k,
                                               const at::Tensor& v, double dropout, bool causal,
                                               bool grouped, const at::Tensor& mask = {}) {
  const std::optional<at::Tensor> attn_mask =
      mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  return at::scaled_dot_product_attention(q, k, v, attn_mask, dropout, causal, std::nullopt,
                                          grouped);
#else
  if (!grouped) return at::scaled_dot_product_attention(q, k, v, attn_mask, dropout, causal);
  const int64_t groups = q.size(1) / k.size(1);
  return at::scaled_dot_product_attention(q, k.repeat_interleave(groups, 1),
                                          v.repeat_interleave(groups, 1), attn_mask, dropout,
                                          causal);
#endif
}

// Leaves only `backend` (an at::SDPBackend value; -1: change nothing) to the dispatcher while
// it lives, and restores the switches as they were.
class ScopedSdpaBackend {
 public:
  explicit ScopedSdpaBackend(int backend) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    if (backend < 0) return;
    auto& context = at::globalContext();
    saved_ = {context.userEnabledMathSDP(), context.userEnabledFlashSDP(),
              context.userEnabledMemEfficientSDP(), context.userEnabledCuDNNSDP()};
    active_ = true;
    context.setSDPUseMath(backend == static_cast<int>(at::SDPBackend::math));
    context.setSDPUseFlash(backend == static_cast<int>(at::SDPBackend::flash_attention));
    context.setSDPUseMemEfficient(backend == static_cast<int>(at::SDPBackend::efficient_attention));
    context.setSDPUseCuDNN(backend == static_cast<int>(at::SDPBackend::cudnn_attention));
#else
    (void)backend;
#endif
  }
  ~ScopedSdpaBackend() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    if (!active_) return;
    auto& context = at::globalContext();
    context.setSDPUseMath(saved_[0]);
    context.setSDPUseFlash(saved_[1]);
    context.setSDPUseMemEfficient(saved_[2]);
    context.setSDPUseCuDNN(saved_[3]);
#endif
  }
  ScopedSdpaBackend(const ScopedSdpaBackend&) = delete;
  ScopedSdpaBackend& operator=(const ScopedSdpaBackend&) = delete;

 private:
  std::array<bool, 4> saved_{};
  bool active_ = false;
};

}  // namespace rematlab::compat
