#include "common/errors.h"

#include <utility>

namespace rematlab {

InvalidInput::InvalidInput(std::string field, Wording reason)
    : std::runtime_error(field + ": " + reason.command_line()),
      field_(std::move(field)),
      setting_(setting_named_by(field_)),
      reason_(std::move(reason)),
      reason_text_(reason_.command_line()) {}

InvalidInput::InvalidInput(std::string field, std::string setting, Wording reason)
    : std::runtime_error(field + ": " + flag_of(setting) + " " + reason.command_line()),
      field_(std::move(field)),
      setting_(std::move(setting)),
      reason_(std::move(reason)),
      setting_said_first_(true),
      reason_text_(flag_of(setting_) + " " + reason_.command_line()) {}

Wording InvalidInput::words() const {
  Wording said = field_.rfind("--", 0) == 0 ? rematlab::setting(setting_) : Wording(field_);
  said += ": ";
  if (setting_said_first_) said += rematlab::setting(setting_) + " ";
  return said + reason_;
}

std::string setting_named_by(const std::string& field) {
  if (field.rfind("--", 0) == 0) {
    std::string key = field.substr(2);
    for (char& c : key) c = c == '-' ? '_' : c;
    return key;
  }
  const std::string spec = "spec: ";
  std::string path = field.rfind(spec, 0) == 0 ? field.substr(spec.size()) : field;
  const std::size_t index = path.rfind('[');
  if (!path.empty() && path.back() == ']' && index != std::string::npos) path.erase(index);
  if (path.find(' ') != std::string::npos) return {};
  const std::size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

}  // namespace rematlab
