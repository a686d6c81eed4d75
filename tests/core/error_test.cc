#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/mapped_file.h"

namespace kvgate {
namespace {

TEST(Error, KindsMapToTheCliExitCodesAndNames) {
  EXPECT_EQ(Error(ErrorKind::usage, "x").exit_code(), 2);
  EXPECT_EQ(Error(ErrorKind::input, "x").exit_code(), 2);
  EXPECT_EQ(Error(ErrorKind::environment, "x").exit_code(), 3);
  EXPECT_EQ(Error(ErrorKind::internal, "x").exit_code(), 3);
  // usage and input share an exit code but stay distinct kinds (--json reports the kind).
  EXPECT_STREQ(error_kind_name(ErrorKind::usage), "usage");
  EXPECT_STREQ(error_kind_name(ErrorKind::input), "input");
  EXPECT_STREQ(error_kind_name(ErrorKind::environment), "environment");
  EXPECT_STREQ(error_kind_name(ErrorKind::internal), "internal");
  try {
    throw_input_error_line("f.jsonl", 3, "bad");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_STREQ(e.what(), "f.jsonl:3: bad");
  }
}

TEST(Error, EchoKeepsShortTextAndCutsLongTextWithItsLength) {
  EXPECT_EQ(echo_user_text("fp8"), "fp8");
  EXPECT_EQ(echo_user_text(std::string(kEchoBytes, 'a')), std::string(kEchoBytes, 'a'));
  const std::string huge(10'000'000, 'x');
  const std::string cut = echo_user_text(huge);
  EXPECT_EQ(cut, std::string(kEchoBytes, 'x') + "... (10000000 bytes)");
  EXPECT_EQ(echo_user_text("abcdef", 3), "abc... (6 bytes)");
}

TEST(Error, EchoNeverSplitsAUtf8Character) {
  // "가" is 3 bytes (EA B0 80): a cut at 4 or 5 bytes backs up to the character boundary at 3.
  const std::string korean = "가가가가";
  EXPECT_EQ(echo_user_text(korean, 4), "가... (12 bytes)");
  EXPECT_EQ(echo_user_text(korean, 5), "가... (12 bytes)");
  EXPECT_EQ(echo_user_text(korean, 6), "가가... (12 bytes)");
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "kvgate_core_" + std::to_string(::getpid()) + "_" + name;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ReadWholeFile, ReadsBytesAndNamesThePathOfWhatCannotBeRead) {
  const std::string path = temp_path("bytes.bin");
  const std::string bytes("a\0b\nc", 5);
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(read_whole_file(path, 5), bytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc).close();
  EXPECT_EQ(read_whole_file(path, 0), "");
  std::remove(path.c_str());

  const std::string missing = error_of([&] { read_whole_file(path, kMaxConfigFileBytes); });
  EXPECT_NE(missing.find(path + ": cannot open"), std::string::npos) << missing;
  const std::string dir = error_of([] { read_whole_file(::testing::TempDir(), kMaxConfigFileBytes); });
  EXPECT_NE(dir.find("is a directory, expected a file"), std::string::npos) << dir;
  const std::string mapped_dir = error_of([] { MappedFile m(::testing::TempDir()); });
  EXPECT_NE(mapped_dir.find("is a directory, expected a file"), std::string::npos) << mapped_dir;
}

// Issue 40: /dev/zero as an eval set was read until memory ran out. A device is refused at once;
// a file over its limit, or a pipe that goes on past it, is refused naming it and the limit.
TEST(ReadWholeFile, RefusesDevicesAndReadsNoFurtherThanTheLimit) {
  const std::string zero = error_of([] { read_whole_file("/dev/zero", kMaxDataFileBytes); });
  EXPECT_NE(zero.find("/dev/zero: not a regular file or a pipe"), std::string::npos) << zero;

  const std::string path = temp_path("six.bin");
  std::ofstream(path, std::ios::binary) << "123456";
  EXPECT_EQ(read_whole_file(path, 6), "123456");
  const std::string big = error_of([&] { read_whole_file(path, 5); });
  EXPECT_NE(big.find(path + ": the file (6 bytes) is larger than the 5 bytes"), std::string::npos) << big;
  std::remove(path.c_str());

  // A pipe that never ends (yes(1)) stops at the limit.
  FILE* yes = ::popen("yes", "r");
  ASSERT_NE(yes, nullptr);
  const std::string pipe = "/dev/fd/" + std::to_string(::fileno(yes));
  const std::string endless = error_of([&] { read_whole_file(pipe, 1 << 20); });
  EXPECT_NE(endless.find(pipe + ": what the pipe delivered is larger than the 1 MiB"), std::string::npos) << endless;
  ::pclose(yes);
}

}  // namespace
}  // namespace kvgate
