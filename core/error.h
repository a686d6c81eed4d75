#pragma once
// One error type for the whole project. The kind decides the CLI exit code (docs/design.md,
// CLI contract): bad usage and bad input exit 2, internal and environment failures exit 3.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kvgate {

enum class ErrorKind : int {
  usage,        // wrong flags or arguments (exit 2)
  input,        // a file or value supplied by the user is malformed (exit 2)
  environment,  // network, disk, missing tool (exit 3)
  internal,     // a bug: an invariant of our own code did not hold (exit 3)
};

constexpr int exit_code_of(ErrorKind kind) {
  return kind == ErrorKind::usage || kind == ErrorKind::input ? 2 : 3;
}
// "usage", "input", "environment", "internal": the kind as `--json` error output names it.
const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return exit_code_of(kind_); }

 private:
  ErrorKind kind_;
};

// "FILE: at byte OFFSET: PROBLEM" — the one-line shape every input error uses.
[[noreturn]] void throw_input_error_at(const std::string& file, uint64_t offset, const std::string& problem);
// "FILE:LINE: PROBLEM" for line-oriented inputs (JSONL, CSV).
[[noreturn]] void throw_input_error_line(const std::string& file, uint64_t line, const std::string& problem);
[[noreturn]] void throw_input_error(const std::string& problem);
[[noreturn]] void throw_usage_error(const std::string& problem);
[[noreturn]] void throw_environment_error(const std::string& problem);
[[noreturn]] void throw_internal_error(const std::string& problem);

// How much of a user-supplied value an error message quotes.
constexpr size_t kEchoBytes = 80;
// `text` cut for quoting in a message: whole when it fits in `max_bytes`, else its first
// `max_bytes` bytes (never splitting a UTF-8 character) followed by "... (N bytes)", so a 10 MB
// item id, spec or policy value cannot turn one error line into megabytes.
std::string echo_user_text(std::string_view text, size_t max_bytes = kEchoBytes);

}  // namespace kvgate

// Checks an invariant of our own code; a failure is a bug, reported as an internal error.
#define KVGATE_CHECK(cond, msg)                                                          \
  do {                                                                                    \
    if (!(cond)) ::kvgate::throw_internal_error(std::string(__FILE__) + ":" +             \
                                                std::to_string(__LINE__) + ": " + (msg)); \
  } while (0)
