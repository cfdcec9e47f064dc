#include "common/byte_size.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "common/decimal_text.h"
#include "common/errors.h"

namespace rematlab {

int64_t parse_byte_size(const std::string& text, const std::string& field) {
  static const std::pair<const char*, double> kUnits[] = {{"TiB", 1099511627776.0},
                                                          {"GiB", 1073741824.0},
                                                          {"MiB", 1048576.0},
                                                          {"KiB", 1024.0},
                                                          {"TB", 1e12},
                                                          {"GB", 1e9},
                                                          {"MB", 1e6},
                                                          {"KB", 1e3},
                                                          {"B", 1.0}};
  double number = 0.0;
  const std::size_t consumed = read_decimal_prefix(text, number);
  if (consumed == 0) {
    throw InvalidInput(field, "'" + text + "' is not a size (use bytes or e.g. 512MiB, 2GiB)");
  }
  std::string unit = text.substr(consumed);
  double scale = unit.empty() ? 1.0 : 0.0;
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) scale = factor;
  }
  if (scale == 0.0) {
    throw InvalidInput(field,
                       "unknown unit '" + unit + "' in '" + text + "' (use B, KiB, MiB, GiB, TiB)");
  }
  const double bytes = number * scale;
  if (!std::isfinite(bytes) || bytes < 1.0 || bytes > 9.0e18) {
    throw InvalidInput(field, "'" + text + "' must be a positive size");
  }
  return static_cast<int64_t>(std::llround(bytes));
}

std::string byte_size_text(int64_t bytes) {
  static const std::pair<const char*, int64_t> kUnits[] = {
      {"TiB", int64_t{1} << 40}, {"GiB", int64_t{1} << 30},
      {"MiB", int64_t{1} << 20}, {"KiB", int64_t{1} << 10},
      {"TB", 1'000'000'000'000}, {"GB", 1'000'000'000},
      {"MB", 1'000'000},         {"KB", 1'000}};
  for (const auto& [name, factor] : kUnits) {
    if (bytes != 0 && bytes % factor == 0) return std::to_string(bytes / factor) + name;
  }
  return std::to_string(bytes);
}

std::string format_bytes(int64_t bytes) {
  static const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::fabs(value) >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[32];
  if (unit == 0) {
    std::snprintf(buffer, sizeof buffer, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buffer, sizeof buffer, "%.2f %s", value, kNames[unit]);
  }
  return buffer;
}

}  // namespace rematlab
