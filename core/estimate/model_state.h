// Bytes of the model states (weights, master copies, gradients, optimizer moments): what a
// step needs before a single activation. The layout is the usual mixed-precision one
// (Rajbhandari et al., ZeRO): 16-bit weights and gradients with an fp32 master copy.
#pragma once

#include <cstdint>
#include <string>

#include "common/precision.h"

namespace rematlab::estimate {

enum class Optimizer {
  kAdamW,  // two fp32 moments per parameter
  kSgd,    // plain SGD: no state (momentum would add one fp32 value per parameter)
};
std::string to_string(Optimizer optimizer);
Optimizer parse_optimizer(const std::string& text);  // throws InvalidInput("--optimizer", …)

struct ModelStateBytes {
  int64_t weights = 0;    // in the training precision
  int64_t master = 0;     // fp32 copy kept by the optimizer under bf16/fp16; 0 under fp32
  int64_t gradients = 0;  // in the training precision
  int64_t optimizer = 0;  // AdamW's moments (fp32)
  int64_t total() const { return weights + master + gradients + optimizer; }
};

int64_t bytes_per_value(Precision precision);  // 4 for fp32, 2 for bf16 and fp16
ModelStateBytes model_state_bytes(int64_t params, Precision precision, Optimizer optimizer);

}  // namespace rematlab::estimate
