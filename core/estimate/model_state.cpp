#include "estimate/model_state.h"

#include "common/errors.h"

namespace rematlab::estimate {

std::string to_string(Optimizer optimizer) {
  return optimizer == Optimizer::kSgd ? "sgd" : "adamw";
}

Optimizer parse_optimizer(const std::string& text) {
  if (text == "adamw" || text == "adam") return Optimizer::kAdamW;
  if (text == "sgd") return Optimizer::kSgd;
  throw InvalidInput("--optimizer", "unknown optimizer '" + text + "' (use adamw or sgd)");
}

int64_t bytes_per_value(Precision precision) { return precision == Precision::kFp32 ? 4 : 2; }

ModelStateBytes model_state_bytes(int64_t params, Precision precision, Optimizer optimizer) {
  ModelStateBytes bytes;
  const int64_t value = bytes_per_value(precision);
  bytes.weights = params * value;
  bytes.gradients = params * value;
  // Updates smaller than a 16-bit weight's resolution would vanish, so the optimizer keeps fp32.
  bytes.master = precision == Precision::kFp32 ? 0 : params * 4;
  bytes.optimizer = optimizer == Optimizer::kAdamW ? params * 8 : 0;
  return bytes;
}

}  // namespace rematlab::estimate
