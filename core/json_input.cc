#include "core/json_input.h"

#include <cstddef>
#include <iterator>
#include <set>
#include <vector>

#include "core/error.h"

namespace kvgate {
namespace {

using json = nlohmann::json;

// An input iterator over the text that remembers how far the parser has read, so an error the
// parser reports without a position (number overflow, a duplicate key raised from the callback)
// still gets one.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* p, const char* base, size_t* furthest) : p_(p), base_(base), furthest_(furthest) {}
  reference operator*() const {
    const size_t read = static_cast<size_t>(p_ - base_) + 1;
    if (read > *furthest_) *furthest_ = read;
    return *p_;
  }
  CountingIterator& operator++() {
    ++p_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++p_;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const CountingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char* base_;
  size_t* furthest_;
};

struct DuplicateKey {
  std::string key;
};

struct TooDeep {};

// nlohmann's what() begins "[json.exception.parse_error.101] "; the message keeps the rest.
std::string without_exception_tag(const std::string& what) {
  const size_t close = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && close != std::string::npos ? what.substr(close + 2) : what;
}

}  // namespace

bool parse_json_strict(std::string_view text, json& out, JsonProblem& problem) {
  size_t furthest = 0;
  const char* base = text.data();
  const CountingIterator first(base, base, &furthest);
  const CountingIterator last(base + text.size(), base, &furthest);
  // One set of keys per open object; a key seen twice in the same object stops the parse.
  std::vector<std::set<std::string>> open_objects;
  const json::parser_callback_t check_keys = [&open_objects](int depth, json::parse_event_t event, json& parsed) {
    // `depth` is the number of arrays and objects around the one starting.
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw TooDeep{};
    switch (event) {
      case json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second)
          throw DuplicateKey{parsed.get<std::string>()};
        break;
      default: break;
    }
    return true;
  };
  try {
    out = json::parse(first, last, check_keys);
    return true;
  } catch (const TooDeep&) {
    problem = {furthest > 0 ? furthest - 1 : 0,
               "arrays and objects nested deeper than " + std::to_string(kMaxJsonDepth) + " levels (kvgate reads at most " +
                   std::to_string(kMaxJsonDepth) + ")"};
  } catch (const DuplicateKey& d) {
    // The parser has just read the key's closing quote.
    const std::string quoted = json(d.key).dump();
    const size_t at = furthest >= quoted.size() ? furthest - quoted.size() : 0;
    problem = {at, "duplicate key " + echo_user_text(quoted) + " (each key may appear once in an object)"};
  } catch (const json::parse_error& e) {
    problem = {e.byte > 0 ? e.byte - 1 : 0, "invalid JSON: " + without_exception_tag(e.what())};
  } catch (const json::out_of_range& e) {
    // 406 "number overflow parsing '1e400'": the parser read the number and one byte past it.
    std::string token;
    const std::string what = e.what();
    const size_t open = what.find('\''), close = what.rfind('\'');
    if (open != std::string::npos && close > open) token = what.substr(open + 1, close - open - 1);
    size_t at = furthest > 0 ? furthest - 1 : 0;
    if (!token.empty()) {
      const size_t found = text.rfind(token, at);
      if (found != std::string_view::npos) at = found;
    }
    problem = {at, token.empty() ? "invalid JSON: " + without_exception_tag(what)
                                 : "number " + echo_user_text(token) + " is out of the range of a double"};
  } catch (const json::exception& e) {
    problem = {furthest > 0 ? furthest - 1 : 0, "invalid JSON: " + without_exception_tag(e.what())};
  }
  out = json();
  return false;
}

json parse_json_input(std::string_view text, const std::string& file) {
  json out;
  JsonProblem p;
  if (!parse_json_strict(text, out, p)) throw_input_error_at(file, p.byte, p.problem);
  return out;
}

json parse_json_line(std::string_view line, const std::string& file, uint64_t line_number) {
  json out;
  JsonProblem p;
  if (!parse_json_strict(line, out, p))
    throw_input_error_line(file, line_number, p.problem + " (at byte " + std::to_string(p.byte) + " of the line)");
  return out;
}

}  // namespace kvgate
