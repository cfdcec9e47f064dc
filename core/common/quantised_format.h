// The weight-only formats a frozen base can be stored in (--base-precision int8|nf4) and the
// bytes they take: the one place the estimator's count and the engine's storage agree on.
#pragma once

#include <cstdint>

namespace rematlab {

enum class QuantisedFormat {
  kInt8,  // one code a value, one fp32 scale a row
  kNf4,   // 4-bit NormalFloat: two codes a byte, one fp32 absmax a block
};

// Values per nf4 block, each block with its own absmax.
inline constexpr int64_t kNf4BlockSize = 64;

// The bytes a weight of `values` in `rows` rows takes in `format` (codes and scales).
int64_t quantised_bytes(int64_t rows, int64_t values, QuantisedFormat format);

}  // namespace rematlab
