#include "store/peak_flops_registry.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "common/process_identity.h"
#include "common/utc_time.h"
#include "runtime/device.h"
#include "runtime/numerics.h"
#include "runtime/peak_flops.h"
#include "runtime/runtime_info.h"

namespace rematlab {
namespace {

std::string describe(const PeakFlopsRecord& peak) {
  return "measured " + peak.measured + ", " + peak.method;
}

}  // namespace

PeakFlopsRecord peak_flops_key(const RunConfig& config) {
  PeakFlopsRecord key;
  key.host = current_process().host;
  const c10::Device device = parse_device(config.device);
  key.device = describe_device(device);
  key.precision = config.precision;
  key.tf32 = config.tf32 && device.is_cuda();
  key.threads = config.threads > 0 ? config.threads : at::get_num_threads();
  return key;
}

PeakFlopsRecord measure_peak_flops_record(const RunConfig& config, int repeats) {
  PeakFlopsRecord peak = peak_flops_key(config);
  set_intra_op_threads(config.threads);
  // The run's own numerics: with TF32 on, its fp32 matmuls run on tensor cores.
  const ScopedNumerics numerics({peak.tf32, false});
  const PeakFlopsProbe probe =
      measure_peak_flops(parse_device(config.device), config.precision, /*n=*/0, repeats);
  peak.flops = probe.flops;
  peak.measured = utc_now();
  peak.method = "best of " + std::to_string(probe.repeats) + " " + std::to_string(probe.n) + "x" +
                std::to_string(probe.n) + (peak.tf32 ? " TF32" : "") + " matmuls on " +
                std::to_string(peak.threads) + " thread(s)";
  return peak;
}

bool plausible_peak_flops(double flops) {
  return std::isfinite(flops) && flops > 0.0 && flops < 1e20;  // 100 EFLOP/s: no one device
}

void resolve_peak_flops(RunConfig& config, RunStore* store) {
  if (config.peak_flops > 0.0) {
    if (config.peak_flops_source.empty()) config.peak_flops_source = "given (--peak-flops)";
    return;
  }
  const PeakFlopsRecord key = peak_flops_key(config);
  bool replacing = false;
  if (store) {
    if (auto kept = store->peak_flops(key)) {
      // A value no matmul gives (edited, damaged) is measured again and replaced.
      if (plausible_peak_flops(kept->flops)) {
        config.peak_flops = kept->flops;
        config.peak_flops_source = "runs database: " + describe(*kept);
        return;
      }
      replacing = true;
    }
  }
  const PeakFlopsRecord measured = measure_peak_flops_record(config);
  config.peak_flops = measured.flops;
  if (store && !store->read_only()) {
    store->save_peak_flops(measured);
    config.peak_flops_source =
        "runs database: " + describe(measured) +
        (replacing ? " (replacing a kept value that was not a peak)" : " (first run here)");
  } else {
    config.peak_flops_source = describe(measured) + " before this run (not kept: " +
                               (store ? "the database is open read-only)" : "no runs database)");
  }
}

}  // namespace rematlab
