#include "cli/local_gpu.h"

#include <torch/cuda.h>

#include <memory>

#include "cli/cli_output.h"
#include "common/current_exception.h"
#include "common/errors.h"
#include "common/posix_files.h"
#include "layout/local_device_probe.h"
#include "run/run_config.h"
#include "runtime/device.h"
#include "store/peak_flops_registry.h"
#include "store/run_store.h"

namespace rematlab::cli {

std::string default_local_device() { return torch::cuda::is_available() ? "cuda" : "cpu"; }

layout::GpuKind local_gpu_kind(const std::string& device, Precision precision,
                               const std::string& db, const estimate::Architecture& arch,
                               const LocalMeasures& given) {
  const double given_peak = given.peak;
  const c10::Device parsed = parse_device(device);
  RunConfig config;
  config.device = device;
  config.precision = precision;
  config.peak_flops = given_peak;
  // Read only: planning never writes the runs database. The usual one, unreadable (an older
  // schema, a lock), is passed over: the peak is measured instead.
  const std::string path = db.empty() ? default_database_path() : db;
  std::unique_ptr<RunStore> store;
  if (given_peak <= 0.0 && files::exists(path)) {
    try {
      store = std::make_unique<RunStore>(path, StoreAccess::kReadOnly, false);
    } catch (const std::exception&) {
      if (!db.empty()) throw;
    }
  }
  resolve_peak_flops(config, store.get());
  if (given_peak <= 0.0 && config.peak_flops < 1e9) {
    throw InvalidInput("--db", "the matmul peak kept for this device (" + config.peak_flops_source +
                                   ") is below 1e9 FLOP/s: measure it again with `peak --save`, "
                                   "or give --peak-flops");
  }

  layout::GpuKind kind;
  kind.name = "local";
  kind.memory_bytes = device_memory_bytes(parsed);
  kind.peak_bf16 = kind.peak_fp32 = config.peak_flops;  // measured in the precision planned
  // The probes are a second's work; one that fails (the device out of memory) leaves its
  // default, said with the reason, rather than the plan.
  kind.memory_bandwidth = parsed.is_cuda() ? 1000e9 : 20e9;
  std::string bandwidth_source = "given";
  if (!given.bandwidth_given) {
    bandwidth_source = "the default " + format_number(kind.memory_bandwidth / 1e9, 0) + " GB/s: ";
    try {
      const double measured = layout::measure_elementwise_bandwidth(parsed, precision);
      if (measured > 0.0) {
        kind.memory_bandwidth = measured;
        bandwidth_source = "measured " + format_number(measured / 1e9, 1) + " GB/s";
      } else {
        bandwidth_source += "too little device memory known to probe";
      }
    } catch (...) {
      bandwidth_source += "its probe failed (" + describe_current_exception() + ")";
    }
  }
  kind.matmul_efficiency = 0.6;  // a PCIe card's default
  std::string efficiency_source = "given";
  if (!given.efficiency_given) {
    try {
      const layout::MatmulEfficiency measured =
          layout::measure_matmul_efficiency(arch, parsed, precision, config.peak_flops);
      if (measured.share > 0.0) {
        kind.matmul_efficiency = measured.share;
        efficiency_source = "measured " + format_number(measured.share, 2) +
                            " at the model's shapes (" + std::to_string(measured.rows) + " tokens" +
                            (measured.capped.empty() ? "" : "; " + measured.capped) + ")";
      } else {
        efficiency_source = "the default 0.6: " + measured.not_measured;
      }
    } catch (...) {
      efficiency_source =
          "the default 0.6: its probe failed (" + describe_current_exception() + ")";
    }
  }
  kind.description = describe_device(parsed) + "; matmul peak " + config.peak_flops_source +
                     "; element-wise memory bandwidth " + bandwidth_source +
                     "; matmul efficiency " + efficiency_source +
                     "; links not measured (defaults unless given)";
  kind.intra_node_bandwidth = kind.inter_node_bandwidth = kind.host_link_bandwidth = 25e9;
  kind.intra_node_step_latency = layout::kPcieStepLatency;  // a PCIe link's, as its bandwidth
  kind.overlaps_communication = parsed.is_cuda();
  kind.gpus_per_node = parsed.is_cuda() ? static_cast<int64_t>(torch::cuda::device_count()) : 1;
  // On the CPU the device's memory is the host's: offloading to it frees nothing.
  kind.host_memory_bytes = parsed.is_cuda() ? device_memory_bytes(c10::Device(c10::kCPU)) : 0;
  return kind;
}

}  // namespace rematlab::cli
