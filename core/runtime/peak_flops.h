// The device's matmul rate, measured: the denominator of MFU. A short square-matmul probe in the
// run's precision on the run's device (CPU or CUDA), best of a few repeats.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <functional>

#include "common/precision.h"

namespace at {
class Tensor;
}

namespace rematlab {

// The fastest of `repeats` calls of `work`, in seconds, each waited for on `device`: the timing
// every probe of the device shares (these, the runtime report's fp32 rate, the layout planner's
// probes of the local device).
double fastest_s(const std::function<void()>& work, const c10::Device& device, int repeats);
// The fastest of `repeats` products a·b.
double fastest_product_s(const at::Tensor& a, const at::Tensor& b, const c10::Device& device,
                         int repeats);

// The dtype a probe in `precision` computes in.
at::ScalarType probe_dtype(Precision precision);

// A probe's operand of `rows` × `columns`: fixed values, not random ones, as a probe may run
// between a run's seeding and its first step and must not move the generator dropout replays
// from.
at::Tensor probe_operand(const at::TensorOptions& options, int64_t rows, int64_t columns);

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
