// Floating-point values in JSON, exactly. JSON has no NaN or infinity, and nlohmann writes them
// as null, which reads back as 0 or as "missing": a diverged run would show loss 0. RematLab
// writes them as the strings "nan", "inf" and "-inf" (the words its CSV uses too) and reads
// those back, so every double survives the database and the reports bit for bit.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rematlab {

nlohmann::json json_number(double value);
// A number, or one of the strings above; null (what older databases hold for a non-finite
// value) reads as NaN. Anything else throws std::invalid_argument.
double number_from_json(const nlohmann::json& value);
// The same for a figure read back from a record, where anything else (a hand-edited "x", an
// array) is unknown: NaN, not an error that would hide every other run of a list.
double recorded_number(const nlohmann::json& value);

// "nan", "inf", "-inf", or the shortest text that reads back as exactly `value`.
std::string number_text(double value);

// Text for files and the terminal, with invalid UTF-8 replaced rather than throwing: a path
// that is not UTF-8 must never lose a run's result when it is printed.
std::string dump_json(const nlohmann::json& value, int indent = -1);

}  // namespace rematlab
