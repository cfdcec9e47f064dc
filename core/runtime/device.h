// The compute device a run names ("cpu", "cuda", "cuda:N"), checked against what is present, and
// what that device is (to key measurements by it). LibTorch types: this header is for the
// engine, not for the window, which handles device names as text.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace rematlab {

c10::Device parse_device(const std::string& text);  // throws InvalidInput("--device", …)

// "cpu: <model name>" or "cuda: <product name>".
std::string describe_device(const c10::Device& device);

// The memory a run on `device` can use at most: the machine's physical memory for the CPU, the
// device's total memory for CUDA; 0 when unknown.
int64_t device_memory_bytes(const c10::Device& device);

}  // namespace rematlab
