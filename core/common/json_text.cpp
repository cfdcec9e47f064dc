#include "common/json_text.h"

#include <set>
#include <stdexcept>
#include <vector>

namespace rematlab {
namespace {

template <typename Json>
Json parse_within_depth(const std::string& text) {
  if (!json_depth_within(text)) {
    throw std::invalid_argument("nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  // nlohmann keeps the last of two equal keys; a spec that says "steps" twice is refused instead.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const auto find_duplicates = [&](int, typename Json::parse_event_t event, Json& parsed) {
    using Event = typename Json::parse_event_t;
    if (event == Event::object_start) open_objects.emplace_back();
    if (event == Event::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == Event::key && !open_objects.empty() &&
        !open_objects.back().insert(parsed.template get<std::string>()).second &&
        duplicate.empty()) {
      duplicate = parsed.template get<std::string>();
    }
    return true;
  };
  try {
    Json json = Json::parse(text, find_duplicates);
    if (!duplicate.empty()) {
      throw std::invalid_argument("the key \"" + duplicate + "\" appears twice in one object");
    }
    return json;
  } catch (const nlohmann::json::parse_error& error) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2: …": the sentence.
    const std::string what = error.what();
    const auto close = what.find("] ");
    throw std::invalid_argument(close == std::string::npos ? what : what.substr(close + 2));
  }
}

template <typename Json>
std::string brief(const Json& value, std::size_t limit) {
  // Deep values cannot be here (every parse above is limited); long ones are cut.
  std::string text =
      value.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
  if (text.size() <= limit) return text;
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // UTF-8
  return text.substr(0, cut) + "…";
}

}  // namespace

bool json_depth_within(const std::string& text, int limit) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

nlohmann::json parse_json(const std::string& text) {
  return parse_within_depth<nlohmann::json>(text);
}

nlohmann::ordered_json parse_ordered_json(const std::string& text) {
  return parse_within_depth<nlohmann::ordered_json>(text);
}

nlohmann::json parse_json_or_null(const std::string& text) {
  try {
    return parse_json(text);
  } catch (const std::invalid_argument&) {
    return nullptr;
  }
}

std::string brief_json(const nlohmann::json& value, std::size_t limit) {
  return brief(value, limit);
}

std::string brief_json(const nlohmann::ordered_json& value, std::size_t limit) {
  return brief(value, limit);
}

}  // namespace rematlab
