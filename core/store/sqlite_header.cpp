#include "store/sqlite_header.h"

#include <cstring>
#include <fstream>

namespace rematlab {
namespace {

// Big-endian integers, as SQLite writes its header (https://sqlite.org/fileformat.html).
uint32_t big_endian(const unsigned char* bytes, int size) {
  uint32_t value = 0;
  for (int i = 0; i < size; ++i) value = (value << 8) | bytes[i];
  return value;
}

}  // namespace

std::optional<SqliteHeader> read_sqlite_header(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  unsigned char bytes[100] = {};
  if (!file.read(reinterpret_cast<char*>(bytes), sizeof bytes)) return std::nullopt;
  if (std::memcmp(bytes, "SQLite format 3", 16) != 0) return std::nullopt;
  SqliteHeader header;
  const uint32_t page_size = big_endian(bytes + 16, 2);
  header.page_size = page_size == 1 ? 65536 : page_size;
  // The in-header size is valid when the change counter equals the version-valid-for number.
  if (big_endian(bytes + 24, 4) == big_endian(bytes + 92, 4)) {
    header.page_count = big_endian(bytes + 28, 4);
  }
  header.user_version = static_cast<int32_t>(big_endian(bytes + 60, 4));
  header.application_id = static_cast<int32_t>(big_endian(bytes + 68, 4));
  return header;
}

}  // namespace rematlab
