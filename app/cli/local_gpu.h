// `layout --gpu local`: this machine's device described as the layout planner's GPU kind.
#pragma once

#include <string>

#include "common/precision.h"
#include "estimate/architecture.h"
#include "layout/gpu_catalog.h"

namespace rematlab::cli {

// "cuda" where LibTorch sees a CUDA device, else "cpu".
std::string default_local_device();

// The device's memory (a CUDA device's total, or the machine's physical memory for the CPU,
// which then has no host memory beside it to offload into), and its matmul peak in
// `precision`: `given_peak` when positive, else the one `peak --save` kept in the runs
// database at `db` (empty: the usual one, passed over when it cannot be read) for this host,
// device and thread count, else measured now (a few seconds; not kept: planning never writes
// the database). A kept peak no device has (under 1e9 FLOP/s) is refused naming --db. CUDA devices
// in the machine are one node; the CPU is one device. Measured too unless given: the memory
// bandwidth of element-wise work, and the matmul efficiency at `arch`'s shapes
// (layout/local_device_probe.h). Links are not measured: a PCIe card's defaults, said in the
// description. Throws InvalidInput("--device", …) for a device not present.
struct LocalMeasures {
  double peak = 0.0;  // given, or 0
  bool bandwidth_given = false;
  bool efficiency_given = false;
};
layout::GpuKind local_gpu_kind(const std::string& device, Precision precision,
                               const std::string& db, const estimate::Architecture& arch,
                               const LocalMeasures& given);

}  // namespace rematlab::cli
