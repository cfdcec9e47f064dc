#include "layout/local_device_probe.h"

#include <torch/torch.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "common/byte_size.h"
#include "layout/layout.h"
#include "runtime/device.h"
#include "runtime/peak_flops.h"

namespace rematlab::layout {
namespace {

struct Projection {
  int64_t in = 0;
  int64_t out = 0;
  int64_t count = 1;               // how many the block runs (a mixture's experts)
  int64_t rows_per_token_num = 1;  // the rows each runs: tokens × num / den
  int64_t rows_per_token_den = 1;
};

// One block's projections as RematLab's engine (and Megatron-LM) lays them out on one device:
// queries, keys and values in one matrix, the gated MLP's gate and up in one; a mixture's
// experts SwiGLU each, E of them at the balanced share of the k·tokens rows.
std::vector<Projection> block_projections(const estimate::Architecture& arch) {
  const int64_t h = arch.d_model;
  std::vector<Projection> projections = {{h, arch.q_dim() + 2 * arch.kv_dim()}, {arch.q_dim(), h}};
  if (arch.moe.enabled()) {
    const int64_t width = arch.expert_hidden > 0 ? arch.expert_hidden : arch.mlp_hidden;
    const int64_t experts = arch.moe.experts;
    projections.push_back({h, 2 * width, experts, arch.moe.experts_per_token, experts});
    projections.push_back({width, h, experts, arch.moe.experts_per_token, experts});
    if (arch.moe.shared_expert_hidden > 0) {
      projections.push_back({h, 2 * arch.moe.shared_expert_hidden});
      projections.push_back({arch.moe.shared_expert_hidden, h});
    }
  } else {
    projections.push_back({h, arch.gated_mlp ? 2 * arch.mlp_hidden : arch.mlp_hidden});
    projections.push_back({arch.mlp_hidden, h});
  }
  return projections;
}

int64_t rows_of(const Projection& p, int64_t tokens) {
  return std::max<int64_t>(1, tokens * p.rows_per_token_num / p.rows_per_token_den);
}

// The probes' memory at most: an eighth of the device, 2 GiB at most; 0 when unknown.
int64_t probe_memory_limit(const c10::Device& device) {
  return std::min<int64_t>(int64_t{2} << 30, device_memory_bytes(device) / 8);
}

// The block's projections at `tokens` tokens, each's forward and backward products the best of
// `repeats` (after one untimed), times how many the block runs: FLOPs and seconds.
std::pair<double, double> time_block(const std::vector<Projection>& projections, int64_t tokens,
                                     const torch::TensorOptions& options, int repeats) {
  double flops = 0.0;
  double seconds = 0.0;
  for (const Projection& p : projections) {
    const int64_t rows = rows_of(p, tokens);
    const torch::Tensor x = probe_operand(options, rows, p.in);
    const torch::Tensor w = probe_operand(options, p.out, p.in);
    const torch::Tensor dy = probe_operand(options, rows, p.out);
    auto products = [&] {  // forward, and backward's input and weight gradients
      torch::matmul(x, w.t());
      torch::matmul(dy, w);
      torch::matmul(dy.t(), x);
    };
    products();
    const auto count = static_cast<double>(p.count);
    seconds += count * fastest_s(products, options.device(), repeats);
    flops += count * 6.0 * static_cast<double>(rows * p.in * p.out);
  }
  return {flops, seconds};
}

}  // namespace

double measure_elementwise_bandwidth(const c10::Device& device, Precision precision) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(probe_dtype(precision)).device(device);
  // 64 MiB a tensor in fp32 on a CPU (beyond its caches, as a step's activations are), 512 MiB
  // on a GPU; five such tensors live at once, within the probes' memory.
  const int64_t width = 4096;
  const auto element = static_cast<int64_t>(c10::elementSize(probe_dtype(precision)));
  const int64_t limit = probe_memory_limit(device);
  const int64_t rows =
      std::min<int64_t>(device.is_cuda() ? 32768 : 4096, limit / (5 * width * element));
  if (rows < 64) return 0.0;
  const torch::Tensor x = probe_operand(options, rows, width);
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
  return values * static_cast<double>(element) / seconds;
}

MatmulEfficiency measure_matmul_efficiency(const estimate::Architecture& arch,
                                           const c10::Device& device, Precision precision,
                                           double peak_flops) {
  torch::NoGradGuard no_grad;
  MatmulEfficiency result;
  const std::vector<Projection> projections = block_projections(arch);
  const auto options = torch::TensorOptions().dtype(probe_dtype(precision)).device(device);
  const auto element = static_cast<int64_t>(c10::elementSize(probe_dtype(precision)));
  const int64_t limit = probe_memory_limit(device);
  if (limit <= 0) {
    result.not_measured = "the device's memory is not known";
    return result;
  }
  // One projection lives at a time: its weight and its weight gradient, its input, output and
  // their gradients.
  int64_t largest_weight = 0;
  int64_t widest = 0;
  for (const Projection& p : projections) {
    largest_weight = std::max(largest_weight, 2 * p.in * p.out * element);
    widest = std::max(widest, 2 * (p.in + p.out) * element);
  }
  constexpr int64_t kTrialTokens = 16;
  const int64_t most_rows = largest_weight < limit ? (limit - largest_weight) / widest : 0;
  if (most_rows < kTrialTokens) {
    result.not_measured = "one block's largest matrix (" + format_bytes(largest_weight / 2) +
                          ") is too large to probe on this device";
    return result;
  }
  // A trial at 16 tokens sizes the probe: as many tokens as a sequence has, fewer where the
  // block would take over a second or its rows over the rest of the memory, but never under 256
  // (fewer rows are bound by memory, not the arithmetic the planner times by the share), unless
  // the sequence is shorter. A device too slow for a block at that size keeps the default.
  const double trial_s = time_block(projections, kTrialTokens, options, 1).second;
  auto estimated_s = [&](int64_t tokens) {
    return trial_s * static_cast<double>(tokens) / static_cast<double>(kTrialTokens);
  };
  auto rows_fit = [&](int64_t tokens) {
    for (const Projection& p : projections) {
      if (rows_of(p, tokens) > most_rows) return false;
    }
    return true;
  };
  constexpr int64_t kFewestTokens = 256;
  constexpr int kLongestBlockS = 2;
  int64_t tokens = std::max(kTrialTokens, std::min(kFewestTokens, arch.seq_len));
  if (!rows_fit(tokens)) {
    result.not_measured = "one block's rows at " + std::to_string(tokens) +
                          " tokens are too large to probe on this device";
    return result;
  }
  if (estimated_s(tokens) > kLongestBlockS) {
    result.not_measured = "one block at " + std::to_string(tokens) + " tokens would take over " +
                          std::to_string(kLongestBlockS) + " s on this device";
    return result;
  }
  while (tokens * 2 <= arch.seq_len && estimated_s(tokens * 2) <= 1.0 && rows_fit(tokens * 2)) {
    tokens *= 2;
  }
  // A slow block is timed once (after one untimed pass), a quick one the best of three.
  const auto [flops, seconds] =
      time_block(projections, tokens, options, estimated_s(tokens) > 0.5 ? 1 : 3);
  result.rows = tokens;
  result.share = flops / seconds / peak_flops;
  if (result.share > 1.0) {
    result.share = 1.0;
    result.capped = "above the peak: capped at 1";
  } else if (result.share < LayoutRequest::kMinMatmulEfficiency) {
    result.share = LayoutRequest::kMinMatmulEfficiency;
    result.capped = "under 0.001 of the peak given: taken as 0.001";
  }
  return result;
}

}  // namespace rematlab::layout
