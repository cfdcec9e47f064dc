// JSON that comes from outside the program (spec files, the runs database, other processes),
// parsed with a depth limit, and JSON values quoted briefly in messages. nlohmann's parser is
// iterative, but dumping, comparing and converting a value recurse once per level: a file
// nested 50,000 deep overflowed the stack in the conversion, and quoting a value in an error
// message could print megabytes.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace rematlab {

// No RematLab document comes near it; a sweep spec is four levels deep.
inline constexpr int kMaxJsonDepth = 64;

// Whether `text` nests arrays and objects at most `limit` deep (a quick scan that skips
// strings; it does not check the rest of the syntax).
bool json_depth_within(const std::string& text, int limit = kMaxJsonDepth);

// Parses `text`; throws std::invalid_argument with a one-line reason: nested too deep, a key
// given twice in one object (nlohmann would keep the last silently), or the parser's message.
nlohmann::json parse_json(const std::string& text);
nlohmann::ordered_json parse_ordered_json(const std::string& text);
// As above, but a discarded value (null) instead of an exception.
nlohmann::json parse_json_or_null(const std::string& text);

// `value` as JSON text for a message, cut to about `limit` characters with "…".
std::string brief_json(const nlohmann::json& value, std::size_t limit = 60);
std::string brief_json(const nlohmann::ordered_json& value, std::size_t limit = 60);

}  // namespace rematlab
