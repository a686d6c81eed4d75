#include "serving/sse.h"

#include "core/error.h"

namespace kvgate::serving {

SseParser::SseParser(Handler handler, size_t max_line_bytes)
    : handler_(std::move(handler)), max_line_bytes_(max_line_bytes) {}

void SseParser::feed(std::string_view bytes) {
  size_t pos = 0;
  if (after_cr_ && !bytes.empty()) {
    after_cr_ = false;
    if (bytes.front() == '\n') pos = 1;  // the "\n" of a "\r\n" split across two reads
  }
  while (pos < bytes.size()) {
    // Scan for the next line end without copying: most lines end inside the same read.
    size_t end = pos;
    while (end < bytes.size() && bytes[end] != '\n' && bytes[end] != '\r') ++end;
    if (end == bytes.size()) {
      if (partial_.size() + (end - pos) > max_line_bytes_)
        throw_input_error("event stream: a line exceeds " + std::to_string(max_line_bytes_) + " bytes");
      partial_.append(bytes.substr(pos));
      return;
    }
    if (partial_.empty()) {
      line(bytes.substr(pos, end - pos));
    } else {
      partial_.append(bytes.substr(pos, end - pos));
      std::string whole = std::move(partial_);
      partial_.clear();
      line(whole);
    }
    if (bytes[end] == '\r') {
      if (end + 1 < bytes.size()) {
        if (bytes[end + 1] == '\n') ++end;
      } else {
        after_cr_ = true;
      }
    }
    pos = end + 1;
  }
}

bool SseParser::finish() {
  const bool pending = !partial_.empty() || has_fields_;
  if (!partial_.empty()) {
    std::string last = std::move(partial_);
    partial_.clear();
    line(last);
  }
  dispatch();
  after_cr_ = false;
  return pending;
}

void SseParser::line(std::string_view text) {
  if (text.empty()) {
    dispatch();
    return;
  }
  if (text.front() == ':') return;  // comment
  const size_t colon = text.find(':');
  std::string_view field = text.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = text.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) pending_.data += '\n';
    pending_.data.append(value);
    has_data_ = true;
    has_fields_ = true;
  } else if (field == "event") {
    pending_.event.assign(value);
    has_fields_ = true;
  } else if (field == "id") {
    pending_.id.assign(value);
    has_fields_ = true;
  }
  // "retry" and unknown fields are ignored, as the grammar says.
}

void SseParser::dispatch() {
  if (has_data_) {
    ++events_;
    SseEvent event = std::move(pending_);
    pending_ = SseEvent{};
    has_data_ = false;
    has_fields_ = false;
    handler_(event);
    return;
  }
  pending_ = SseEvent{};
  has_fields_ = false;
}

}  // namespace kvgate::serving
