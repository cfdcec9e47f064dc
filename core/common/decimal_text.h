// Numbers as users type them ("1.5GiB", "schedule:0.5=2"), read with '.' as the decimal point
// whatever the C locale says: the window adopts the user's locale, and under a comma locale
// std::stod reads "1.5" as 1 followed by ".5".
#pragma once

#include <cstddef>
#include <string>

namespace rematlab {

// Reads a decimal number at the start of `text` (after blanks and a '+', as std::stod) into
// `value`; returns how many characters it took (0 when the text does not start with one;
// `value` is then unchanged).
std::size_t read_decimal_prefix(const std::string& text, double& value);

// The shortest text that reads back as exactly `value`, with '.' whatever the locale ("0",
// "0.5", "1e-07"); for finite values.
std::string decimal_text(double value);

}  // namespace rematlab
