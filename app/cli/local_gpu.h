// `layout --gpu local`: this machine's device described as the layout planner's GPU kind.
#pragma once

#include <string>

#include "common/precision.h"
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
// in the machine are one node; the CPU is one device. Links, memory bandwidth and the matmul
// efficiency are not measured: a PCIe card's defaults, said in the description. Throws
// InvalidInput("--device", …) for a device not present.
layout::GpuKind local_gpu_kind(const std::string& device, Precision precision,
                               const std::string& db, double given_peak);

}  // namespace rematlab::cli
