#include "common/decimal_text.h"

#include <charconv>

namespace rematlab {

std::size_t read_decimal_prefix(const std::string& text, double& value) {
  double read = 0.0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), read);
  if (error != std::errc()) return 0;
  value = read;
  return static_cast<std::size_t>(end - text.data());
}

}  // namespace rematlab
