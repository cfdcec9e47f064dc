#include "layout/gpu_catalog.h"

#include "common/errors.h"

namespace rematlab::layout {
namespace {

constexpr double kT = 1e12;  // FLOP/s
constexpr double kG = 1e9;   // bytes/s
constexpr int64_t kGiB = int64_t{1} << 30;

// Datasheet figures: dense tensor-core BF16, FP32 (no TF32), HBM/GDDR bandwidth, NVLink per
// direction (half the bidirectional figure NVIDIA quotes); PCIe 4.0 x16 ≈ 25 GB/s and 5.0 ≈ 50
// GB/s usable per direction; one 200 Gb/s (A100 servers) or 400 Gb/s (H100 and later) NIC per GPU.
// The latencies are NCCL's own model's (gpu_catalog.h), PCIe's for the cards without NVLink
// between all GPUs (on_pcie); AMD's RCCL keeps the same model. The matmul efficiency is a stated
// default: for the A100 and H100 the value that brings the
// planner closest to the published runs of bench/published_runs.json (docs/layout.md shows the
// table); for the others a guess of the same kind, lower where the peak is harder to reach.
GpuKind on_pcie(GpuKind kind) {
  kind.intra_node_step_latency = kPcieStepLatency;
  return kind;
}

std::vector<GpuKind> make_catalog() {
  std::vector<GpuKind> kinds = {
      {"a100-40gb", "NVIDIA A100 SXM4 40GB", 40 * kGiB, 312 * kT, 19.5 * kT, 1555 * kG, 300 * kG,
       25 * kG, 25 * kG, 8, 1024 * kGiB, 0.65},
      {"a100-80gb", "NVIDIA A100 SXM4 80GB", 80 * kGiB, 312 * kT, 19.5 * kT, 2039 * kG, 300 * kG,
       25 * kG, 25 * kG, 8, 2048 * kGiB, 0.65},
      {"h100-sxm", "NVIDIA H100 SXM5 80GB", 80 * kGiB, 989 * kT, 67 * kT, 3350 * kG, 450 * kG,
       50 * kG, 50 * kG, 8, 2048 * kGiB, 0.65},
      on_pcie({"h100-pcie", "NVIDIA H100 PCIe 80GB", 80 * kGiB, 756 * kT, 51 * kT, 2000 * kG,
               50 * kG, 50 * kG, 50 * kG, 8, 1024 * kGiB, 0.65}),
      {"h200", "NVIDIA H200 SXM 141GB", 141 * kGiB, 989 * kT, 67 * kT, 4800 * kG, 450 * kG, 50 * kG,
       50 * kG, 8, 2048 * kGiB, 0.65},
      {"b200", "NVIDIA B200 SXM 180GB", 180 * kGiB, 2250 * kT, 75 * kT, 8000 * kG, 900 * kG,
       50 * kG, 50 * kG, 8, 2048 * kGiB, 0.6},
      on_pcie({"l40s", "NVIDIA L40S 48GB", 48 * kGiB, 362 * kT, 91.6 * kT, 864 * kG, 25 * kG,
               25 * kG, 25 * kG, 8, 1024 * kGiB, 0.6}),
      on_pcie({"rtx3090", "NVIDIA GeForce RTX 3090 24GB", 24 * kGiB, 71 * kT, 35.6 * kT, 936 * kG,
               25 * kG, 3 * kG, 25 * kG, 4, 256 * kGiB, 0.7}),
      on_pcie({"rtx4090", "NVIDIA GeForce RTX 4090 24GB", 24 * kGiB, 165 * kT, 82.6 * kT, 1008 * kG,
               25 * kG, 3 * kG, 25 * kG, 4, 256 * kGiB, 0.7}),
      {"mi300x", "AMD Instinct MI300X 192GB", 192 * kGiB, 1307 * kT, 163.4 * kT, 5300 * kG,
       448 * kG, 50 * kG, 50 * kG, 8, 2048 * kGiB, 0.45},
  };
  return kinds;
}

}  // namespace

const std::vector<GpuKind>& gpu_catalog() {
  static const std::vector<GpuKind> kCatalog = make_catalog();
  return kCatalog;
}

std::string gpu_names() {
  std::string names;
  for (const auto& kind : gpu_catalog()) names += (names.empty() ? "" : ", ") + kind.name;
  return names;
}

const GpuKind& gpu_kind(const std::string& name) {
  for (const auto& kind : gpu_catalog()) {
    if (kind.name == name) return kind;
  }
  throw InvalidInput("--gpu", "unknown GPU '" + name + "' (known: " + gpu_names() +
                                  "; or give --gpu-memory and --peak-flops for another)");
}

}  // namespace rematlab::layout
