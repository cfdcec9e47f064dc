// The device's matmul rate, measured: the denominator of MFU. A short square-matmul probe in the
// run's precision on the run's device (CPU or CUDA), best of a few repeats.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

#include "common/precision.h"

namespace at {
class Tensor;
}

namespace rematlab {

// The fastest of `repeats` products a·b, in seconds, each waited for on `device`: the timing
// the probes below and the runtime report's fp32 rate share.
double fastest_product_s(const at::Tensor& a, const at::Tensor& b, const c10::Device& device,
                         int repeats);

struct PeakFlopsProbe {
  double flops = 0.0;  // FLOP/s, 2·n³ per product
  int64_t n = 0;       // matrix side
  int repeats = 0;
};

// n = 0 picks a side that keeps the probe short: 8192 on CUDA; on the CPU 1024, or less where
// one product of that side would take over 0.25 s (a dtype without a fast kernel). The best of
// `repeats` timed products is kept: a shared machine still leaves one clean window.
PeakFlopsProbe measure_peak_flops(const c10::Device& device, Precision precision, int64_t n = 0,
                                  int repeats = 10);

// Measured once per process for each device, precision and intra-op thread count, then reused:
// the fallback for runs without a runs database (see store/peak_flops_registry.h).
double cached_peak_flops(const c10::Device& device, Precision precision);

}  // namespace rematlab
