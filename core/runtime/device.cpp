#include "runtime/device.h"

#include <torch/cuda.h>
#include <unistd.h>

#include <fstream>

#include "common/errors.h"
#include "memory/device_memory.h"

namespace rematlab {
namespace {

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
  }
  return "unknown CPU";
}

}  // namespace

c10::Device parse_device(const std::string& text) {
  const bool cuda = text == "cuda" || text.rfind("cuda:", 0) == 0;
  if (text != "cpu" && !cuda) {
    throw InvalidInput("--device", "unknown device '" + text + "' (use cpu, cuda or cuda:N)");
  }
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (!torch::cuda::is_available()) {
    throw InvalidInput("--device", "'" + text + "' requested but no CUDA device is available");
  }
  int index = 0;
  if (text.size() > 5) {
    std::size_t used = 0;
    try {
      index = std::stoi(text.substr(5), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() - 5 || index < 0) {
      throw InvalidInput("--device", "'" + text + "' has no valid device index");
    }
  }
  if (index >= static_cast<int>(torch::cuda::device_count())) {
    throw InvalidInput("--device", "'" + text + "': only " +
                                       std::to_string(torch::cuda::device_count()) +
                                       " CUDA device(s) present");
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

int64_t device_memory_bytes(const c10::Device& device) {
  if (device.is_cuda()) return device_memory::total_bytes(device);
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

std::string describe_device(const c10::Device& device) {
  if (device.is_cuda()) return "cuda: " + device_memory::cuda_device_name(device);
  return "cpu: " + cpu_model_name();
}

}  // namespace rematlab
