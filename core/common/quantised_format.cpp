#include "common/quantised_format.h"

namespace rematlab {

int64_t quantised_bytes(int64_t rows, int64_t values, QuantisedFormat format) {
  if (format == QuantisedFormat::kInt8) return values + 4 * rows;
  const int64_t blocks = (values + kNf4BlockSize - 1) / kNf4BlockSize;
  return blocks * kNf4BlockSize / 2 + 4 * blocks;  // the last block padded to its size
}

}  // namespace rematlab
