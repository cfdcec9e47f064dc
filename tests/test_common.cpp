#include <gtest/gtest.h>

#include "common/byte_size.h"
#include "common/errors.h"

namespace rematlab {
namespace {

TEST(ByteSize, ParsesBytesAndBinaryUnits) {
  EXPECT_EQ(parse_byte_size("1048576", "--budget"), 1048576);
  EXPECT_EQ(parse_byte_size("512MiB", "--budget"), 512LL << 20);
  EXPECT_EQ(parse_byte_size("2GiB", "--budget"), 2LL << 30);
  EXPECT_EQ(parse_byte_size("1.5KiB", "--budget"), 1536);
  EXPECT_EQ(parse_byte_size("3GB", "--budget"), 3000000000LL);
  // Read whatever the C locale's decimal point, with the blanks and '+' std::stod took.
  EXPECT_EQ(parse_byte_size(" +1.5KiB", "--budget"), 1536);
}

TEST(ByteSize, RejectsWhatIsNotASizeNamingTheField) {
  for (const char* bad : {"", "abc", "-1GiB", "0", "12 parsecs", "1XiB", "nan"}) {
    try {
      parse_byte_size(bad, "--budget");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidInput& error) {
      EXPECT_EQ(error.field(), "--budget");
      EXPECT_NE(std::string(error.what()).find("--budget"), std::string::npos);
    }
  }
}

TEST(ByteSize, FormatsForPeople) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3LL << 30), "3.00 GiB");
}

}  // namespace
}  // namespace rematlab
