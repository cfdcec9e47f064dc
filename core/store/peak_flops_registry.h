// The peak FLOP/s a run's MFU and HFU are taken against. A probe measured inside each run read
// anywhere from 230 to 295 GFLOP/s on one quiet machine, and far less beside another process,
// so that `every:1` once showed a higher MFU than `none` while being slower. Instead the peak is
// measured once per host, device, precision and thread count, in a quiet moment, best of several
// repeats, kept in the runs database with its date and reused by every run; each run records
// which peak it used. A user can give one (--peak-flops) or measure again (`peak --save`).
#pragma once

#include <string>

#include "run/run_config.h"
#include "store/run_store.h"

namespace rematlab {

// The key of a measurement: host, device, precision and the intra-op threads the run will use.
PeakFlopsRecord peak_flops_key(const RunConfig& config);

// Measures the key's peak now (setting the thread count first): best of `repeats` matmuls.
PeakFlopsRecord measure_peak_flops_record(const RunConfig& config, int repeats = 7);

// Whether a kept figure can be a device's peak: finite, positive and below 1e20 FLOP/s.
bool plausible_peak_flops(double flops);

// Sets config.peak_flops and config.peak_flops_source: the one given, the one kept in `store`
// (may be null) when plausible, or one measured now, saved when `store` is writable (replacing
// an implausible one).
void resolve_peak_flops(RunConfig& config, RunStore* store);

}  // namespace rematlab
