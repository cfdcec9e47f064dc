// `peak`: the device's matmul FLOP/s, the peak MFU and HFU are taken against. With --save it
// becomes the peak every later run on this host, device, precision and thread count uses.
#include <iostream>
#include <memory>

#include "cli/cli_output.h"
#include "cli/commands.h"
#include "common/errors.h"
#include "common/posix_files.h"
#include "run/run_config.h"
#include "store/peak_flops_registry.h"
#include "store/run_store.h"

namespace rematlab::cli {
namespace {

struct PeakOptions {
  std::string device = "cpu";
  std::string precision = "fp32";
  int threads = 0;
  bool tf32 = false;
  int repeats = 7;
  bool save = false;
  std::string db = default_database_path();
  bool json = false;
};

nlohmann::json peak_json(const PeakFlopsRecord& peak) {
  return {{"host", peak.host},
          {"device", peak.device},
          {"precision", to_string(peak.precision)},
          {"threads", peak.threads},
          {"peak_flops", peak.flops},
          {"measured", peak.measured},
          {"method", peak.method}};
}

}  // namespace

Command add_peak_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "peak", "Measure the device's matmul FLOP/s (the peak MFU and HFU are taken against)");
  auto options = std::make_shared<PeakOptions>();
  command->add_option("--device", options->device, "cpu, cuda or cuda:N")->capture_default_str();
  command->add_option("--precision", options->precision, "fp32, bf16 or fp16")
      ->capture_default_str();
  command->add_flag("--tf32", options->tf32, "CUDA: fp32 matmuls on TF32 tensor cores");
  command->add_option("--threads", options->threads,
                      "Intra-op threads to measure with (default: LibTorch's)");
  command->add_option("--repeats", options->repeats, "Timed matmuls; the best is kept")
      ->capture_default_str();
  command->add_flag("--save", options->save,
                    "Keep it in the runs database: later runs here use it for MFU and HFU");
  command->add_option("--db", options->db, "Runs database")->capture_default_str();
  command->add_flag("--json", options->json, "Print one JSON object as the last line of stdout");
  return {command, [options]() {
            RunConfig config;
            config.device = options->device;
            config.precision = parse_precision(options->precision);
            config.threads = options->threads;
            config.tf32 = options->tf32;
            if (options->repeats < 1 || options->repeats > 1000) {
              throw InvalidInput("--repeats", "must be between 1 and 1000");
            }
            validate(config);  // device, threads
            // Opened (and checked) before the measurement, so a bad --db costs nothing.
            std::unique_ptr<RunStore> store;
            if (options->save) {
              store = std::make_unique<RunStore>(options->db);
            } else if (files::exists(options->db)) {
              store = std::make_unique<RunStore>(options->db, StoreAccess::kReadOnly, false);
            }
            const PeakFlopsRecord key = peak_flops_key(config);
            std::optional<PeakFlopsRecord> kept;
            if (store) kept = store->peak_flops(key);
            const PeakFlopsRecord measured = measure_peak_flops_record(config, options->repeats);
            if (options->save) store->save_peak_flops(measured);
            if (options->json) {
              nlohmann::json json = peak_json(measured);
              json["saved"] = options->save;
              json["kept_before"] = kept ? peak_json(*kept) : nlohmann::json(nullptr);
              print_json_line(json);
            } else {
              std::cout << "peak  " << format_number(measured.flops / 1e9, 1) << " GFLOP/s  ("
                        << to_string(config.precision) << ", " << measured.device << ", "
                        << measured.method << ")\n";
              if (kept) {
                std::cout << "kept  " << format_number(kept->flops / 1e9, 1)
                          << " GFLOP/s, measured " << kept->measured << " (in " << options->db
                          << ")" << (options->save ? ", now replaced" : "") << "\n";
              }
              if (options->save) std::cout << "saved in " << options->db << "\n";
            }
            return 0;
          }};
}

}  // namespace rematlab::cli
