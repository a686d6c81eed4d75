// Strict JSON for user files: syntax errors, numbers outside double range and repeated keys are
// input errors at a byte offset (core/json_input.h).
#include "core/json_input.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/mapped_file.h"

namespace kvgate {
namespace {

JsonProblem problem_of(const std::string& text) {
  nlohmann::json j;
  JsonProblem p;
  EXPECT_FALSE(parse_json_strict(text, j, p)) << text;
  return p;
}

TEST(JsonInput, AcceptsStrictJson) {
  nlohmann::json j;
  JsonProblem p;
  ASSERT_TRUE(parse_json_strict(R"({"a": [1, 2.5, {"a": 1}], "b": {"a": 2}, "c": [{"x": 1}, {"x": 1}]})", j, p));
  EXPECT_EQ(j["b"]["a"], 2);
  EXPECT_DOUBLE_EQ(j["a"][1].get<double>(), 2.5);
}

TEST(JsonInput, NumberOutOfDoubleRangeIsAtItsOffset) {
  const JsonProblem p = problem_of(R"({"x": [1, 1e400]})");
  EXPECT_EQ(p.byte, 10u);
  EXPECT_NE(p.problem.find("1e400"), std::string::npos) << p.problem;
  EXPECT_EQ(problem_of("-1e999").byte, 0u);
}

TEST(JsonInput, RepeatedKeyInOneObjectIsAtTheRepeat) {
  const JsonProblem p = problem_of(R"({"a": 1, "b": {"a": 2}, "a": 3})");
  EXPECT_EQ(p.byte, 24u);
  EXPECT_NE(p.problem.find("duplicate key \"a\""), std::string::npos) << p.problem;
  // Escapes are compared decoded.
  EXPECT_NE(problem_of(R"({"a": 1, "\u0061": 2})").problem.find("duplicate key"), std::string::npos);
}

TEST(JsonInput, SyntaxErrorIsAtItsOffset) {
  const JsonProblem p = problem_of(R"({"x": tru})");
  EXPECT_EQ(p.byte, 9u);
  EXPECT_EQ(p.problem.rfind("invalid JSON: ", 0), 0u) << p.problem;
}

TEST(JsonInput, ThrowingFormsNameTheFile) {
  try {
    parse_json_input(R"({"a": 1e400})", "p.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_EQ(std::string(e.what()).rfind("p.json: at byte 6: ", 0), 0u) << e.what();
  }
  try {
    parse_json_line(R"({"a": 1, "a": 2})", "i.jsonl", 7);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("i.jsonl:7: duplicate key \"a\"", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("at byte 9 of the line"), std::string::npos) << e.what();
  }
}

// Issue 40: an item's meta nested 60,000 levels crashed the recursive copy of the parsed value.
// kMaxJsonDepth levels parse; one more is bad input at the byte that opens it.
TEST(JsonInput, NestingDeeperThanTheLimitIsRefusedAtItsByte) {
  auto nested = [](int levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  nlohmann::json out;
  JsonProblem problem;
  EXPECT_TRUE(parse_json_strict(nested(kMaxJsonDepth), out, problem)) << problem.problem;
  EXPECT_FALSE(parse_json_strict(nested(kMaxJsonDepth + 1), out, problem));
  EXPECT_EQ(problem.byte, static_cast<uint64_t>(kMaxJsonDepth));
  EXPECT_NE(problem.problem.find("nested deeper than 256 levels"), std::string::npos) << problem.problem;
  // Objects count as arrays do, and a deep file is refused quickly, not copied.
  std::string objects;
  for (int i = 0; i < 60000; ++i) objects += "{\"a\":";
  objects += "1" + std::string(60000, '}');
  try {
    parse_json_input(objects, "deep.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(std::string(e.what()).rfind("deep.json: at byte", 0), 0u) << e.what();
  }
}

TEST(WriteOutputFile, UnwritablePathIsInputErrorNamingIt) {
  const std::string missing_dir = ::testing::TempDir() + "kvgate_no_such_dir_" + std::to_string(::getpid()) + "/out.txt";
  try {
    write_output_file(missing_dir, "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
    EXPECT_EQ(std::string(e.what()).rfind(missing_dir + ": cannot write: ", 0), 0u) << e.what();
  }
  const std::string path = ::testing::TempDir() + "kvgate_write_output_" + std::to_string(::getpid());
  write_output_file(path, "first");
  write_output_file(path, "second");
  EXPECT_EQ(read_whole_file(path, kMaxConfigFileBytes), "second");
  std::filesystem::remove(path);
  try {
    write_output_file(::testing::TempDir(), "x");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::input);
  }
}

}  // namespace
}  // namespace kvgate
