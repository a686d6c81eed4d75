#include "core/error.h"

namespace kvgate {

void throw_input_error_at(const std::string& file, uint64_t offset, const std::string& problem) {
  throw Error(ErrorKind::input, file + ": at byte " + std::to_string(offset) + ": " + problem);
}
void throw_input_error_line(const std::string& file, uint64_t line, const std::string& problem) {
  throw Error(ErrorKind::input, file + ":" + std::to_string(line) + ": " + problem);
}
void throw_input_error(const std::string& problem) { throw Error(ErrorKind::input, problem); }
void throw_usage_error(const std::string& problem) { throw Error(ErrorKind::usage, problem); }
void throw_environment_error(const std::string& problem) { throw Error(ErrorKind::environment, problem); }
void throw_internal_error(const std::string& problem) { throw Error(ErrorKind::internal, problem); }

}  // namespace kvgate
