// This machine's device measured for the layout planner (`layout --gpu local`): the figures the
// GPU catalogue takes from datasheets and stated defaults for the other kinds.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

#include "common/precision.h"
#include "estimate/architecture.h"

namespace rematlab::layout {

// Bytes/s of the element-wise work the planner times by memory bandwidth (elementwise_work.h),
// counted as it counts it: a norm (its input read, its output written), a residual add (two
// read, one written) and a GELU (one read, one written) over tensors beyond a CPU's caches
// (smaller where the device's memory is: within an eighth of it, 2 GiB at most), forward only
// (the planner takes backward as twice forward); the best of five passes. 0 where the device's
// memory is too small or unknown. Throws what LibTorch throws (out of memory).
double measure_elementwise_bandwidth(const c10::Device& device, Precision precision);

struct MatmulEfficiency {
  double share = 0.0;        // of the peak; 0 where not measured
  int64_t rows = 0;          // the tokens each product ran
  std::string not_measured;  // why, where share is 0
  std::string capped;        // where the share measured was outside (0.001, 1]: what was taken
};

// The share of `peak_flops` that one block's projections reach at the model's own shapes on one
// device, as the engine lays them out (queries, keys and values in one matrix, a gated MLP's
// gate and up in one; a mixture's experts each at the rows it receives when balanced): each
// projection's forward and both backward products for a sequence's tokens — fewer where, as a
// trial at 16 tokens says, the block would take over a second, or its rows would not fit within
// an eighth of the device's memory (2 GiB at most), but not under 256 (fewer rows are bound by
// memory, not arithmetic) — the best of three per product (once, for a block over half a
// second). Not measured (said why) where one matrix or 256 tokens' rows would not fit there, or
// a block at 256 tokens would take over 2 s. Attention's scores and the head are
// not probed: the planner applies the blocks' share to every FLOP. Throws what LibTorch throws.
MatmulEfficiency measure_matmul_efficiency(const estimate::Architecture& arch,
                                           const c10::Device& device, Precision precision,
                                           double peak_flops);

}  // namespace rematlab::layout
