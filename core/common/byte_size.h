// Byte sizes as users write them: "1048576", "512MiB", "1.5GiB".
#pragma once

#include <cstdint>
#include <string>

namespace rematlab {

// Parses bytes or a KiB/MiB/GiB/TiB quantity (also KB/MB/GB as decimal). Throws InvalidInput
// naming `field` when the text is not a positive size.
int64_t parse_byte_size(const std::string& text, const std::string& field);

// `bytes` exactly, as parse_byte_size reads it back, in the largest unit that divides it:
// "200MiB", "1536MiB" (1.5GiB), "200MB", "1000001" (a canonical policy text, plan:BUDGET).
std::string byte_size_text(int64_t bytes);

// "1.50 GiB", "320.0 MiB", "512 B": for tables and progress lines.
std::string format_bytes(int64_t bytes);

}  // namespace rematlab
