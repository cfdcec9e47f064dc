#include "common/decimal_text.h"

#include <charconv>

namespace rematlab {

std::size_t read_decimal_prefix(const std::string& text, double& value) {
  // As std::stod took them: leading blanks ("schedule:0=2, 0.5=5" splits to " 0.5") and a '+'.
  std::size_t start = text.find_first_not_of(" \t");
  if (start == std::string::npos) return 0;
  if (text[start] == '+') ++start;
  double read = 0.0;
  const auto [end, error] = std::from_chars(text.data() + start, text.data() + text.size(), read);
  if (error != std::errc()) return 0;
  value = read;
  return static_cast<std::size_t>(end - text.data());
}

std::string decimal_text(double value) {
  char buffer[32];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return error == std::errc() ? std::string(buffer, end) : std::string();
}

}  // namespace rematlab
