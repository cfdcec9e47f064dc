#include "runtime/runtime_info.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <link.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "compat/torch_compat.h"
#include "runtime/peak_flops.h"

namespace rematlab {
namespace {

std::string config_value(const std::string& config, const std::string& key) {
  const auto at = config.find(key + "=");
  if (at == std::string::npos) return "";
  const auto begin = at + key.size() + 1;
  return config.substr(begin, config.find_first_of(",\n", begin) - begin);
}

int collect_blas(struct dl_phdr_info* info, size_t, void* data) {
  const std::string name = info->dlpi_name ? info->dlpi_name : "";
  if (name.find("cublas") != std::string::npos) return 0;  // the GPU BLAS, not the CPU one
  for (const char* pattern : {"blas", "mkl", "lapack", "blis", "accelerate"}) {
    if (name.find(pattern) != std::string::npos) {
      char resolved[PATH_MAX];
      const bool ok = realpath(name.c_str(), resolved) != nullptr;
      std::string entry = name;
      if (ok && name != resolved) entry += " -> " + std::string(resolved);
      static_cast<std::vector<std::string>*>(data)->push_back(entry);
      break;
    }
  }
  return 0;
}

double measure_gflops() {
  torch::NoGradGuard no_grad;
  const int64_t n = 1024;
  const torch::Tensor a = torch::randn({n, n});
  const torch::Tensor b = torch::randn({n, n});
  torch::matmul(a, b);  // warm-up
  const double best = fastest_product_s(a, b, a.device(), 3);
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace

void set_intra_op_threads(int threads) {
  if (threads > 0) at::set_num_threads(threads);
}

RuntimeInfo probe_runtime(bool measure_matmul) {
  RuntimeInfo info;
  const std::string config = at::show_config();
  info.torch_version = compat::torch_version();
  info.blas_build = config_value(config, "BLAS_INFO");
  if (info.blas_build.empty()) info.blas_build = "unknown";
  dl_iterate_phdr(collect_blas, &info.blas_libraries);
  info.intra_op_threads = at::get_num_threads();
  info.inter_op_threads = at::get_num_interop_threads();
  const std::string capability = "CPU capability usage: ";
  if (const auto at = config.find(capability); at != std::string::npos) {
    info.cpu_capability =
        config.substr(at + capability.size(), config.find('\n', at) - at - capability.size());
  }
  info.cuda_available = torch::cuda::is_available();
  info.cuda_devices = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (measure_matmul) info.matmul_gflops = measure_gflops();
  return info;
}

nlohmann::json to_json(const RuntimeInfo& info) {
  return {{"torch_version", info.torch_version},       {"blas_build", info.blas_build},
          {"blas_libraries", info.blas_libraries},     {"intra_op_threads", info.intra_op_threads},
          {"inter_op_threads", info.inter_op_threads}, {"cpu_capability", info.cpu_capability},
          {"cuda_available", info.cuda_available},     {"cuda_devices", info.cuda_devices},
          {"matmul_gflops", info.matmul_gflops}};
}

std::string to_text(const RuntimeInfo& info) {
  std::ostringstream out;
  out << "LibTorch        " << info.torch_version << "\n";
  out << "BLAS (build)    " << info.blas_build << "\n";
  out << "BLAS (loaded)   ";
  if (info.blas_libraries.empty()) {
    out << "none as a shared library (linked into LibTorch)\n";
  } else {
    for (std::size_t i = 0; i < info.blas_libraries.size(); ++i) {
      out << (i ? "                " : "") << info.blas_libraries[i] << "\n";
    }
  }
  out << "CPU capability  " << info.cpu_capability << "\n";
  out << "threads         " << info.intra_op_threads << " intra-op, " << info.inter_op_threads
      << " inter-op\n";
  out << "CUDA            "
      << (info.cuda_available ? std::to_string(info.cuda_devices) + " device(s)" : "not available")
      << "\n";
  if (info.matmul_gflops > 0.0) {
    char line[128];
    std::snprintf(line, sizeof line, "matmul          %.1f GFLOP/s (fp32 1024², CPU)%s\n",
                  info.matmul_gflops,
                  info.matmul_gflops < 10.0 ? "  <- slow: is LibTorch on a reference BLAS?" : "");
    out << line;
  }
  return out.str();
}

}  // namespace rematlab
