#include "core/error.h"

namespace kvgate {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage: return "usage";
    case ErrorKind::input: return "input";
    case ErrorKind::environment: return "environment";
    case ErrorKind::internal: return "internal";
  }
  return "internal";
}

std::string echo_user_text(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back up over UTF-8 continuation bytes (10xxxxxx) so the cut lands before a character's lead byte.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

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
