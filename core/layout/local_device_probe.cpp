#include "layout/local_device_probe.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "common/byte_size.h"
#include "memory/device_memory.h"
#include "runtime/device.h"

namespace rematlab::layout {
namespace {

at::ScalarType dtype_of(Precision precision) {
  return precision == Precision::kFp32   ? at::kFloat
         : precision == Precision::kBf16 ? at::kBFloat16
                                         : at::kHalf;
}

// Fixed values, not random ones: planning must not move a generator anyone seeded.
torch::Tensor filled(int64_t rows, int64_t columns, const torch::TensorOptions& options) {
  return torch::linspace(-1.0, 1.0, rows * columns, options).reshape({rows, columns});
}

// The fastest of `repeats` calls of `work`, each waited for on `device`.
double fastest_s(const std::function<void()>& work, const c10::Device& device, int repeats) {
  double best = 1e30;
  for (int repeat = 0; repeat < repeats; ++repeat) {
    const auto start = std::chrono::steady_clock::now();
    work();
    device_memory::synchronize(device);
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

struct Projection {
  int64_t in = 0;
  int64_t out = 0;
  int64_t rows_per_token_num = 1;  // the rows it runs: tokens × num / den
  int64_t rows_per_token_den = 1;
};

// One block's projections as one device runs them (no tensor ranks).
std::vector<Projection> block_projections(const estimate::Architecture& arch) {
  const int64_t h = arch.d_model;
  std::vector<Projection> projections = {
      {h, arch.q_dim()}, {h, arch.kv_dim()}, {h, arch.kv_dim()}, {arch.q_dim(), h}};
  auto mlp = [&](int64_t width, int64_t num, int64_t den) {
    for (int i = 0; i < (arch.gated_mlp ? 2 : 1); ++i) projections.push_back({h, width, num, den});
    projections.push_back({width, h, num, den});
  };
  if (arch.moe.enabled()) {
    // One expert at its balanced share of the k·tokens rows: the experts all run so.
    mlp(arch.expert_hidden > 0 ? arch.expert_hidden : arch.mlp_hidden, arch.moe.experts_per_token,
        arch.moe.experts);
    if (arch.moe.shared_expert_hidden > 0) mlp(arch.moe.shared_expert_hidden, 1, 1);
  } else {
    mlp(arch.mlp_hidden, 1, 1);
  }
  return projections;
}

}  // namespace

double measure_elementwise_bandwidth(const c10::Device& device, Precision precision) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(dtype_of(precision)).device(device);
  // 64 MiB a tensor in fp32 on a CPU (beyond its caches, as a step's activations are); 512 MiB
  // on a GPU.
  const int64_t width = 4096;
  const int64_t rows = device.is_cuda() ? 32768 : 4096;
  const torch::Tensor x = filled(rows, width, options);
  const torch::Tensor weight = torch::ones({width}, options);
  const torch::Tensor bias = torch::zeros({width}, options);
  auto pass = [&] {
    const torch::Tensor normed = torch::layer_norm(x, {width}, weight, bias);
    const torch::Tensor summed = normed + x;
    torch::gelu(summed);
  };
  pass();  // kernels chosen, pages touched
  const double seconds = fastest_s(pass, device, 5);
  const double values = static_cast<double>(rows * width) * (2.0 + 3.0 + 2.0);
  return values * static_cast<double>(x.element_size()) / seconds;
}

MatmulEfficiency measure_matmul_efficiency(const estimate::Architecture& arch,
                                           const c10::Device& device, Precision precision,
                                           double peak_flops) {
  torch::NoGradGuard no_grad;
  MatmulEfficiency result;
  const std::vector<Projection> projections = block_projections(arch);
  const auto options = torch::TensorOptions().dtype(dtype_of(precision)).device(device);
  const auto element = static_cast<int64_t>(c10::elementSize(dtype_of(precision)));
  int64_t weight_bytes = 0;
  double flops_per_token = 0.0;
  for (const Projection& p : projections) {
    weight_bytes += p.in * p.out * element;
    flops_per_token += 6.0 * static_cast<double>(p.in * p.out) *
                       static_cast<double>(p.rows_per_token_num) /
                       static_cast<double>(p.rows_per_token_den);
  }
  const int64_t limit = std::min<int64_t>(int64_t{2} << 30, device_memory_bytes(device) / 8);
  if (weight_bytes > limit) {
    result.not_measured = "one block's matrices (" + format_bytes(weight_bytes) +
                          ") are too large to probe on this device";
    return result;
  }
  int64_t tokens = std::max<int64_t>(arch.seq_len, 16);
  while (tokens > 16 && flops_per_token * static_cast<double>(tokens) / peak_flops > 1.0) {
    tokens /= 2;
  }
  double flops = 0.0;
  double seconds = 0.0;
  for (const Projection& p : projections) {
    const int64_t rows = std::max<int64_t>(1, tokens * p.rows_per_token_num / p.rows_per_token_den);
    const torch::Tensor x = filled(rows, p.in, options);
    const torch::Tensor w = filled(p.out, p.in, options);
    const torch::Tensor dy = filled(rows, p.out, options);
    auto products = [&] {  // forward, and backward's input and weight gradients
      torch::matmul(x, w.t());
      torch::matmul(dy, w);
      torch::matmul(dy.t(), x);
    };
    products();
    seconds += fastest_s(products, device, 3);
    flops += 6.0 * static_cast<double>(rows * p.in * p.out);
  }
  result.rows = tokens;
  result.share = std::min(1.0, flops / seconds / peak_flops);
  return result;
}

}  // namespace rematlab::layout
