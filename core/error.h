#pragma once
// One error type for the whole project. The kind decides the CLI exit code (see design.md,
// CLI contract): bad usage and bad input exit 2, internal and environment failures exit 3.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kvgate {

enum class ErrorKind : int {
  usage = 2,        // wrong flags or arguments
  input = 2,        // a file or value supplied by the user is malformed
  environment = 3,  // network, disk, missing tool
  internal = 3,     // a bug: an invariant of our own code did not hold
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }

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

}  // namespace kvgate

// Checks an invariant of our own code; a failure is a bug, reported as an internal error.
#define KVGATE_CHECK(cond, msg)                                                          \
  do {                                                                                    \
    if (!(cond)) ::kvgate::throw_internal_error(std::string(__FILE__) + ":" +             \
                                                std::to_string(__LINE__) + ": " + (msg)); \
  } while (0)
