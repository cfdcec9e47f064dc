// The numeric precision a run trains in. A leaf: the trainer, the estimator and the FLOP/s
// probe all name it, and none of them should have to include another to do so.
#pragma once

#include <string>

namespace rematlab {

enum class Precision { kFp32, kBf16, kFp16 };

std::string to_string(Precision precision);
Precision parse_precision(const std::string& text);  // throws InvalidInput("--precision", …)

}  // namespace rematlab
