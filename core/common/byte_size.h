// Byte sizes as users write them: "1048576", "512MiB", "1.5GiB".
#pragma once

#include <cstdint>
#include <string>

namespace rematlab {

// Parses bytes or a KiB/MiB/GiB/TiB quantity (also KB/MB/GB as decimal). Throws InvalidInput
// naming `field` when the text is not a positive size.
int64_t parse_byte_size(const std::string& text, const std::string& field);

// "1.50 GiB", "320.0 MiB", "512 B": for tables and progress lines.
std::string format_bytes(int64_t bytes);

}  // namespace rematlab
