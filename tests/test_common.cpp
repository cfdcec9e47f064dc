#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/byte_size.h"
#include "common/decimal_text.h"
#include "common/errors.h"
#include "common/json_text.h"
#include "common/posix_files.h"
#include "common/wording.h"
#include "scratch_dir.h"

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

TEST(ByteSize, CanonicalTextReadsBackExactlyInTheLargestUnitThatDivides) {
  for (const int64_t bytes : {int64_t{200} << 20, int64_t{1536} << 20, int64_t{3} << 30,
                              int64_t{200'000'000}, int64_t{1'000'001}, int64_t{4096}}) {
    const std::string text = byte_size_text(bytes);
    EXPECT_EQ(parse_byte_size(text, "--budget"), bytes) << text;
  }
  EXPECT_EQ(byte_size_text(int64_t{200} << 20), "200MiB");
  EXPECT_EQ(byte_size_text(int64_t{3} << 29), "1536MiB");
  EXPECT_EQ(byte_size_text(200'000'000), "200MB");
  EXPECT_EQ(byte_size_text(1'000'001), "1000001");
}

TEST(DecimalText, IsTheShortestTextThatReadsBack) {
  EXPECT_EQ(decimal_text(0.0), "0");
  EXPECT_EQ(decimal_text(0.5), "0.5");
  EXPECT_EQ(decimal_text(0.1 + 0.2), "0.30000000000000004");
  double back = 0.0;
  read_decimal_prefix(decimal_text(1e-7), back);
  EXPECT_EQ(back, 1e-7);
}

TEST(JsonText, RefusesNestingBeyondTheLimitWithoutRecursing) {
  const std::string deep = std::string(50000, '[') + std::string(50000, ']');
  EXPECT_FALSE(json_depth_within(deep));
  try {
    parse_json(deep);
    ADD_FAILURE() << "a value nested 50,000 deep was parsed";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("nested deeper than 64"), std::string::npos);
  }
  const std::string at_limit = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_NO_THROW(parse_json(at_limit));
  // Brackets inside strings are text, not nesting.
  EXPECT_TRUE(json_depth_within("{\"a\": \"" + std::string(1000, '[') + "\\\"[\"}"));
  EXPECT_NO_THROW(parse_ordered_json("{\"a\": \"" + std::string(1000, '{') + "\"}"));
}

TEST(JsonText, RefusesAKeyGivenTwiceInOneObjectButNotInTwo) {
  try {
    parse_ordered_json(R"({"base": {"steps": 2, "lr": 1, "steps": 3}})");
    ADD_FAILURE() << "a duplicate key was taken";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("\"steps\" appears twice"), std::string::npos)
        << error.what();
  }
  EXPECT_NO_THROW(parse_json(R"({"a": {"steps": 2}, "b": {"steps": 3}, "steps": 4})"));
  EXPECT_TRUE(parse_json_or_null("{\"a\": 1, \"a\": 2}").is_null());
  EXPECT_TRUE(parse_json_or_null("not json").is_null());
}

TEST(JsonText, QuotesValuesBrieflyAndNeverSplitsACharacter) {
  const nlohmann::json long_text = std::string(10000, 'x');
  EXPECT_LE(brief_json(long_text).size(), 64u);
  std::string text;
  for (int i = 0; i < 100; ++i) text += "é";
  const std::string quoted = brief_json(nlohmann::json(text));
  EXPECT_TRUE(files::is_valid_utf8(quoted)) << quoted;
  EXPECT_EQ(brief_json(nlohmann::json(42)), "42");
}

// This process's own descriptor, named as /dev/fd/N (or /dev/stdout), is written where it
// stands: a file opened for appending keeps what it held, and the file is the same one after.
TEST(WriteFileDurably, AnOwnDescriptorIsWrittenWhereItStandsAndAReplacedReportKeepsItsMode) {
  testing::ScratchDir dir("write-descriptor");
  const std::string log = dir.file("log.csv");
  std::ofstream(log) << "previous line\n";
  struct stat before {};
  ASSERT_EQ(::stat(log.c_str(), &before), 0);
  const int fd = ::open(log.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(files::write_file_durably("/dev/fd/" + std::to_string(fd), "the report\n"), "");
  ::close(fd);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "previous line\nthe report\n");
  struct stat after {};
  ASSERT_EQ(::stat(log.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "the file was replaced";

  const std::string private_report = dir.file("private.csv");
  std::ofstream(private_report) << "old\n";
  ASSERT_EQ(::chmod(private_report.c_str(), 0600), 0);
  EXPECT_EQ(files::write_file_durably(private_report, "new\n"), "");
  struct stat mode {};
  ASSERT_EQ(::stat(private_report.c_str(), &mode), 0);
  EXPECT_EQ(mode.st_mode & 0777, 0600u) << "a private report was made readable to others";
}

// Reports are written to what the path is: a regular file replaced atomically, through a link
// to it (the link stays), a device or a pipe written through, anything else refused.
TEST(WriteFileDurably, WritesThroughDevicesPipesAndLinksAndReplacesOnlyRegularFiles) {
  testing::ScratchDir dir("write-durably");
  EXPECT_EQ(files::write_file_durably(dir.file("new.csv"), "a\n"), "");
  EXPECT_EQ(files::write_file_durably(dir.file("new.csv"), "b\n"), "");
  std::ifstream replaced(dir.file("new.csv"));
  std::string line;
  std::getline(replaced, line);
  EXPECT_EQ(line, "b");

  ASSERT_EQ(::symlink(dir.file("new.csv").c_str(), dir.file("link.csv").c_str()), 0);
  EXPECT_EQ(files::write_file_durably(dir.file("link.csv"), "c\n"), "");
  struct stat link {};
  ASSERT_EQ(::lstat(dir.file("link.csv").c_str(), &link), 0);
  EXPECT_TRUE(S_ISLNK(link.st_mode));
  std::ifstream through(dir.file("new.csv"));
  std::getline(through, line);
  EXPECT_EQ(line, "c");

  ASSERT_EQ(::symlink(dir.file("gone.csv").c_str(), dir.file("dangling.csv").c_str()), 0);
  EXPECT_NE(files::write_file_durably(dir.file("dangling.csv"), "x"), "");
  EXPECT_FALSE(files::exists(dir.file("gone.csv")));

  EXPECT_EQ(files::write_file_durably("/dev/null", "discarded"), "");
  struct stat device {};
  ASSERT_EQ(::stat("/dev/null", &device), 0);
  EXPECT_TRUE(S_ISCHR(device.st_mode));

  ASSERT_EQ(::mkfifo(dir.file("pipe").c_str(), 0600), 0);
  EXPECT_EQ(files::write_file_durably(dir.file("pipe"), "x"), "a pipe that nobody reads");
  std::string received;
  std::thread reader([&] {
    std::ifstream pipe(dir.file("pipe"));
    std::stringstream text;
    text << pipe.rdbuf();
    received = text.str();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(files::write_file_durably(dir.file("pipe"), "through the pipe"), "");
  reader.join();
  EXPECT_EQ(received, "through the pipe");
  // Nothing but the files named is left in the folder: no temporary.
  std::vector<std::string> names = files::list(dir.path());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"dangling.csv", "link.csv", "new.csv", "pipe"}));
}
TEST(Wording, SettingsAndCommandsAreSaidAsTheCommandLineGivesThem) {
  const Wording words = "use " + setting("d_model", "64") + " or " + setting("checkpoint") + "; " +
                        command("plan", setting("budget", "2MiB")) + " " + runs_settings() + ", " +
                        command("estimate");
  EXPECT_EQ(words.command_line(),
            "use --d-model 64 or --checkpoint; `rematlab-cli plan --budget 2MiB` with the run's "
            "settings, `rematlab-cli estimate`");
  // Parts a reader can walk: plain words next to each other are one phrase.
  ASSERT_EQ(words.phrases().size(), 10u);
  EXPECT_EQ(words.phrases()[0].text, "use ");
  EXPECT_EQ(words.phrases()[5].kind, Phrase::Kind::kCommand);
  EXPECT_EQ(words.phrases()[5].arguments.at(0).value, "2MiB");
  EXPECT_TRUE(Wording("").empty());
}

TEST(InvalidInputWords, NameTheSettingAtFaultWhereverItWasFound) {
  EXPECT_EQ(setting_named_by("--d-model"), "d_model");
  EXPECT_EQ(setting_named_by("spec: base.heads"), "heads");
  EXPECT_EQ(setting_named_by("spec: axes.checkpoint[1]"), "checkpoint");
  EXPECT_EQ(setting_named_by("spec: max_batch.budget"), "budget");
  EXPECT_EQ(setting_named_by("spec: axes (every:1 b8)"), "");
  EXPECT_EQ(setting_named_by("sweep"), "sweep");

  const InvalidInput direct("--heads", "7 heads do not divide " + setting("d_model", "64"));
  EXPECT_STREQ(direct.what(), "--heads: 7 heads do not divide --d-model 64");
  EXPECT_EQ(direct.reason(), "7 heads do not divide --d-model 64");
  EXPECT_EQ(direct.setting(), "heads");
  EXPECT_EQ(direct.words().command_line(), direct.what());
  EXPECT_EQ(direct.words().phrases().front().kind, Phrase::Kind::kSetting);

  const InvalidInput found("spec: base.heads", "heads", direct.reason_words());
  EXPECT_STREQ(found.what(), "spec: base.heads: --heads 7 heads do not divide --d-model 64");
  EXPECT_EQ(found.reason(), "--heads 7 heads do not divide --d-model 64");
  EXPECT_EQ(found.words().command_line(), found.what());
  EXPECT_EQ(found.reason_words().command_line(), "7 heads do not divide --d-model 64");
}

}  // namespace
}  // namespace rematlab
