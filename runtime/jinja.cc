#include "runtime/jinja.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "core/error.h"
#include "runtime/unicode.h"

namespace kvgate::runtime::jinja {

namespace {

// ---------------------------------------------------------------------------------------------
// Values: what Python objects a chat template sees (JSON data, plus Undefined and namespaces).

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python dicts

struct Value {
  enum class Kind { undefined, none, boolean, integer, floating, string, array, object };
  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // string value; for undefined, what was looked up (for errors)
  std::shared_ptr<Array> a;
  std::shared_ptr<Object> o;
  bool is_namespace = false;  // `set ns.x = ...` assigns into it, shared by every scope
  bool is_tuple = false;      // an array Python would print as a tuple

  static Value undefined(std::string what) {
    Value v;
    v.s = std::move(what);
    return v;
  }
  static Value none() { return make(Kind::none); }
  static Value boolean(bool x) {
    Value v = make(Kind::boolean);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = make(Kind::integer);
    v.i = x;
    return v;
  }
  static Value floating(double x) {
    Value v = make(Kind::floating);
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = make(Kind::string);
    v.s = std::move(x);
    return v;
  }
  static Value array(Array x = {}) {
    Value v = make(Kind::array);
    v.a = std::make_shared<Array>(std::move(x));
    return v;
  }
  static Value object(Object x = {}) {
    Value v = make(Kind::object);
    v.o = std::make_shared<Object>(std::move(x));
    return v;
  }
  static Value make(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }

  bool is_undefined() const { return kind == Kind::undefined; }
  bool is_number() const { return kind == Kind::integer || kind == Kind::floating || kind == Kind::boolean; }
  double as_double() const { return kind == Kind::floating ? f : static_cast<double>(kind == Kind::boolean ? b : i); }
  const Value* find(std::string_view key) const {
    if (kind != Kind::object) return nullptr;
    for (const auto& [k, v] : *o)
      if (k == key) return &v;
    return nullptr;
  }
};

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::json::value_t::string: {
      std::string text = j.get<std::string>();
      if (auto bad = unicode::find_invalid_utf8(text))
        throw_input_error("chat template input: at byte " + std::to_string(*bad) + " of \"" + echo_user_text(text) +
                          "\": not valid UTF-8");
      return Value::string(std::move(text));
    }
    case nlohmann::json::value_t::array: {
      Array a;
      for (const auto& e : j) a.push_back(from_json(e));
      return Value::array(std::move(a));
    }
    case nlohmann::json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.emplace_back(it.key(), from_json(it.value()));
      return Value::object(std::move(o));
    }
    default: return Value::undefined("binary");
  }
}

// Python's str.isspace() set, as str.strip() and the trim filter use it (unicode::is_whitespace
// plus the separators U+001C..U+001F).
bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Python strings index code points; these are the byte offsets of each code point, plus the end
// (every string here is well-formed UTF-8: the template and the context are checked first).
std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> at;
  unicode::decode_utf8(s, &at);
  return at;
}

// str.strip/lstrip/rstrip: `chars` (code points) or, without it, Python whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<size_t> at;
  const std::vector<uint32_t> cps = unicode::decode_utf8(s, &at);
  const std::vector<uint32_t> set = chars ? unicode::decode_utf8(*chars) : std::vector<uint32_t>{};
  auto strip_it = [&](size_t k) {
    return chars ? std::find(set.begin(), set.end(), cps[k]) != set.end() : is_py_space(cps[k]);
  };
  size_t b = 0, e = at.size() - 1;
  if (left)
    while (b < e && strip_it(b)) ++b;
  if (right)
    while (e > b && strip_it(e - 1)) --e;
  return std::string(s.substr(at[b], at[e] - at[b]));
}

// Python's repr(float): the shortest digits that round-trip, exponent form outside [1e-4, 1e16).
std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e_at = sci.find('e');
  const int exp = std::stoi(sci.substr(e_at + 1));
  std::string mant = sci.substr(0, e_at);
  const bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int ae = std::abs(exp);
  out += std::string("e") + (exp < 0 ? "-" : "+") + (ae < 10 ? "0" : "") + std::to_string(ae);
  return out;
}

std::string py_repr_string(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out.push_back(q);
  return out;
}

std::string py_str(const Value& v, bool repr = false);

std::string py_str(const Value& v, bool repr) {
  switch (v.kind) {
    case Value::Kind::undefined: return "";
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return v.b ? "True" : "False";
    case Value::Kind::integer: return std::to_string(v.i);
    case Value::Kind::floating: return py_float(v.f);
    case Value::Kind::string: return repr ? py_repr_string(v.s) : v.s;
    case Value::Kind::array: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.a->size(); ++k) out += (k ? ", " : "") + py_str((*v.a)[k], true);
      if (v.is_tuple && v.a->size() == 1) out += ",";
      return out + (v.is_tuple ? ")" : "]");
    }
    case Value::Kind::object: {
      if (v.is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t k = 0; k < v.o->size(); ++k)
        out += (k ? ", " : "") + py_repr_string((*v.o)[k].first) + ": " + py_str((*v.o)[k].second, true);
      return out + "}";
    }
  }
  return "";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none: return false;
    case Value::Kind::boolean: return v.b;
    case Value::Kind::integer: return v.i != 0;
    case Value::Kind::floating: return v.f != 0;
    case Value::Kind::string: return !v.s.empty();
    case Value::Kind::array: return !v.a->empty();
    case Value::Kind::object: return v.is_namespace || !v.o->empty();
  }
  return false;
}

bool equal(const Value& x, const Value& y) {
  if (x.is_number() && y.is_number()) {
    if (x.kind != Value::Kind::floating && y.kind != Value::Kind::floating)
      return (x.kind == Value::Kind::boolean ? x.b : x.i) == (y.kind == Value::Kind::boolean ? y.b : y.i);
    return x.as_double() == y.as_double();
  }
  if (x.kind != y.kind) return false;
  switch (x.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none: return true;
    case Value::Kind::string: return x.s == y.s;
    case Value::Kind::array:
      if (x.a->size() != y.a->size()) return false;
      for (size_t k = 0; k < x.a->size(); ++k)
        if (!equal((*x.a)[k], (*y.a)[k])) return false;
      return true;
    case Value::Kind::object:
      if (x.is_namespace || y.is_namespace) return x.o == y.o;
      if (x.o->size() != y.o->size()) return false;
      for (const auto& [k, v] : *x.o) {
        const Value* other = y.find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    default: return false;
  }
}

// json.dumps(x, ensure_ascii=False, indent=indent), transformers' tojson.
void to_json(const Value& v, std::optional<int> indent, int level, std::string& out, const std::function<void()>& fail) {
  auto newline = [&](int l) {
    out.push_back('\n');
    out.append(static_cast<size_t>(*indent * l), ' ');
  };
  switch (v.kind) {
    case Value::Kind::undefined: fail(); return;
    case Value::Kind::none: out += "null"; return;
    case Value::Kind::boolean: out += v.b ? "true" : "false"; return;
    case Value::Kind::integer: out += std::to_string(v.i); return;
    case Value::Kind::floating:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : py_float(v.f);
      return;
    case Value::Kind::string:
      out.push_back('"');
      for (unsigned char c : v.s) {
        switch (c) {
          case '"': out += "\\\""; break;
          case '\\': out += "\\\\"; break;
          case '\n': out += "\\n"; break;
          case '\r': out += "\\r"; break;
          case '\t': out += "\\t"; break;
          case '\b': out += "\\b"; break;
          case '\f': out += "\\f"; break;
          default:
            if (c < 0x20) {
              char buf[8];
              std::snprintf(buf, sizeof(buf), "\\u%04x", c);
              out += buf;
            } else {
              out.push_back(static_cast<char>(c));
            }
        }
      }
      out.push_back('"');
      return;
    case Value::Kind::array:
      if (v.a->empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t k = 0; k < v.a->size(); ++k) {
        if (k) out += indent ? "," : ", ";
        if (indent) newline(level + 1);
        to_json((*v.a)[k], indent, level + 1, out, fail);
      }
      if (indent) newline(level);
      out.push_back(']');
      return;
    case Value::Kind::object:
      if (v.o->empty()) {
        out += "{}";
        return;
      }
      out.push_back('{');
      for (size_t k = 0; k < v.o->size(); ++k) {
        if (k) out += indent ? "," : ", ";
        if (indent) newline(level + 1);
        to_json(Value::string((*v.o)[k].first), indent, level + 1, out, fail);
        out += ": ";
        to_json((*v.o)[k].second, indent, level + 1, out, fail);
      }
      if (indent) newline(level);
      out.push_back('}');
      return;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The syntax tree.

struct Node {
  enum class K {
    // statements
    body, text, output, if_, for_, set, break_, continue_, generation,
    // expressions
    literal, name, attr, item, slice, call, kwarg, filter, test, not_, neg, pos, binop, compare, and_, or_,
    cond, list, tuple, dict
  };
  K k = K::body;
  int line = 0, col = 0;
  std::string s;                   // text, name, attribute, operator, filter/test name, kwarg name
  Value v;                         // literal
  std::vector<std::shared_ptr<const Node>> c;  // children (nullptr: an absent optional part)
  std::vector<std::string> names;  // for/set targets; compare operators
  bool flag = false;               // if_: has else; set: namespace attribute target
};

namespace {

using NodeP = std::shared_ptr<const Node>;

// ---------------------------------------------------------------------------------------------
// Lexer: text and tags, with trim_blocks, lstrip_blocks and '-'/'+' whitespace control.

struct Token {
  enum class T { text, var_begin, block_begin, end, name, string, integer, floating, op, eof };
  T t = T::eof;
  std::string s;
  int64_t i = 0;
  double f = 0;
  size_t at = 0;
};

// Jinja reads its source as str.splitlines() joined with "\n" (every line break becomes "\n" and
// a final one is dropped).
std::string normalize_source(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(src[i]);
    if (c == '\r') {
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else if (c == '\v' || c == '\f' || c == 0x1C || c == 0x1D || c == 0x1E) {
      out.push_back('\n');
    } else if (c == 0xC2 && i + 1 < src.size() && static_cast<unsigned char>(src[i + 1]) == 0x85) {
      out.push_back('\n');
      ++i;
    } else if (c == 0xE2 && i + 2 < src.size() && static_cast<unsigned char>(src[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(src[i + 2]) == 0xA8 || static_cast<unsigned char>(src[i + 2]) == 0xA9)) {
      out.push_back('\n');
      i += 2;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& name) : src_(src), name_(name) {}

  [[noreturn]] void fail(size_t at, const std::string& problem) const { fail_at(src_, name_, at, problem); }

  static std::pair<int, int> line_col(const std::string& src, size_t at) {
    int line = 1;
    size_t line_start = 0;
    for (size_t k = 0; k < at && k < src.size(); ++k)
      if (src[k] == '\n') {
        ++line;
        line_start = k + 1;
      }
    int col = 1;
    for (size_t k = line_start; k < at && k < src.size(); ++k)
      if ((static_cast<unsigned char>(src[k]) & 0xC0) != 0x80) ++col;
    return {line, col};
  }
  [[noreturn]] static void fail_at(const std::string& src, const std::string& name, size_t at, const std::string& problem) {
    const auto [line, col] = line_col(src, at);
    throw_input_error(name + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + problem);
  }

  std::vector<Token> run() {
    std::vector<Token> out;
    size_t pos = 0;
    bool line_starting = true;
    bool strip_next = false;  // the previous tag ended with '-': strip the text's leading whitespace
    while (pos <= src_.size()) {
      const size_t open = find_open(pos);
      std::string text = src_.substr(pos, (open == std::string::npos ? src_.size() : open) - pos);
      if (strip_next) text = py_strip(text, std::nullopt, true, false);
      if (open == std::string::npos) {
        push_text(out, std::move(text), pos);
        break;
      }
      const char kind = src_[open + 1];  // '{', '%' or '#'
      const char marker = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (marker == '-') {
        text = py_strip(text, std::nullopt, false, true);
      } else if (kind != '{' && marker != '+') {
        // lstrip_blocks: spaces and tabs between a line start and a block or comment tag go.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) &&
            text.find_first_not_of(" \t", l_pos) == std::string::npos)
          text.resize(l_pos);
      }
      push_text(out, std::move(text), pos);
      size_t p = open + 2 + ((marker == '-' || marker == '+') ? 1 : 0);
      size_t end_at = 0;
      bool end_minus = false, end_plus = false;
      if (kind == '#') {
        const size_t close = src_.find("#}", p);
        if (close == std::string::npos) fail(open, "unterminated comment ('{#' without '#}')");
        end_minus = close > p && src_[close - 1] == '-';
        end_plus = close > p && src_[close - 1] == '+';
        end_at = close + 2;
      } else {
        Token begin;
        begin.t = kind == '{' ? Token::T::var_begin : Token::T::block_begin;
        begin.at = open;
        out.push_back(begin);
        end_at = lex_tag(out, p, kind == '{' ? '}' : '%', end_minus, end_plus, open);
      }
      pos = end_at;
      strip_next = false;
      line_starting = false;
      if (end_minus) {
        strip_next = true;
        size_t q = pos;
        while (q < src_.size() && (src_[q] == ' ' || src_[q] == '\t' || src_[q] == '\n')) ++q;
        line_starting = q > pos && src_[q - 1] == '\n';
      } else if (kind != '{' && !end_plus && pos < src_.size() && src_[pos] == '\n') {
        ++pos;  // trim_blocks
        line_starting = true;
      }
      if (pos == src_.size()) break;
    }
    Token eof;
    eof.at = src_.size();
    out.push_back(eof);
    return out;
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return std::string::npos;
  }

  static void push_text(std::vector<Token>& out, std::string text, size_t at) {
    if (text.empty()) return;
    Token t;
    t.t = Token::T::text;
    t.s = std::move(text);
    t.at = at;
    out.push_back(std::move(t));
  }

  // Tokens up to the tag's close ('}}' or '%}', optionally '-'/'+' before it, outside brackets);
  // returns the offset after the close.
  size_t lex_tag(std::vector<Token>& out, size_t p, char close, bool& end_minus, bool& end_plus, size_t open) {
    int depth = 0;
    while (true) {
      while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t' || src_[p] == '\n')) ++p;
      if (p >= src_.size()) fail(open, std::string("unterminated tag ('") + src_.substr(open, 2) + "' without its close)");
      auto closes_at = [&](size_t q) { return q + 1 < src_.size() && src_[q] == close && src_[q + 1] == '}'; };
      if (depth == 0 && (src_[p] == '-' || src_[p] == '+') && closes_at(p + 1)) {
        (src_[p] == '-' ? end_minus : end_plus) = true;
        Token e;
        e.t = Token::T::end;
        e.at = p;
        out.push_back(e);
        return p + 3;
      }
      if (depth == 0 && closes_at(p)) {
        Token e;
        e.t = Token::T::end;
        e.at = p;
        out.push_back(e);
        return p + 2;
      }
      Token t;
      t.at = p;
      const char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        t.t = Token::T::name;
        t.s = src_.substr(p, q - p);
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t q = p;
        bool is_float = false;
        while (q < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        if (q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
          is_float = true;
          ++q;
          while (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) ++q;
        }
        if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
          size_t r = q + 1;
          if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
          if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
            is_float = true;
            q = r;
            while (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) ++q;
          }
        }
        std::string digits;
        for (size_t k = p; k < q; ++k)
          if (src_[k] != '_') digits.push_back(src_[k]);
        if (is_float) {
          t.t = Token::T::floating;
          t.f = std::strtod(digits.c_str(), nullptr);
        } else {
          t.t = Token::T::integer;
          auto r = std::from_chars(digits.data(), digits.data() + digits.size(), t.i);
          if (r.ec != std::errc()) fail(p, "integer literal out of range");
        }
        p = q;
      } else if (c == '\'' || c == '"') {
        t.t = Token::T::string;
        p = lex_string(p, t.s);
      } else {
        static const char* const two[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* o : two)
          if (src_.compare(p, 2, o) == 0) op = o;
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
            fail(p, std::string("unexpected character '") + echo_user_text(std::string(1, c)) + "' in a tag");
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") {
          if (depth == 0)
            fail(p, "'" + op + "' without its opening bracket (a tag's close is '" + std::string(1, close) + "}')");
          --depth;
        }
        t.t = Token::T::op;
        t.s = op;
        p += op.size();
      }
      out.push_back(std::move(t));
    }
  }

  // A Python string literal's value (jinja decodes it with "unicode-escape").
  size_t lex_string(size_t p, std::string& value) {
    const char q = src_[p];
    size_t k = p + 1;
    while (true) {
      if (k >= src_.size()) fail(p, "unterminated string literal");
      const char c = src_[k];
      if (c == q) return k + 1;
      if (c != '\\') {
        value.push_back(c);
        ++k;
        continue;
      }
      if (k + 1 >= src_.size()) fail(p, "unterminated string literal");
      const char e = src_[k + 1];
      k += 2;
      auto hex = [&](int n) {
        if (k + static_cast<size_t>(n) > src_.size()) fail(k, "truncated \\x/\\u escape in a string literal");
        uint32_t cp = 0;
        for (int d = 0; d < n; ++d) {
          const char h = src_[k + static_cast<size_t>(d)];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail(k, "bad hex digit in a string escape");
          cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        k += static_cast<size_t>(n);
        if (cp > 0x10FFFF) fail(k, "escape beyond U+10FFFF in a string literal");
        unicode::append_utf8(cp, value);
      };
      switch (e) {
        case 'n': value.push_back('\n'); break;
        case 't': value.push_back('\t'); break;
        case 'r': value.push_back('\r'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'v': value.push_back('\v'); break;
        case 'a': value.push_back('\a'); break;
        case '0': value.push_back('\0'); break;
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case '\n': break;  // a backslash-newline continues the line
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          value.push_back('\\');
          value.push_back(e);
      }
    }
  }

  const std::string& src_;
  const std::string& name_;
};

// ---------------------------------------------------------------------------------------------
// Parser: jinja2's grammar and precedence (filters and tests bind tighter than arithmetic).

class Parser {
 public:
  Parser(const std::string& src, const std::string& name, std::vector<Token> tokens)
      : src_(src), name_(name), toks_(std::move(tokens)) {}

  NodeP parse_template() {
    std::string ended;
    return parse_body({}, ended);
  }

 private:
  [[noreturn]] void fail(const Token& t, const std::string& problem) const { Lexer::fail_at(src_, name_, t.at, problem); }
  const Token& peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  const Token& next() { return toks_[std::min(pos_++, toks_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const { return peek(ahead).t == Token::T::op && peek(ahead).s == op; }
  bool is_name(const char* n, size_t ahead = 0) const { return peek(ahead).t == Token::T::name && peek(ahead).s == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek(), std::string("expected '") + op + "', found " + describe(peek()));
    next();
  }
  void expect_end() {
    if (peek().t != Token::T::end) fail(peek(), "expected the end of the tag, found " + describe(peek()));
    next();
  }
  std::string describe(const Token& t) const {
    switch (t.t) {
      case Token::T::end: return "the end of the tag";
      case Token::T::eof: return "the end of the template";
      case Token::T::text: return "text";
      case Token::T::string: return "a string";
      case Token::T::integer:
      case Token::T::floating: return "a number";
      default: return "'" + t.s + "'";
    }
  }
  std::shared_ptr<Node> make(Node::K k, const Token& at) const {
    auto n = std::make_shared<Node>();
    n->k = k;
    const auto [line, col] = Lexer::line_col(src_, at.at);
    n->line = line;
    n->col = col;
    return n;
  }

  // Statements until one of `stops` opens a block tag; `ended` gets which (the tag's name
  // token is consumed, the rest of the tag is the caller's).
  NodeP parse_body(const std::vector<std::string>& stops, std::string& ended) {
    auto body = make(Node::K::body, peek());
    while (true) {
      const Token& t = peek();
      if (t.t == Token::T::eof) {
        if (!stops.empty()) fail(t, "unexpected end of template: expected {% " + stops.back() + " %}");
        ended.clear();
        return body;
      }
      if (t.t == Token::T::text) {
        auto n = make(Node::K::text, t);
        n->s = t.s;
        next();
        body->c.push_back(n);
        continue;
      }
      if (t.t == Token::T::var_begin) {
        next();
        auto n = make(Node::K::output, t);
        n->c.push_back(parse_expression());
        expect_end();
        body->c.push_back(n);
        continue;
      }
      // a block tag
      next();
      const Token& kw = peek();
      if (kw.t != Token::T::name) fail(kw, "expected a statement name after '{%', found " + describe(kw));
      if (std::find(stops.begin(), stops.end(), kw.s) != stops.end()) {
        ended = kw.s;
        next();
        return body;
      }
      body->c.push_back(parse_statement());
    }
  }

  NodeP parse_statement() {
    const Token kw = next();
    if (kw.s == "if") {
      auto n = make(Node::K::if_, kw);
      n->c.push_back(parse_expression());
      expect_end();
      while (true) {
        std::string ended;
        n->c.push_back(parse_body({"elif", "else", "endif"}, ended));
        if (ended == "elif") {
          n->c.push_back(parse_expression());
          expect_end();
        } else if (ended == "else") {
          expect_end();
          std::string e2;
          n->c.push_back(parse_body({"endif"}, e2));
          n->flag = true;
          expect_end();
          return n;
        } else {
          expect_end();
          return n;
        }
      }
    }
    if (kw.s == "for") {
      auto n = make(Node::K::for_, kw);
      n->names = parse_targets();
      if (!is_name("in")) fail(peek(), "expected 'in' in a for loop, found " + describe(peek()));
      next();
      NodeP iter = parse_expression(false);
      NodeP filter;
      if (is_name("if")) {
        next();
        filter = parse_expression(false);
      }
      if (is_name("recursive")) fail(peek(), "unsupported: recursive for loops");
      expect_end();
      std::string ended;
      ++loop_depth_;
      NodeP body = parse_body({"else", "endfor"}, ended);
      --loop_depth_;
      NodeP else_body;
      if (ended == "else") {
        expect_end();
        std::string e2;
        else_body = parse_body({"endfor"}, e2);
      }
      expect_end();
      n->c = {iter, body, filter, else_body};
      return n;
    }
    if (kw.s == "set") {
      auto n = make(Node::K::set, kw);
      if (peek().t == Token::T::name && is_op(".", 1)) {
        n->names = {next().s};
        next();
        if (peek().t != Token::T::name) fail(peek(), "expected an attribute name after '.'");
        n->names.push_back(next().s);
        n->flag = true;
      } else {
        n->names = parse_targets();
      }
      if (!is_op("=")) {
        if (peek().t == Token::T::end) fail(kw, "unsupported: block assignment ({% set x %}...{% endset %})");
        fail(peek(), "expected '=' in set, found " + describe(peek()));
      }
      next();
      n->c.push_back(parse_tuple_or_expression());
      expect_end();
      return n;
    }
    if (kw.s == "break" || kw.s == "continue") {
      if (loop_depth_ == 0) fail(kw, "'" + kw.s + "' outside a for loop");
      auto n = make(kw.s == "break" ? Node::K::break_ : Node::K::continue_, kw);
      expect_end();
      return n;
    }
    if (kw.s == "generation") {
      auto n = make(Node::K::generation, kw);
      expect_end();
      std::string ended;
      n->c.push_back(parse_body({"endgeneration"}, ended));
      expect_end();
      return n;
    }
    static const char* const known[] = {"macro", "call", "filter", "block", "extends", "include", "import", "from",
                                        "raw", "with", "autoescape", "do", "trans"};
    for (const char* k : known)
      if (kw.s == k)
        fail(kw, "unsupported tag '{% " + kw.s + " %}' (kvgate's chat-template engine runs if/for/set/break/continue/"
                                                  "generation)");
    if (kw.s.rfind("end", 0) == 0 || kw.s == "elif" || kw.s == "else")
      fail(kw, "'{% " + kw.s + " %}' without its opening tag");
    fail(kw, "unknown tag '{% " + kw.s + " %}'");
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = is_op("(");
    if (paren) next();
    while (true) {
      if (peek().t != Token::T::name) fail(peek(), "expected a variable name, found " + describe(peek()));
      names.push_back(next().s);
      if (!is_op(",")) break;
      next();
    }
    if (paren) expect_op(")");
    return names;
  }

  // `a, b` on the right of set is a tuple.
  NodeP parse_tuple_or_expression() {
    const Token& start = peek();
    NodeP first = parse_expression();
    if (!is_op(",")) return first;
    auto t = make(Node::K::tuple, start);
    t->c.push_back(first);
    while (is_op(",")) {
      next();
      if (peek().t == Token::T::end) break;
      t->c.push_back(parse_expression());
    }
    return t;
  }

  NodeP parse_expression(bool with_condexpr = true) {
    NodeP left = parse_or();
    if (!with_condexpr) return left;
    while (is_name("if")) {
      const Token& t = next();
      NodeP cond = parse_or();
      NodeP other;
      if (is_name("else")) {
        next();
        other = parse_expression();
      }
      auto n = make(Node::K::cond, t);
      n->c = {cond, left, other};
      left = n;
    }
    return left;
  }
  // `or` over `and` over `not`: the same left-associative loop at two levels.
  NodeP parse_or() { return parse_logical("or", Node::K::or_, &Parser::parse_and); }
  NodeP parse_and() { return parse_logical("and", Node::K::and_, &Parser::parse_not); }
  NodeP parse_logical(const char* word, Node::K kind, NodeP (Parser::*operand)()) {
    NodeP left = (this->*operand)();
    while (is_name(word)) {
      auto n = make(kind, next());
      n->c = {left, (this->*operand)()};
      left = n;
    }
    return left;
  }
  NodeP parse_not() {
    if (is_name("not")) {
      auto n = make(Node::K::not_, next());
      n->c = {parse_not()};
      return n;
    }
    return parse_compare();
  }
  NodeP parse_compare() {
    const Token& start = peek();
    NodeP first = parse_math1();
    std::shared_ptr<Node> cmp;
    while (true) {
      std::string op;
      if (peek().t == Token::T::op &&
          (peek().s == "==" || peek().s == "!=" || peek().s == "<" || peek().s == ">" || peek().s == "<=" || peek().s == ">=")) {
        op = next().s;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Node::K::compare, start);
        cmp->c.push_back(first);
      }
      cmp->names.push_back(op);
      cmp->c.push_back(parse_math1());
    }
    return cmp ? cmp : first;
  }
  NodeP binop(const Token& t, const std::string& op, NodeP l, NodeP r) {
    auto n = make(Node::K::binop, t);
    n->s = op;
    n->c = {std::move(l), std::move(r)};
    return n;
  }
  NodeP parse_math1() {
    NodeP left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token t = next();
      left = binop(t, t.s, left, parse_concat());
    }
    return left;
  }
  NodeP parse_concat() {
    NodeP left = parse_math2();
    while (is_op("~")) {
      const Token t = next();
      left = binop(t, "~", left, parse_math2());
    }
    return left;
  }
  NodeP parse_math2() {
    NodeP left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = next();
      left = binop(t, t.s, left, parse_pow());
    }
    return left;
  }
  NodeP parse_pow() {
    NodeP left = parse_unary(true);
    while (is_op("**")) {
      const Token t = next();
      left = binop(t, "**", left, parse_unary(true));
    }
    return left;
  }
  NodeP parse_unary(bool with_filter) {
    NodeP node;
    if (is_op("-") || is_op("+")) {
      const Token t = next();
      auto n = make(t.s == "-" ? Node::K::neg : Node::K::pos, t);
      n->c = {parse_unary(false)};
      node = n;
    } else {
      node = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(node) : node;
  }

  NodeP parse_primary() {
    const Token t = next();
    switch (t.t) {
      case Token::T::string: {
        auto n = make(Node::K::literal, t);
        std::string s = t.s;
        while (peek().t == Token::T::string) s += next().s;  // adjacent literals join
        n->v = Value::string(std::move(s));
        return n;
      }
      case Token::T::integer: {
        auto n = make(Node::K::literal, t);
        n->v = Value::integer(t.i);
        return n;
      }
      case Token::T::floating: {
        auto n = make(Node::K::literal, t);
        n->v = Value::floating(t.f);
        return n;
      }
      case Token::T::name: {
        auto n = make(Node::K::literal, t);
        if (t.s == "true" || t.s == "True") n->v = Value::boolean(true);
        else if (t.s == "false" || t.s == "False") n->v = Value::boolean(false);
        else if (t.s == "none" || t.s == "None") n->v = Value::none();
        else {
          n->k = Node::K::name;
          n->s = t.s;
        }
        return n;
      }
      case Token::T::op:
        if (t.s == "(") {
          if (is_op(")")) {
            next();
            return make(Node::K::tuple, t);
          }
          NodeP first = parse_expression();
          if (is_op(")")) {
            next();
            return first;
          }
          auto tup = make(Node::K::tuple, t);
          tup->c.push_back(first);
          while (is_op(",")) {
            next();
            if (is_op(")")) break;
            tup->c.push_back(parse_expression());
          }
          expect_op(")");
          return tup;
        }
        if (t.s == "[") {
          auto l = make(Node::K::list, t);
          while (!is_op("]")) {
            l->c.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return l;
        }
        if (t.s == "{") {
          auto d = make(Node::K::dict, t);
          while (!is_op("}")) {
            d->c.push_back(parse_expression());
            expect_op(":");
            d->c.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return d;
        }
        break;
      default: break;
    }
    fail(t, "expected an expression, found " + describe(t));
  }

  NodeP parse_postfix(NodeP node) {
    while (true) {
      if (is_op(".")) {
        const Token t = next();
        auto n = make(Node::K::attr, t);
        if (peek().t == Token::T::name) {
          n->s = next().s;
          n->c = {node};
        } else if (peek().t == Token::T::integer) {
          n->k = Node::K::item;
          auto idx = make(Node::K::literal, peek());
          idx->v = Value::integer(next().i);
          n->c = {node, idx};
        } else {
          fail(peek(), "expected an attribute name after '.', found " + describe(peek()));
        }
        node = n;
      } else if (is_op("[")) {
        const Token t = next();
        NodeP parts[3];
        bool is_slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = parse_expression();
          if (k < 2 && is_op(":")) {
            next();
            is_slice = true;
            continue;
          }
          break;
        }
        expect_op("]");
        auto n = make(is_slice ? Node::K::slice : Node::K::item, t);
        if (is_slice) {
          n->c = {node, parts[0], parts[1], parts[2]};
        } else {
          if (!parts[0]) fail(t, "empty subscript");
          n->c = {node, parts[0]};
        }
        node = n;
      } else if (is_op("(")) {
        const Token t = next();
        auto n = make(Node::K::call, t);
        n->c.push_back(node);
        parse_args(n);
        node = n;
      } else {
        return node;
      }
    }
  }

  // After '(' has been consumed: positional and keyword arguments up to ')'.
  void parse_args(const std::shared_ptr<Node>& n) {
    while (!is_op(")")) {
      if (peek().t == Token::T::name && is_op("=", 1)) {
        auto kw = make(Node::K::kwarg, peek());
        kw->s = next().s;
        next();
        kw->c = {parse_expression()};
        n->c.push_back(kw);
      } else {
        if (is_op("*") || is_op("**")) fail(peek(), "unsupported: *args/**kwargs in a call");
        n->c.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  NodeP parse_filters(NodeP node) {
    while (true) {
      if (is_op("|")) {
        next();
        if (peek().t != Token::T::name) fail(peek(), "expected a filter name after '|', found " + describe(peek()));
        const Token t = next();
        auto n = make(Node::K::filter, t);
        n->s = t.s;
        while (is_op(".") && peek(1).t == Token::T::name) {  // dotted filter names
          next();
          n->s += "." + next().s;
        }
        n->c.push_back(node);
        if (is_op("(")) {
          next();
          parse_args(n);
        }
        node = n;
      } else if (is_name("is")) {
        const Token is_tok = next();
        bool negated = false;
        if (is_name("not")) {
          next();
          negated = true;
        }
        if (peek().t != Token::T::name) fail(peek(), "expected a test name after 'is', found " + describe(peek()));
        const Token t = next();
        auto n = make(Node::K::test, t);
        n->s = t.s;
        n->c.push_back(node);
        if (is_op("(")) {
          next();
          parse_args(n);
        } else if (peek().t == Token::T::string || peek().t == Token::T::integer || peek().t == Token::T::floating ||
                   (peek().t == Token::T::name && !is_name("else") && !is_name("or") && !is_name("and") &&
                    !is_name("if") && !is_name("in") && !is_name("not") && !is_name("is")) ||
                   is_op("[") || is_op("{")) {
          n->c.push_back(parse_postfix(parse_primary()));
        }
        node = n;
        if (negated) {
          auto neg = make(Node::K::not_, is_tok);
          neg->c = {node};
          node = neg;
        }
      } else if (is_op("(")) {
        const Token t = next();
        auto n = make(Node::K::call, t);
        n->c.push_back(node);
        parse_args(n);
        node = n;
      } else {
        return node;
      }
    }
  }

  const std::string& src_;
  const std::string& name_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Renderer.

enum class Flow { normal, break_, continue_ };

class Renderer {
 public:
  Renderer(const std::string& name, const nlohmann::ordered_json& context) : name_(name) {
    scopes_.emplace_back();
    for (auto it = context.begin(); it != context.end(); ++it) scopes_.back()[it.key()] = from_json(it.value());
    scopes_.emplace_back();  // the template's own top level
  }

  std::string out;

  Flow exec(const Node& n) {
    switch (n.k) {
      case Node::K::body:
        for (const NodeP& c : n.c) {
          const Flow f = exec(*c);
          if (f != Flow::normal) return f;
        }
        return Flow::normal;
      case Node::K::text: out += n.s; return Flow::normal;
      case Node::K::output: out += py_str(eval(*n.c[0])); return Flow::normal;
      case Node::K::if_: {
        size_t k = 0;
        for (; k + 1 < n.c.size(); k += 2)
          if (truthy(eval(*n.c[k]))) return exec(*n.c[k + 1]);
        if (n.flag) return exec(*n.c.back());
        return Flow::normal;
      }
      case Node::K::for_: return exec_for(n);
      case Node::K::set: {
        Value v = eval(*n.c[0]);
        if (n.flag) {
          Value ns = lookup(n.names[0]);
          if (ns.kind != Value::Kind::object || !ns.is_namespace)
            fail(n, "cannot assign attribute '" + n.names[1] + "' of '" + n.names[0] + "', which is not a namespace()");
          assign_key(*ns.o, n.names[1], std::move(v));
        } else {
          assign_targets(n, n.names, std::move(v));
        }
        return Flow::normal;
      }
      case Node::K::break_: return Flow::break_;
      case Node::K::continue_: return Flow::continue_;
      case Node::K::generation: return exec(*n.c[0]);
      default: fail(n, "internal: expression node in statement position");
    }
  }

 private:
  using Scope = std::map<std::string, Value, std::less<>>;

  [[noreturn]] void fail(const Node& n, const std::string& problem) const {
    throw_input_error(name_ + ":" + std::to_string(n.line) + ":" + std::to_string(n.col) + ": " + problem);
  }

  static void assign_key(Object& o, const std::string& key, Value v) {
    for (auto& [k, old] : o)
      if (k == key) {
        old = std::move(v);
        return;
      }
    o.emplace_back(key, std::move(v));
  }

  void assign_targets(const Node& n, const std::vector<std::string>& names, Value v) {
    if (names.size() == 1) {
      scopes_.back()[names[0]] = std::move(v);
      return;
    }
    const Array items = iterate(n, v);
    if (items.size() != names.size())
      fail(n, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()) + " names");
    for (size_t k = 0; k < names.size(); ++k) scopes_.back()[names[k]] = items[k];
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  // What a for loop (or list()) iterates: list items, dict keys, string characters.
  Array iterate(const Node& n, const Value& v) const {
    switch (v.kind) {
      case Value::Kind::undefined: return {};
      case Value::Kind::array: return *v.a;
      case Value::Kind::object: {
        Array keys;
        if (!v.is_namespace)
          for (const auto& kv : *v.o) keys.push_back(Value::string(kv.first));
        return keys;
      }
      case Value::Kind::string: {
        Array chars;
        const std::vector<size_t> at = code_point_offsets(v.s);
        for (size_t k = 0; k + 1 < at.size(); ++k) chars.push_back(Value::string(v.s.substr(at[k], at[k + 1] - at[k])));
        return chars;
      }
      default: fail(n, "'" + type_name(v) + "' object is not iterable");
    }
  }

  static std::string type_name(const Value& v) {
    switch (v.kind) {
      case Value::Kind::undefined: return "Undefined";
      case Value::Kind::none: return "NoneType";
      case Value::Kind::boolean: return "bool";
      case Value::Kind::integer: return "int";
      case Value::Kind::floating: return "float";
      case Value::Kind::string: return "str";
      case Value::Kind::array: return "list";
      case Value::Kind::object: return v.is_namespace ? "Namespace" : "dict";
    }
    return "?";
  }

  Flow exec_for(const Node& n) {
    const Value seq = eval(*n.c[0]);
    Array items = iterate(*n.c[0], seq);
    if (n.c[2]) {  // `for x in xs if cond`: loop.* count the kept items only
      Array kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        assign_targets(n, n.names, item);
        const bool keep = truthy(eval(*n.c[2]));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      scopes_.emplace_back();  // each iteration has its own scope, as in jinja2
      Object loop = {{"index0", Value::integer(k)},
                     {"index", Value::integer(k + 1)},
                     {"revindex0", Value::integer(len - k - 1)},
                     {"revindex", Value::integer(len - k)},
                     {"first", Value::boolean(k == 0)},
                     {"last", Value::boolean(k == len - 1)},
                     {"length", Value::integer(len)},
                     {"depth", Value::integer(1)},
                     {"depth0", Value::integer(0)},
                     {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item")},
                     {"nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item")}};
      scopes_.back()["loop"] = Value::object(std::move(loop));
      assign_targets(n, n.names, items[static_cast<size_t>(k)]);
      const Flow f = exec(*n.c[1]);
      scopes_.pop_back();
      if (f == Flow::break_) break;
    }
    if (len == 0 && n.c[3]) return exec(*n.c[3]);
    return Flow::normal;
  }

  // An operand that must have a value: using an Undefined is an error, as in jinja2.
  const Value& defined(const Node& n, const Value& v) const {
    if (v.is_undefined()) fail(n, v.s.empty() ? "undefined value" : v.s);
    return v;
  }

  Value get_attr(const Node& n, const Value& obj, const std::string& attr) const {
    defined(n, obj);
    if (const Value* v = obj.find(attr)) return *v;
    return Value::undefined("'" + type_name(obj) + "' object has no attribute '" + attr + "'");
  }

  static int64_t norm_index(int64_t i, int64_t len) { return i < 0 ? i + len : i; }

  Value get_item(const Node& n, const Value& obj, const Value& key) const {
    defined(n, obj);
    if (obj.kind == Value::Kind::object && key.kind == Value::Kind::string) {
      if (const Value* v = obj.find(key.s)) return *v;
      return Value::undefined("'dict object' has no attribute '" + key.s + "'");
    }
    if ((obj.kind == Value::Kind::array || obj.kind == Value::Kind::string) &&
        (key.kind == Value::Kind::integer || key.kind == Value::Kind::boolean)) {
      const int64_t raw = key.kind == Value::Kind::boolean ? key.b : key.i;
      if (obj.kind == Value::Kind::array) {
        const int64_t i = norm_index(raw, static_cast<int64_t>(obj.a->size()));
        if (i >= 0 && i < static_cast<int64_t>(obj.a->size())) return (*obj.a)[static_cast<size_t>(i)];
      } else {
        const std::vector<size_t> at = code_point_offsets(obj.s);
        const int64_t len = static_cast<int64_t>(at.size()) - 1;
        const int64_t i = norm_index(raw, len);
        if (i >= 0 && i < len)
          return Value::string(obj.s.substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]));
      }
      return Value::undefined("'" + type_name(obj) + " object' has no element " + std::to_string(raw));
    }
    if (key.kind == Value::Kind::string) return get_attr(n, obj, key.s);
    return Value::undefined("'" + type_name(obj) + " object' has no element " + py_str(key, true));
  }

  Value slice(const Node& n, const Value& obj, const Value& start, const Value& stop, const Value& step_v) const {
    defined(n, obj);
    auto as_opt = [&](const Value& v) -> std::optional<int64_t> {
      if (v.is_undefined() || v.kind == Value::Kind::none) return std::nullopt;
      if (v.kind != Value::Kind::integer) fail(n, "slice indices must be integers or none");
      return v.i;
    };
    const int64_t step = as_opt(step_v).value_or(1);
    if (step == 0) fail(n, "slice step cannot be zero");
    std::vector<size_t> at;
    int64_t len = 0;
    if (obj.kind == Value::Kind::array) {
      len = static_cast<int64_t>(obj.a->size());
    } else if (obj.kind == Value::Kind::string) {
      at = code_point_offsets(obj.s);
      len = static_cast<int64_t>(at.size()) - 1;
    } else {
      fail(n, "'" + type_name(obj) + "' object is not subscriptable with a slice");
    }
    // Python's slice.indices().
    auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v < 0 ? *v + len : *v;
      if (step > 0) return std::clamp<int64_t>(x, 0, len);
      return std::clamp<int64_t>(x, -1, len - 1);
    };
    const int64_t b = clamp(as_opt(start), step > 0 ? 0 : len - 1);
    const int64_t e = clamp(as_opt(stop), step > 0 ? len : -1);
    std::vector<int64_t> idx;
    for (int64_t i = b; step > 0 ? i < e : i > e; i += step) idx.push_back(i);
    if (obj.kind == Value::Kind::array) {
      Array out;
      for (int64_t i : idx) out.push_back((*obj.a)[static_cast<size_t>(i)]);
      return Value::array(std::move(out));
    }
    std::string out;
    for (int64_t i : idx) out += obj.s.substr(at[static_cast<size_t>(i)], at[static_cast<size_t>(i) + 1] - at[static_cast<size_t>(i)]);
    return Value::string(std::move(out));
  }

  struct Args {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;
    const Value* get(size_t i, const char* name) const {
      if (i < pos.size()) return &pos[i];
      for (const auto& [k, v] : kw)
        if (k == name) return &v;
      return nullptr;
    }
  };
  Args eval_args(const Node& n, size_t first) {
    Args a;
    for (size_t k = first; k < n.c.size(); ++k) {
      if (n.c[k]->k == Node::K::kwarg) a.kw.emplace_back(n.c[k]->s, eval(*n.c[k]->c[0]));
      else a.pos.push_back(eval(*n.c[k]));
    }
    return a;
  }
  std::string str_arg(const Node& n, const Args& a, size_t i, const char* name, const std::string& what) const {
    const Value* v = a.get(i, name);
    if (!v || v->kind != Value::Kind::string) fail(n, what + ": argument '" + name + "' must be a string");
    return v->s;
  }

  Value arith(const Node& n, const std::string& op, const Value& l, const Value& r) const {
    defined(n, l);
    defined(n, r);
    if (op == "~") return Value::string(py_str(l) + py_str(r));
    if (op == "+") {
      if (l.kind == Value::Kind::string && r.kind == Value::Kind::string) return Value::string(l.s + r.s);
      if (l.kind == Value::Kind::array && r.kind == Value::Kind::array) {
        Array a = *l.a;
        a.insert(a.end(), r.a->begin(), r.a->end());
        return Value::array(std::move(a));
      }
    }
    if (op == "*" && (l.kind == Value::Kind::string || l.kind == Value::Kind::array) && r.kind == Value::Kind::integer) {
      if (l.kind == Value::Kind::string) {
        std::string s;
        for (int64_t k = 0; k < r.i; ++k) s += l.s;
        return Value::string(std::move(s));
      }
      Array a;
      for (int64_t k = 0; k < r.i; ++k) a.insert(a.end(), l.a->begin(), l.a->end());
      return Value::array(std::move(a));
    }
    if (!l.is_number() || !r.is_number())
      fail(n, "unsupported operand types for " + op + ": '" + type_name(l) + "' and '" + type_name(r) + "'");
    const bool ints = l.kind != Value::Kind::floating && r.kind != Value::Kind::floating;
    const int64_t li = l.kind == Value::Kind::boolean ? l.b : l.i, ri = r.kind == Value::Kind::boolean ? r.b : r.i;
    const double lf = l.as_double(), rf = r.as_double();
    if (op == "+") return ints ? Value::integer(li + ri) : Value::floating(lf + rf);
    if (op == "-") return ints ? Value::integer(li - ri) : Value::floating(lf - rf);
    if (op == "*") return ints ? Value::integer(li * ri) : Value::floating(lf * rf);
    if (op == "/") {
      if (rf == 0) fail(n, "division by zero");
      return Value::floating(lf / rf);
    }
    if (op == "//" || op == "%") {
      if (ints) {
        if (ri == 0) fail(n, "integer division or modulo by zero");
        int64_t q = li / ri, m = li % ri;
        if (m != 0 && ((m < 0) != (ri < 0))) {
          --q;
          m += ri;
        }
        return Value::integer(op == "//" ? q : m);
      }
      if (rf == 0) fail(n, "float division or modulo by zero");
      const double q = std::floor(lf / rf);
      return Value::floating(op == "//" ? q : lf - q * rf);
    }
    if (op == "**") {
      if (ints && ri >= 0) {
        int64_t p = 1;
        for (int64_t k = 0; k < ri; ++k) p *= li;
        return Value::integer(p);
      }
      return Value::floating(std::pow(lf, rf));
    }
    fail(n, "unknown operator " + op);
  }

  bool compare(const Node& n, const std::string& op, const Value& l, const Value& r) const {
    if (op == "==") return equal(l, r);
    if (op == "!=") return !equal(l, r);
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.kind == Value::Kind::string) {
        if (l.kind != Value::Kind::string) fail(n, "'in <string>' requires a string as left operand, not " + type_name(l));
        found = r.s.find(l.s) != std::string::npos;
      } else if (r.kind == Value::Kind::array) {
        for (const Value& e : *r.a) found = found || equal(l, e);
      } else if (r.kind == Value::Kind::object) {
        found = l.kind == Value::Kind::string && r.find(l.s) != nullptr;
      } else if (!r.is_undefined()) {
        fail(n, "argument of type '" + type_name(r) + "' is not iterable");
      }
      return op == "in" ? found : !found;
    }
    defined(n, l);
    defined(n, r);
    int c = 0;
    if (l.is_number() && r.is_number()) {
      c = l.as_double() < r.as_double() ? -1 : l.as_double() > r.as_double() ? 1 : 0;
    } else if (l.kind == Value::Kind::string && r.kind == Value::Kind::string) {
      c = l.s.compare(r.s) < 0 ? -1 : l.s.compare(r.s) > 0 ? 1 : 0;
    } else {
      fail(n, "'" + op + "' not supported between '" + type_name(l) + "' and '" + type_name(r) + "'");
    }
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  bool run_test(const Node& n, const std::string& name, const Value& v, const Args& a) const {
    const Value* arg = a.get(0, "value");
    auto need_arg = [&]() -> const Value& {
      if (!arg) fail(n, "test '" + name + "' takes an argument");
      return *arg;
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.kind == Value::Kind::none;
    if (name == "boolean") return v.kind == Value::Kind::boolean;
    if (name == "true") return v.kind == Value::Kind::boolean && v.b;
    if (name == "false") return v.kind == Value::Kind::boolean && !v.b;
    if (name == "string") return v.kind == Value::Kind::string;
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == Value::Kind::integer;
    if (name == "float") return v.kind == Value::Kind::floating;
    if (name == "mapping") return v.kind == Value::Kind::object && !v.is_namespace;
    if (name == "iterable")
      return v.kind == Value::Kind::string || v.kind == Value::Kind::array || v.kind == Value::Kind::undefined ||
             (v.kind == Value::Kind::object && !v.is_namespace);
    if (name == "sequence")
      return v.kind == Value::Kind::string || v.kind == Value::Kind::array || (v.kind == Value::Kind::object && !v.is_namespace);
    if (name == "odd" || name == "even") {
      if (v.kind != Value::Kind::integer) fail(n, "test '" + name + "' needs an integer, got " + type_name(v));
      return (((v.i % 2) + 2) % 2 == 1) == (name == "odd");
    }
    if (name == "divisibleby") {
      const Value& d = need_arg();
      if (v.kind != Value::Kind::integer || d.kind != Value::Kind::integer || d.i == 0)
        fail(n, "test 'divisibleby' needs integers (and a non-zero divisor)");
      return v.i % d.i == 0;
    }
    if (name == "equalto" || name == "eq" || name == "==") return equal(v, need_arg());
    if (name == "ne" || name == "!=") return !equal(v, need_arg());
    if (name == "in") return compare(n, "in", v, need_arg());
    if (name == "lt" || name == "<") return compare(n, "<", v, need_arg());
    if (name == "gt" || name == ">") return compare(n, ">", v, need_arg());
    if (name == "le" || name == "<=") return compare(n, "<=", v, need_arg());
    if (name == "ge" || name == ">=") return compare(n, ">=", v, need_arg());
    fail(n, "unsupported test 'is " + name + "'");
  }

  Value apply_filter(const Node& n, const std::string& name, const Value& v, const Args& a) {
    auto s_of = [&](const Value& x) { return py_str(x); };
    if (name == "trim") {
      const Value* chars = a.get(0, "chars");
      return Value::string(py_strip(s_of(v), chars && chars->kind == Value::Kind::string ? std::optional<std::string>(chars->s) : std::nullopt, true, true));
    }
    if (name == "length" || name == "count") {
      switch (v.kind) {
        case Value::Kind::undefined: return Value::integer(0);
        case Value::Kind::string: return Value::integer(static_cast<int64_t>(code_point_offsets(v.s).size()) - 1);
        case Value::Kind::array: return Value::integer(static_cast<int64_t>(v.a->size()));
        case Value::Kind::object: return Value::integer(static_cast<int64_t>(v.o->size()));
        default: fail(n, "object of type '" + type_name(v) + "' has no len()");
      }
    }
    if (name == "tojson") {
      std::optional<int> indent;
      if (const Value* i = a.get(0, "indent"); i && i->kind == Value::Kind::integer) indent = static_cast<int>(i->i);
      for (const auto& [k, val] : a.kw)
        if (k != "indent" && k != "ensure_ascii")
          fail(n, "tojson: unsupported argument '" + k + "'");
      if (const Value* e = a.get(99, "ensure_ascii"); e && truthy(*e)) fail(n, "tojson: unsupported ensure_ascii=true");
      std::string out;
      to_json(v, indent, 0, out, [&] { fail(n, "tojson: an undefined value is not JSON serializable"); });
      return Value::string(std::move(out));
    }
    if (name == "default" || name == "d") {
      const Value* dflt = a.get(0, "default_value");
      const Value* boolean = a.get(1, "boolean");
      const bool use = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
      return use ? (dflt ? *dflt : Value::string("")) : v;
    }
    if (name == "string") return Value::string(s_of(v));
    if (name == "safe") return v;
    if (name == "list") return Value::array(iterate(n, v));
    if (name == "join") {
      const Value* sep = a.get(0, "d");
      const Value* attr = a.get(1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& e : iterate(n, v)) {
        if (!first) out += sep ? s_of(*sep) : "";
        first = false;
        out += s_of(attr ? get_attr(n, e, s_of(*attr)) : e);
      }
      return Value::string(std::move(out));
    }
    if (name == "first" || name == "last") {
      const Array items = iterate(n, v);
      if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") return string_method(n, s_of(v), name, {});
    if (name == "replace") return string_method(n, s_of(v), "replace", a);
    if (name == "items") {
      if (v.is_undefined()) return Value::array();
      if (v.kind != Value::Kind::object) fail(n, "items: '" + type_name(v) + "' is not a mapping");
      Array out;
      for (const auto& [k, val] : *v.o) {
        Value pair = Value::array({Value::string(k), val});
        pair.is_tuple = true;
        out.push_back(std::move(pair));
      }
      return Value::array(std::move(out));
    }
    if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
      const bool by_attr = name == "selectattr" || name == "rejectattr";
      const bool keep_if = name == "selectattr" || name == "select";
      size_t first_arg = 0;
      std::string attr;
      if (by_attr) {
        attr = str_arg(n, a, 0, "attribute", name);
        first_arg = 1;
      }
      std::string test;
      Args test_args;
      if (a.pos.size() > first_arg) {
        if (a.pos[first_arg].kind != Value::Kind::string) fail(n, name + ": the test name must be a string");
        test = a.pos[first_arg].s;
        test_args.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(first_arg) + 1, a.pos.end());
      }
      Array out;
      for (const Value& e : iterate(n, v)) {
        const Value x = by_attr ? get_attr(n, e, attr) : e;
        const bool pass = test.empty() ? truthy(x) : run_test(n, test, x, test_args);
        if (pass == keep_if) out.push_back(e);
      }
      return Value::array(std::move(out));
    }
    if (name == "map") {
      const Value* attr = a.get(99, "attribute");
      if (!attr) fail(n, "map: only map(attribute=...) is supported");
      Array out;
      for (const Value& e : iterate(n, v)) {
        Value x = get_attr(n, e, s_of(*attr));
        if (x.is_undefined())
          if (const Value* d = a.get(99, "default")) x = *d;
        out.push_back(std::move(x));
      }
      return Value::array(std::move(out));
    }
    if (name == "int") {
      if (v.kind == Value::Kind::integer) return v;
      if (v.kind == Value::Kind::boolean) return Value::integer(v.b);
      if (v.kind == Value::Kind::floating) return Value::integer(static_cast<int64_t>(v.f));
      if (v.kind == Value::Kind::string) {
        int64_t x = 0;
        const std::string t = py_strip(v.s, std::nullopt, true, true);
        auto r = std::from_chars(t.data(), t.data() + t.size(), x);
        if (r.ec == std::errc() && r.ptr == t.data() + t.size()) return Value::integer(x);
      }
      const Value* d = a.get(0, "default");
      return d ? *d : Value::integer(0);
    }
    if (name == "float") {
      if (v.is_number()) return Value::floating(v.as_double());
      if (v.kind == Value::Kind::string) {
        char* end = nullptr;
        const double x = std::strtod(v.s.c_str(), &end);
        if (end && *end == '\0' && !v.s.empty()) return Value::floating(x);
      }
      const Value* d = a.get(0, "default");
      return d ? *d : Value::floating(0);
    }
    if (name == "abs") {
      if (v.kind == Value::Kind::integer) return Value::integer(v.i < 0 ? -v.i : v.i);
      if (v.kind == Value::Kind::floating) return Value::floating(std::fabs(v.f));
      fail(n, "abs: bad operand type '" + type_name(v) + "'");
    }
    fail(n, "unsupported filter '|" + name + "'");
  }

  Value string_method(const Node& n, const std::string& s, const std::string& m, const Args& a) const {
    auto opt_chars = [&](size_t i) -> std::optional<std::string> {
      const Value* c = a.get(i, "chars");
      if (!c || c->kind == Value::Kind::none) return std::nullopt;
      if (c->kind != Value::Kind::string) fail(n, m + "(): chars must be a string");
      return c->s;
    };
    if (m == "strip") return Value::string(py_strip(s, opt_chars(0), true, true));
    if (m == "lstrip") return Value::string(py_strip(s, opt_chars(0), true, false));
    if (m == "rstrip") return Value::string(py_strip(s, opt_chars(0), false, true));
    if (m == "upper" || m == "lower") {
      std::string out = s;
      for (char& c : out) c = static_cast<char>(m == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
      return Value::string(std::move(out));
    }
    if (m == "capitalize" || m == "title") {
      std::string out = s;
      bool start = true;
      for (size_t k = 0; k < out.size(); ++k) {
        const unsigned char c = static_cast<unsigned char>(out[k]);
        const bool alpha = std::isalpha(c) != 0;
        out[k] = static_cast<char>(start && alpha ? std::toupper(c) : std::tolower(c));
        start = m == "title" ? !alpha : false;
        if (m == "capitalize" && k == 0) start = false;
      }
      return Value::string(std::move(out));
    }
    if (m == "startswith" || m == "endswith") {
      const Value* p = a.get(0, "prefix");
      if (!p) fail(n, m + "() takes a string");
      std::vector<std::string> options;
      if (p->kind == Value::Kind::string) options.push_back(p->s);
      else if (p->kind == Value::Kind::array)
        for (const Value& e : *p->a) {
          if (e.kind != Value::Kind::string) fail(n, m + "(): a tuple of strings expected");
          options.push_back(e.s);
        }
      else fail(n, m + "() takes a string or a tuple of strings");
      for (const std::string& o : options)
        if (o.size() <= s.size() && (m == "startswith" ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0))
          return Value::boolean(true);
      return Value::boolean(false);
    }
    if (m == "split") {
      const Value* sep = a.get(0, "sep");
      const Value* maxsplit_v = a.get(1, "maxsplit");
      int64_t maxsplit = maxsplit_v && maxsplit_v->kind == Value::Kind::integer ? maxsplit_v->i : -1;
      Array out;
      if (!sep || sep->kind == Value::Kind::none) {  // runs of whitespace, no empty pieces
        std::vector<size_t> at;
        const std::vector<uint32_t> cp = unicode::decode_utf8(s, &at);
        size_t k = 0;
        const size_t cps = cp.size();
        while (true) {
          while (k < cps && is_py_space(cp[k])) ++k;
          if (k >= cps) break;
          if (maxsplit == 0) {
            out.push_back(Value::string(py_strip(s.substr(at[k]), std::nullopt, false, true)));
            break;
          }
          size_t e = k;
          while (e < cps && !is_py_space(cp[e])) ++e;
          out.push_back(Value::string(s.substr(at[k], at[e] - at[k])));
          if (maxsplit > 0) --maxsplit;
          k = e;
        }
        return Value::array(std::move(out));
      }
      if (sep->kind != Value::Kind::string || sep->s.empty()) fail(n, "split(): empty or non-string separator");
      size_t from = 0;
      while (true) {
        const size_t hit = maxsplit == 0 ? std::string::npos : s.find(sep->s, from);
        if (hit == std::string::npos) {
          out.push_back(Value::string(s.substr(from)));
          break;
        }
        out.push_back(Value::string(s.substr(from, hit - from)));
        from = hit + sep->s.size();
        if (maxsplit > 0) --maxsplit;
      }
      return Value::array(std::move(out));
    }
    if (m == "replace") {
      const std::string from = str_arg(n, a, 0, "old", "replace");
      const std::string to = str_arg(n, a, 1, "new", "replace");
      const Value* count_v = a.get(2, "count");
      int64_t count = count_v && count_v->kind == Value::Kind::integer ? count_v->i : -1;
      std::string out;
      if (from.empty()) {  // Python inserts `to` around every code point
        const std::vector<size_t> at = code_point_offsets(s);
        for (size_t k = 0; k + 1 < at.size(); ++k) {
          if (count != 0) {
            out += to;
            if (count > 0) --count;
          }
          out += s.substr(at[k], at[k + 1] - at[k]);
        }
        if (count != 0) out += to;
        return Value::string(std::move(out));
      }
      size_t pos = 0;
      while (count != 0) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        out += s.substr(pos, hit - pos) + to;
        pos = hit + from.size();
        if (count > 0) --count;
      }
      return Value::string(out + s.substr(pos));
    }
    fail(n, "unsupported string method '" + m + "()'");
  }

  Value call(const Node& n) {
    const Node& callee = *n.c[0];
    if (callee.k == Node::K::attr) {  // a method
      const Value obj = eval(*callee.c[0]);
      defined(callee, obj);
      const Args a = eval_args(n, 1);
      if (obj.kind == Value::Kind::string) return string_method(n, obj.s, callee.s, a);
      if (obj.kind == Value::Kind::object && !obj.is_namespace) {
        if (callee.s == "items") return apply_filter(n, "items", obj, {});
        if (callee.s == "keys") return Value::array(iterate(n, obj));
        if (callee.s == "values") {
          Array out;
          for (const auto& kv : *obj.o) out.push_back(kv.second);
          return Value::array(std::move(out));
        }
        if (callee.s == "get") {
          const std::string key = str_arg(n, a, 0, "key", "get");
          if (const Value* v = obj.find(key)) return *v;
          const Value* d = a.get(1, "default");
          return d ? *d : Value::none();
        }
      }
      fail(n, "unsupported method '" + callee.s + "()' on " + type_name(obj));
    }
    if (callee.k == Node::K::name) {
      const Value bound = lookup(callee.s);
      const Args a = eval_args(n, 1);
      if (bound.is_undefined()) {
        if (callee.s == "raise_exception") {
          const Value* msg = a.get(0, "message");
          fail(n, "raise_exception: " + (msg ? py_str(*msg) : std::string()));
        }
        if (callee.s == "namespace" || callee.s == "dict") {
          Value ns = Value::object();
          ns.is_namespace = callee.s == "namespace";
          if (!a.pos.empty()) {
            if (a.pos.size() != 1 || a.pos[0].kind != Value::Kind::object) fail(n, callee.s + "() takes keyword arguments or one dict");
            *ns.o = *a.pos[0].o;
          }
          for (const auto& [k, v] : a.kw) assign_key(*ns.o, k, v);
          return ns;
        }
        if (callee.s == "range") {
          std::vector<int64_t> r;
          for (const Value& v : a.pos) {
            if (v.kind != Value::Kind::integer) fail(n, "range() takes integers");
            r.push_back(v.i);
          }
          if (r.empty() || r.size() > 3) fail(n, "range() takes 1 to 3 integers");
          const int64_t start = r.size() == 1 ? 0 : r[0], stop = r.size() == 1 ? r[0] : r[1], step = r.size() == 3 ? r[2] : 1;
          if (step == 0) fail(n, "range() step must not be zero");
          Array out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::integer(i));
          return Value::array(std::move(out));
        }
        fail(n, bound.s + " (called as a function)");
      }
      fail(n, "'" + callee.s + "' (" + type_name(bound) + ") is not callable");
    }
    fail(n, "unsupported call");
  }

 public:
  Value eval(const Node& n) {
    switch (n.k) {
      case Node::K::literal: return n.v;
      case Node::K::name: return lookup(n.s);
      case Node::K::attr: return get_attr(n, eval(*n.c[0]), n.s);
      case Node::K::item: {
        const Value obj = eval(*n.c[0]);
        return get_item(n, obj, eval(*n.c[1]));
      }
      case Node::K::slice: {
        const Value obj = eval(*n.c[0]);
        auto opt = [&](const NodeP& p) { return p ? eval(*p) : Value::none(); };
        return slice(n, obj, opt(n.c[1]), opt(n.c[2]), opt(n.c[3]));
      }
      case Node::K::call: return call(n);
      case Node::K::filter: {
        const Value v = eval(*n.c[0]);
        return apply_filter(n, n.s, v, eval_args(n, 1));
      }
      case Node::K::test: {
        const Value v = eval(*n.c[0]);
        return Value::boolean(run_test(n, n.s, v, eval_args(n, 1)));
      }
      case Node::K::not_: return Value::boolean(!truthy(eval(*n.c[0])));
      case Node::K::neg:
      case Node::K::pos: {
        const Value v = eval(*n.c[0]);
        defined(n, v);
        if (v.kind == Value::Kind::integer) return Value::integer(n.k == Node::K::neg ? -v.i : v.i);
        if (v.kind == Value::Kind::floating) return Value::floating(n.k == Node::K::neg ? -v.f : v.f);
        if (v.kind == Value::Kind::boolean) return Value::integer(n.k == Node::K::neg ? -int64_t{v.b} : int64_t{v.b});
        fail(n, "bad operand type for unary " + std::string(n.k == Node::K::neg ? "-" : "+") + ": '" + type_name(v) + "'");
      }
      case Node::K::binop: {
        const Value l = eval(*n.c[0]);
        return arith(n, n.s, l, eval(*n.c[1]));
      }
      case Node::K::compare: {
        Value left = eval(*n.c[0]);
        for (size_t k = 0; k < n.names.size(); ++k) {
          Value right = eval(*n.c[k + 1]);
          if (!compare(n, n.names[k], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Node::K::and_: {
        Value l = eval(*n.c[0]);
        return truthy(l) ? eval(*n.c[1]) : l;
      }
      case Node::K::or_: {
        Value l = eval(*n.c[0]);
        return truthy(l) ? l : eval(*n.c[1]);
      }
      case Node::K::cond:
        if (truthy(eval(*n.c[0]))) return eval(*n.c[1]);
        return n.c[2] ? eval(*n.c[2]) : Value::undefined("the conditional expression had no else");
      case Node::K::list:
      case Node::K::tuple: {
        Array a;
        for (const NodeP& c : n.c) a.push_back(eval(*c));
        Value v = Value::array(std::move(a));
        v.is_tuple = n.k == Node::K::tuple;
        return v;
      }
      case Node::K::dict: {
        Object o;
        for (size_t k = 0; k + 1 < n.c.size(); k += 2) {
          const Value key = eval(*n.c[k]);
          if (key.kind != Value::Kind::string) fail(*n.c[k], "dict keys must be strings here");
          assign_key(o, key.s, eval(*n.c[k + 1]));
        }
        return Value::object(std::move(o));
      }
      default: fail(n, "internal: statement node in expression position");
    }
  }

 private:
  const std::string& name_;
  std::vector<Scope> scopes_;
};

}  // namespace

Template Template::parse(std::string_view source, std::string name) {
  Template t;
  t.name_ = std::move(name);
  if (auto bad = unicode::find_invalid_utf8(source))
    throw_input_error(t.name_ + ": at byte " + std::to_string(*bad) + ": the template is not valid UTF-8");
  const std::string src = normalize_source(source);
  Lexer lexer(src, t.name_);
  Parser parser(src, t.name_, lexer.run());
  t.root_ = parser.parse_template();
  return t;
}

std::string Template::render(const nlohmann::ordered_json& context) const {
  KVGATE_CHECK(root_ != nullptr, "jinja::Template::render on an unparsed template");
  Renderer r(name_, context);
  r.exec(*root_);
  return std::move(r.out);
}

}  // namespace kvgate::runtime::jinja
