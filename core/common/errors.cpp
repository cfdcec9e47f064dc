#include "common/errors.h"

#include <utility>

namespace rematlab {

InvalidInput::InvalidInput(std::string field, Wording reason)
    : std::runtime_error(field + ": " + reason.command_line()) {
  std::string setting = setting_named_by(field);
  std::string text = reason.command_line();
  said_ = std::make_shared<const Said>(
      Said{std::move(field), std::move(setting), std::move(reason), false, std::move(text)});
}

InvalidInput::InvalidInput(std::string field, std::string setting, Wording reason)
    : std::runtime_error(field + ": " + flag_of(setting) + " " + reason.command_line()) {
  std::string text = flag_of(setting) + " " + reason.command_line();
  said_ = std::make_shared<const Said>(
      Said{std::move(field), std::move(setting), std::move(reason), true, std::move(text)});
}

Wording InvalidInput::words() const {
  const Said& said = *said_;
  Wording whole = said.field.rfind("--", 0) == 0 ? rematlab::setting(setting_named_by(said.field))
                                                 : Wording(said.field);
  whole += ": ";
  if (said.setting_said_first) whole += rematlab::setting(said.setting) + " ";
  return whole + said.reason;
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
