// `layout --gpu local`: this machine's device described as the layout planner's GPU kind.
#pragma once

#include <string>

#include "common/precision.h"
#include "layout/gpu_catalog.h"

namespace rematlab::cli {

// The device's memory (a CUDA device's total, or the machine's physical memory for the CPU),
// and its matmul peak in `precision`: the one `peak --save` kept in the runs database at `db`
// for this host, device and thread count, else measured now (a few seconds; not kept). CUDA
// devices in the machine are one node; the CPU is one device. Links, memory bandwidth and the
// matmul efficiency are not measured: a PCIe card's defaults, said in the description, until
// the flags give them. Throws InvalidInput("--device", …) for a device not present.
// "cuda" where LibTorch sees a CUDA device, else "cpu".
std::string default_local_device();

layout::GpuKind local_gpu_kind(const std::string& device, Precision precision,
                               const std::string& db);

}  // namespace rematlab::cli
