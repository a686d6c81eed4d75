#pragma once
// Incremental Server-Sent Events parser (the WHATWG "event stream" grammar, as OpenAI-style
// servers use it): bytes arrive in arbitrary pieces (a chunk may end inside a line, between
// "\r" and "\n", or inside a multi-byte character), lines end in "\r\n", "\n" or "\r", an empty
// line dispatches the event, "data:" lines of one event are joined with "\n", lines starting
// with ":" are comments (keep-alive pings), and one space after the colon is dropped.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace kvgate::serving {

struct SseEvent {
  std::string event;  // the "event:" field; empty means "message"
  std::string data;   // "data:" lines joined with '\n'
  std::string id;
};

class SseParser {
 public:
  using Handler = std::function<void(const SseEvent&)>;
  // max_line_bytes bounds memory against a peer that never ends a line; exceeding it throws
  // kvgate::Error (input).
  explicit SseParser(Handler handler, size_t max_line_bytes = 16u << 20);

  // Feeds the next bytes; calls the handler for every event they complete. Throws what the
  // handler throws, and kvgate::Error (input) on an over-long line.
  void feed(std::string_view bytes);
  // End of stream: a final event without its blank line is dispatched (servers that close
  // right after the last "data:" line are common). Returns whether any bytes were pending.
  bool finish();

  size_t events() const { return events_; }

 private:
  void line(std::string_view text);
  void dispatch();

  Handler handler_;
  size_t max_line_bytes_;
  std::string partial_;  // bytes of the current, unfinished line
  bool after_cr_ = false;  // the last byte was '\r': a following '\n' belongs to it
  SseEvent pending_;
  bool has_data_ = false;
  bool has_fields_ = false;
  size_t events_ = 0;
};

}  // namespace kvgate::serving
