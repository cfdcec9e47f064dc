#include <ATen/Parallel.h>

#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "common/errors.h"
#include "runtime/peak_flops.h"
#include "train/run_config.h"

namespace rematlab::cli {
namespace {

struct PeakOptions {
  std::string device = "cpu";
  std::string precision = "fp32";
  int threads = 0;
  int64_t size = 0;
  bool json = false;
};

}  // namespace

Command add_peak_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "peak", "Measure the device's matmul FLOP/s (the peak MFU and HFU are taken against)");
  auto options = std::make_shared<PeakOptions>();
  command->add_option("--device", options->device, "cpu, cuda or cuda:N")->capture_default_str();
  command->add_option("--precision", options->precision, "fp32, bf16 or fp16")
      ->capture_default_str();
  command->add_option("--threads", options->threads, "Set the intra-op thread count first");
  command->add_option("--size", options->size, "Matrix side (default 1024 on CPU, 8192 on CUDA)");
  command->add_flag("--json", options->json, "Print one JSON object as the last line of stdout");
  return {command, [options]() {
            if (options->threads < 0) throw InvalidInput("--threads", "must not be negative");
            if (options->size < 0) throw InvalidInput("--size", "must not be negative");
            const c10::Device device = parse_device(options->device);
            const Precision precision = parse_precision(options->precision);
            if (options->threads > 0) at::set_num_threads(options->threads);
            const PeakFlopsProbe probe = measure_peak_flops(device, precision, options->size);
            const nlohmann::json json = {
                {"device", options->device},        {"precision", to_string(precision)},
                {"threads", at::get_num_threads()}, {"n", probe.n},
                {"repeats", probe.repeats},         {"peak_flops", probe.flops}};
            if (options->json) {
              print_json_line(json);
            } else {
              std::cout << "peak  " << format_number(probe.flops / 1e9, 1) << " GFLOP/s  ("
                        << to_string(precision) << " " << probe.n << "² matmul on "
                        << options->device << ", " << at::get_num_threads() << " threads, best of "
                        << probe.repeats << ")\n";
            }
            return 0;
          }};
}

}  // namespace rematlab::cli
