#include "common/precision.h"

#include "common/errors.h"

namespace rematlab {

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "fp32";
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "bf16") return Precision::kBf16;
  if (text == "fp16") return Precision::kFp16;
  throw InvalidInput("--precision", "unknown precision '" + text + "' (use fp32, bf16 or fp16)");
}

}  // namespace rematlab
