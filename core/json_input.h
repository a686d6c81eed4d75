#pragma once
// User-supplied JSON (items, suites, policies, endpoint files, messages, traces) parsed once,
// strictly: a syntax error, a number too large for a double (`1e400`), a key given twice in one
// object and nesting deeper than kMaxJsonDepth are all bad input at a byte offset, never an
// internal error, a crash or a silently kept last value.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace kvgate {

// The deepest nesting of arrays and objects read. nlohmann parses without recursion, but copies,
// comparisons and dumps of a value recurse once per level: a file 60,000 levels deep would drive
// them past the stack. Real inputs (tool-call arguments, an item's meta) nest a handful of levels.
inline constexpr int kMaxJsonDepth = 256;

struct JsonProblem {
  uint64_t byte = 0;    // offset into the text where the problem was found
  std::string problem;  // e.g. "invalid JSON: ...", "number 1e400 does not fit a double", "duplicate key \"a\""
};

// Parses `text` into `out`; false, with `problem` set, when it is not strict JSON.
bool parse_json_strict(std::string_view text, nlohmann::json& out, JsonProblem& problem);

// The whole of `file`'s text: throws "FILE: at byte N: PROBLEM" (ErrorKind::input).
nlohmann::json parse_json_input(std::string_view text, const std::string& file);
// One JSONL line: throws "FILE:LINE: PROBLEM at byte N of the line" (ErrorKind::input).
nlohmann::json parse_json_line(std::string_view line, const std::string& file, uint64_t line_number);

}  // namespace kvgate
