// What the engine runs on: LibTorch version, the BLAS it really uses, thread counts, devices.
// A LibTorch on a reference BLAS is ~30× slower, so this is measured, not only read.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rematlab {

struct RuntimeInfo {
  std::string torch_version;
  std::string blas_build;                   // BLAS_INFO of LibTorch's build configuration
  std::vector<std::string> blas_libraries;  // BLAS/LAPACK shared objects loaded in the process
  int intra_op_threads = 0;
  int inter_op_threads = 0;
  std::string cpu_capability;
  bool cuda_available = false;
  int cuda_devices = 0;
  double matmul_gflops = 0.0;  // fp32 1024×1024 matmul on the CPU; 0 unless measured
};

RuntimeInfo probe_runtime(bool measure_matmul);
// LibTorch's intra-op threads (and so its BLAS's), process-wide; 0 or less leaves them as they are.
void set_intra_op_threads(int threads);
nlohmann::json to_json(const RuntimeInfo& info);
std::string to_text(const RuntimeInfo& info);

}  // namespace rematlab
