#include "runtime/peak_flops.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "memory/device_memory.h"

namespace rematlab {

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

double fastest_product_s(const torch::Tensor& a, const torch::Tensor& b, const c10::Device& device,
                         int repeats) {
  return fastest_s([&] { torch::matmul(a, b); }, device, repeats);
}

at::ScalarType probe_dtype(Precision precision) {
  return precision == Precision::kFp32   ? at::kFloat
         : precision == Precision::kBf16 ? at::kBFloat16
                                         : at::kHalf;
}

torch::Tensor probe_operand(const torch::TensorOptions& options, int64_t rows, int64_t columns) {
  return torch::linspace(-1.0, 1.0, rows * columns, options).reshape({rows, columns});
}

namespace {

// The largest side up to `largest`, halving from it, whose one product takes a quarter of a
// second at most, judged from the best of three 256-side products (a product grows 8× a
// doubling). A CPU without a fast kernel for the dtype (bf16 and fp16 fall back to a plain loop
// on many: 30× slower) would otherwise spend 20 s and more on the probe's 1024-side products
// before a run's first step; a fast one (fp32 here: 0.06 s at 1024) keeps 1024 with room to
// spare, so the side does not follow the machine's load from one probe to the next.
int64_t probe_side_within(const torch::TensorOptions& options, int64_t largest) {
  constexpr int64_t kSmallest = 256;
  constexpr double kLongestProductS = 0.25;
  const torch::Tensor a = probe_operand(options, kSmallest, kSmallest);
  torch::matmul(a, a);  // first call: kernels chosen, threads started
  const double seconds = fastest_product_s(a, a, options.device(), 3);
  int64_t side = largest;
  while (side > kSmallest &&
         seconds * std::pow(static_cast<double>(side) / kSmallest, 3) > kLongestProductS) {
    side /= 2;
  }
  return side;
}

}  // namespace

PeakFlopsProbe measure_peak_flops(const c10::Device& device, Precision precision, int64_t n,
                                  int repeats) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(probe_dtype(precision)).device(device);
  if (n <= 0) n = device.is_cuda() ? 8192 : probe_side_within(options, 1024);
  const torch::Tensor a = probe_operand(options, n, n);
  const torch::Tensor b = a.flip(0).contiguous();
  // Warm-up for a fifth of a second, not one call: threads spun up, clocks raised, kernels
  // chosen; a single warm-up call left the CPU probe at half the rate a training run sees.
  torch::Tensor c;
  const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  do {
    c = torch::matmul(a, b);
    device_memory::synchronize(device);
  } while (std::chrono::steady_clock::now() < warm_until);
  PeakFlopsProbe probe;
  probe.n = n;
  probe.repeats = std::max(1, repeats);
  const double best = fastest_product_s(a, b, device, probe.repeats);
  probe.flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best;
  return probe;
}

double cached_peak_flops(const c10::Device& device, Precision precision) {
  static std::mutex mutex;
  static std::map<std::tuple<std::string, int, int>, double> cache;
  const auto key =
      std::make_tuple(device.str(), static_cast<int>(precision), at::get_num_threads());
  const std::lock_guard<std::mutex> lock(mutex);
  auto found = cache.find(key);
  if (found == cache.end())
    found = cache.emplace(key, measure_peak_flops(device, precision).flops).first;
  return found->second;
}

}  // namespace rematlab
