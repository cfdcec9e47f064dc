#include "common/json_numbers.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "common/json_text.h"

namespace rematlab {

nlohmann::json json_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return value;
}

double number_from_json(const nlohmann::json& value) {
  if (value.is_number()) return value.get<double>();
  if (value.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (text == "inf") return std::numeric_limits<double>::infinity();
    if (text == "-inf") return -std::numeric_limits<double>::infinity();
  }
  throw std::invalid_argument("not a number: " + brief_json(value));
}

double recorded_number(const nlohmann::json& value) {
  try {
    return number_from_json(value);
  } catch (const std::invalid_argument&) {
    return std::numeric_limits<double>::quiet_NaN();
  }
}

std::string number_text(double value) {
  const nlohmann::json json = json_number(value);
  return json.is_string() ? json.get<std::string>() : json.dump();
}

std::string dump_json(const nlohmann::json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace rematlab
