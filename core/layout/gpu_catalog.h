// The accelerators the layout planner knows, from their vendors' datasheets: memory, dense
// (no sparsity) peak FLOP/s per precision, memory bandwidth, the links a node of them usually
// has, and the share of peak a large matmul reaches on them (a stated default; `--efficiency`
// or a local measurement replaces it). docs/layout.md lists the sources.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/precision.h"

namespace rematlab::layout {

// NCCL's tuning model for a ring with its simple protocol (src/graph/tuning.cc) in the releases
// of the A100 era that most published runs used: newer releases raised the network step to
// 14 µs and count two steps per node, which the planner does not follow (docs/layout.md).
inline constexpr double kRingBaseLatency = 8.4e-6;     // s per collective
inline constexpr double kNvlinkStepLatency = 3.4e-6;   // s per ring step over NVLink
inline constexpr double kPcieStepLatency = 5.7e-6;     // s per ring step over PCIe
inline constexpr double kNetworkStepLatency = 9.6e-6;  // s per ring step between nodes

struct GpuKind {
  std::string name;                   // as --gpu takes it: "a100-40gb"
  std::string description;            // "NVIDIA A100 SXM4 40GB"
  int64_t memory_bytes = 0;           // what the device has, before the allocator's own reserve
  double peak_bf16 = 0.0;             // dense FLOP/s; fp16 is the same on every kind listed
  double peak_fp32 = 0.0;             // FP32 without TF32 (what fp32 training runs at)
  double memory_bandwidth = 0.0;      // bytes/s
  double intra_node_bandwidth = 0.0;  // bytes/s per GPU and direction (NVLink, or PCIe)
  double inter_node_bandwidth = 0.0;  // bytes/s per GPU and direction (its NIC share)
  double host_link_bandwidth = 0.0;   // bytes/s per GPU and direction to host memory
  int64_t gpus_per_node = 8;
  int64_t host_memory_bytes = 0;   // per node, as its usual server has it
  double matmul_efficiency = 0.0;  // share of peak a large matmul reaches (default)
  // Seconds a ring collective costs whatever its size: a fixed cost, then one per step of the
  // ring, over NVLink or PCIe inside a node or between nodes (the constants below).
  double collective_latency = kRingBaseLatency;
  double intra_node_step_latency = kNvlinkStepLatency;
  double inter_node_step_latency = kNetworkStepLatency;
  // Collectives run beside the compute (a GPU's copy engines and NICs); not on a CPU, whose
  // cores run both: there nothing the planner would overlap is hidden.
  bool overlaps_communication = true;

  double peak_flops(Precision precision) const {
    return precision == Precision::kFp32 ? peak_fp32 : peak_bf16;
  }
};

const std::vector<GpuKind>& gpu_catalog();
// Throws InvalidInput("--gpu", …) naming the known kinds for an unknown name.
const GpuKind& gpu_kind(const std::string& name);
std::string gpu_names();  // "a100-40gb, a100-80gb, …" for help texts and errors

}  // namespace rematlab::layout
