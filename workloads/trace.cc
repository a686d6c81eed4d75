#include "workloads/trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <ostream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"

namespace kvgate::workloads {
namespace {

using nlohmann::json;

// A token count above this is certainly corrupt (no model has a billion-token context), and
// rejecting it keeps later block arithmetic far from overflow.
constexpr int64_t kMaxTokens = 1'000'000'000;
constexpr int kMooncakeBlockTokens = 512;
constexpr int kBailianBlockTokens = 16;
constexpr int kMaxBlockTokens = 1 << 20;

// Thrown by a row parser; the line loop adds FILE:LINE and applies the bad-row policy.
struct RowError {
  std::string problem;
};

[[noreturn]] void row_error(std::string problem) { throw RowError{std::move(problem)}; }

const json& require(const json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end()) row_error(std::string("missing field \"") + key + "\"");
  return *it;
}

int64_t token_count(const json& v, const char* key) {
  if (v.is_number_unsigned() || v.is_number_integer()) {
    if (v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0)
      row_error(std::string("\"") + key + "\" is negative");
    const uint64_t n = v.get<uint64_t>();
    if (n > static_cast<uint64_t>(kMaxTokens))
      row_error(std::string("\"") + key + "\" = " + std::to_string(n) + " is implausibly large");
    return static_cast<int64_t>(n);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 0 && d <= kMaxTokens && d == std::floor(d)) return static_cast<int64_t>(d);
  }
  row_error(std::string("\"") + key + "\" must be a non-negative integer, got " + v.dump());
}

double time_value(const json& v, const char* key) {
  if (!v.is_number()) row_error(std::string("\"") + key + "\" must be a number, got " + v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < 0) row_error(std::string("\"") + key + "\" must be a finite non-negative number");
  return d;
}

std::vector<uint64_t> block_id_list(const json& v, const char* key) {
  if (!v.is_array()) row_error(std::string("\"") + key + "\" must be an array of non-negative integers");
  std::vector<uint64_t> ids;
  ids.reserve(v.size());
  for (const json& e : v) {
    if (e.is_number_unsigned() || (e.is_number_integer() && e.get<int64_t>() >= 0)) {
      ids.push_back(e.get<uint64_t>());
    } else {
      row_error(std::string("\"") + key + "\" holds " + e.dump() + ", not a non-negative integer");
    }
  }
  return ids;
}

int64_t blocks_for(int64_t tokens, int block_tokens) { return (tokens + block_tokens - 1) / block_tokens; }

void check_block_count(const TraceRequest& r, int block_tokens, bool exact) {
  const int64_t need = blocks_for(r.input_tokens, block_tokens);
  const int64_t have = static_cast<int64_t>(r.block_ids.size());
  if (exact ? have != need : have > need)
    row_error("hash_ids has " + std::to_string(have) + " entries but input of " + std::to_string(r.input_tokens) +
              " tokens in " + std::to_string(block_tokens) + "-token blocks needs " + (exact ? "" : "at most ") +
              std::to_string(need));
}

json parse_json_object(std::string_view line) {
  json row;
  JsonProblem problem;
  if (!parse_json_strict(line, row, problem))
    row_error(problem.problem + " (at byte " + std::to_string(problem.byte) + " of the line)");
  if (!row.is_object()) row_error("expected a JSON object");
  return row;
}

// A session key with a one-letter namespace, so string and integer ids never collide. (Built
// by append: GCC 12 warns falsely on `"c" + std::to_string(...)`.)
std::string tagged(char tag, const std::string& id) {
  std::string key(1, tag);
  key += id;
  return key;
}

// Sessions arrive as strings or integers; they become dense indices in order of appearance.
class SessionIndex {
 public:
  int64_t get(const std::string& key) {
    auto [it, inserted] = index_.emplace(key, static_cast<int64_t>(index_.size()));
    return it->second;
  }

 private:
  std::unordered_map<std::string, int64_t> index_;
};

struct ParseState {
  Trace* trace;
  SessionIndex sessions;
  std::unordered_map<int64_t, int64_t> chat_to_session;  // Bailian chat_id -> session
  std::unordered_set<int64_t> bailian_rows;              // chat_ids that had a row of their own
};

void parse_mooncake_row(std::string_view line, ParseState& st) {
  const json row = parse_json_object(line);
  TraceRequest r;
  r.arrival_s = time_value(require(row, "timestamp"), "timestamp") / 1000.0;
  r.input_tokens = token_count(require(row, "input_length"), "input_length");
  r.output_tokens = token_count(require(row, "output_length"), "output_length");
  if (auto it = row.find("hash_ids"); it != row.end()) {
    r.block_ids = block_id_list(*it, "hash_ids");
    check_block_count(r, kMooncakeBlockTokens, true);
  }
  st.trace->requests.push_back(std::move(r));
}

void parse_bailian_row(std::string_view line, ParseState& st) {
  const json row = parse_json_object(line);
  const json& chat = require(row, "chat_id");
  const json& parent = require(row, "parent_chat_id");
  if (!chat.is_number_integer()) row_error("\"chat_id\" must be an integer");
  if (!parent.is_number_integer()) row_error("\"parent_chat_id\" must be an integer");
  TraceRequest r;
  r.arrival_s = time_value(require(row, "timestamp"), "timestamp");  // seconds in this format
  r.input_tokens = token_count(require(row, "input_length"), "input_length");
  r.output_tokens = token_count(require(row, "output_length"), "output_length");
  if (auto it = row.find("turn"); it != row.end()) {
    const int64_t turn = token_count(*it, "turn");
    if (turn < 1 || turn > std::numeric_limits<int32_t>::max()) row_error("\"turn\" must be at least 1");
    r.turn = static_cast<int32_t>(turn);
  }
  if (auto it = row.find("hash_ids"); it != row.end()) {
    r.block_ids = block_id_list(*it, "hash_ids");
    check_block_count(r, kBailianBlockTokens, false);
  }
  // A root (parent -1) opens a session; a follow-up joins its parent's. A parent not seen
  // (sampled out of the trace) still groups its children together.
  const int64_t chat_id = chat.get<int64_t>();
  const int64_t parent_id = parent.get<int64_t>();
  // The parent links must form a forest: a chat that is its own ancestor has no first turn.
  if (parent_id == chat_id) row_error("chat " + std::to_string(chat_id) + " is its own parent");
  if (st.bailian_rows.count(chat_id))
    row_error("chat_id " + std::to_string(chat_id) + " is on an earlier row too (each chat is one request)");
  if (parent_id >= 0) {
    // A chat referenced as a parent before its own row already owns a session holding exactly
    // its descendants seen so far; a parent inside that session would close a cycle.
    const auto mine = st.chat_to_session.find(chat_id);
    const auto theirs = st.chat_to_session.find(parent_id);
    if (mine != st.chat_to_session.end() && theirs != st.chat_to_session.end() && mine->second == theirs->second &&
        st.bailian_rows.count(parent_id))
      row_error("parent_chat_id " + std::to_string(parent_id) + " descends from chat " + std::to_string(chat_id) +
                " (the parent links form a cycle)");
  }
  st.bailian_rows.insert(chat_id);
  int64_t session;
  if (parent_id < 0) {
    session = st.sessions.get(tagged('c', std::to_string(chat_id)));
  } else if (auto it = st.chat_to_session.find(parent_id); it != st.chat_to_session.end()) {
    session = it->second;
  } else {
    session = st.sessions.get(tagged('c', std::to_string(parent_id)));
    st.chat_to_session[parent_id] = session;
  }
  st.chat_to_session[chat_id] = session;
  r.session = session;
  st.trace->requests.push_back(std::move(r));
}

void parse_kvgate_row(std::string_view line, ParseState& st) {
  const json row = parse_json_object(line);
  TraceRequest r;
  r.arrival_s = time_value(require(row, "timestamp_ms"), "timestamp_ms") / 1000.0;
  r.input_tokens = token_count(require(row, "input_tokens"), "input_tokens");
  r.output_tokens = token_count(require(row, "output_tokens"), "output_tokens");
  if (auto it = row.find("session"); it != row.end()) {
    if (it->is_string()) {
      r.session = st.sessions.get(tagged('s', it->get<std::string>()));
    } else if (it->is_number_integer()) {
      r.session = st.sessions.get(tagged('i', std::to_string(it->get<int64_t>())));
    } else {
      row_error("\"session\" must be a string or an integer");
    }
  }
  if (auto it = row.find("turn"); it != row.end()) {
    const int64_t turn = token_count(*it, "turn");
    if (turn < 1 || turn > std::numeric_limits<int32_t>::max()) row_error("\"turn\" must be at least 1");
    r.turn = static_cast<int32_t>(turn);
  }
  auto ids = row.find("hash_ids");
  auto block = row.find("block_tokens");
  if ((ids == row.end()) != (block == row.end())) row_error("\"hash_ids\" and \"block_tokens\" must appear together");
  if (ids != row.end()) {
    const int64_t block_tokens = token_count(*block, "block_tokens");
    if (block_tokens < 1 || block_tokens > kMaxBlockTokens) row_error("\"block_tokens\" must be in 1..1048576");
    if (st.trace->block_tokens != 0 && st.trace->block_tokens != block_tokens)
      row_error("\"block_tokens\" is " + std::to_string(block_tokens) + " but earlier rows use " +
                std::to_string(st.trace->block_tokens) + "; one trace has one block size");
    r.block_ids = block_id_list(*ids, "hash_ids");
    check_block_count(r, static_cast<int>(block_tokens), true);
    st.trace->block_tokens = static_cast<int>(block_tokens);
  }
  st.trace->requests.push_back(std::move(r));
}

// ---- CSV ----

std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> cells;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    std::string_view cell = line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!cell.empty() && (cell.front() == ' ' || cell.front() == '\t')) cell.remove_prefix(1);
    while (!cell.empty() && (cell.back() == ' ' || cell.back() == '\t' || cell.back() == '\r')) cell.remove_suffix(1);
    if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = cell.substr(1, cell.size() - 2);
    cells.push_back(cell);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return cells;
}

int64_t csv_tokens(std::string_view cell, const char* column) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (ec != std::errc() || p != cell.data() + cell.size() || cell.empty())
    row_error(std::string("column \"") + column + "\" is \"" + echo_user_text(cell) + "\", not an integer");
  if (v < 0) row_error(std::string("column \"") + column + "\" is negative");
  if (v > kMaxTokens) row_error(std::string("column \"") + column + "\" is implausibly large");
  return v;
}

double csv_seconds(std::string_view cell, const char* column) {
  double v = 0;
  auto [p, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (ec != std::errc() || p != cell.data() + cell.size() || cell.empty() || !std::isfinite(v) || v < 0)
    row_error(std::string("column \"") + column + "\" is \"" + echo_user_text(cell) + "\", not a non-negative number");
  return v;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// Azure's TIMESTAMP is "YYYY-MM-DD HH:MM:SS[.fraction]" (the 2023 and 2024 releases); a plain
// number of seconds is accepted too.
double azure_seconds(std::string_view cell) {
  if (cell.find('-') == std::string_view::npos) return csv_seconds(cell, "TIMESTAMP");
  auto bad = [&]() -> double {
    row_error("column \"TIMESTAMP\" is \"" + echo_user_text(cell) + "\", not YYYY-MM-DD HH:MM:SS[.fff]");
  };
  auto num = [&](size_t pos, size_t len) -> int {
    if (pos + len > cell.size()) bad();
    int v = 0;
    auto [p, ec] = std::from_chars(cell.data() + pos, cell.data() + pos + len, v);
    if (ec != std::errc() || p != cell.data() + pos + len) bad();
    return v;
  };
  if (cell.size() < 19 || cell[4] != '-' || cell[7] != '-' || (cell[10] != ' ' && cell[10] != 'T') ||
      cell[13] != ':' || cell[16] != ':')
    bad();
  const int year = num(0, 4), month = num(5, 2), day = num(8, 2);
  const int hour = num(11, 2), minute = num(14, 2), second = num(17, 2);
  if (month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || second > 60) bad();
  // A day the month does not have (Feb 30, Apr 31) would roll into the next month unseen.
  static constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (day > kDays[month - 1] + (month == 2 && leap ? 1 : 0))
    row_error("column \"TIMESTAMP\" is \"" + echo_user_text(cell) + "\": " + std::to_string(year) + "-" +
              (month < 10 ? "0" : "") + std::to_string(month) + " has no day " + std::to_string(day));
  double fraction = 0.0;
  size_t pos = 19;
  if (pos < cell.size() && cell[pos] == '.') {
    double scale = 0.1;
    for (++pos; pos < cell.size() && cell[pos] >= '0' && cell[pos] <= '9'; ++pos, scale /= 10)
      fraction += (cell[pos] - '0') * scale;
  }
  // A trailing zone designator ("Z", "+00:00") is ignored: only differences matter here.
  if (pos < cell.size() && cell[pos] != 'Z' && cell[pos] != '+' && cell[pos] != '-') bad();
  const int64_t days = days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  return static_cast<double>(days * 86400 + hour * 3600 + minute * 60 + second) + fraction;
}

struct CsvColumns {
  int time = -1, input = -1, output = -1;
  size_t count = 0;
};

CsvColumns csv_columns(std::string_view header, TraceFormat format, const std::string& name) {
  const auto cells = split_csv(header);
  const char* want[3];
  if (format == TraceFormat::azure) {
    want[0] = "TIMESTAMP", want[1] = "ContextTokens", want[2] = "GeneratedTokens";
  } else {
    want[0] = "Timestamp", want[1] = "Request tokens", want[2] = "Response tokens";
  }
  CsvColumns c;
  c.count = cells.size();
  int* slots[3] = {&c.time, &c.input, &c.output};
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < cells.size(); ++i) {
      if (cells[i] != want[k]) continue;
      // Two columns of one name: which one holds the numbers cannot be told.
      if (*slots[k] >= 0)
        throw_input_error_line(name, 1, std::string("the header names column \"") + want[k] + "\" twice (columns " +
                                            std::to_string(*slots[k] + 1) + " and " + std::to_string(i + 1) + ")");
      *slots[k] = static_cast<int>(i);
    }
    if (*slots[k] < 0)
      throw_input_error_line(name, 1, std::string("the ") + std::string(format_name(format)) +
                                          " header has no column \"" + want[k] + "\"");
  }
  return c;
}

void parse_csv_row(std::string_view line, const CsvColumns& c, TraceFormat format, ParseState& st) {
  const auto cells = split_csv(line);
  if (cells.size() != c.count)
    row_error("has " + std::to_string(cells.size()) + " columns, the header has " + std::to_string(c.count));
  TraceRequest r;
  r.arrival_s = format == TraceFormat::azure ? azure_seconds(cells[c.time]) : csv_seconds(cells[c.time], "Timestamp");
  r.input_tokens = csv_tokens(cells[c.input], format == TraceFormat::azure ? "ContextTokens" : "Request tokens");
  r.output_tokens = csv_tokens(cells[c.output], format == TraceFormat::azure ? "GeneratedTokens" : "Response tokens");
  st.trace->requests.push_back(std::move(r));
}

TraceFormat detect_format(std::string_view first_line, const std::string& name) {
  if (!first_line.empty() && first_line.front() == '{') {
    json row = json::parse(first_line.begin(), first_line.end(), nullptr, false);
    if (row.is_object()) {
      if (row.contains("chat_id") || row.contains("parent_chat_id")) return TraceFormat::bailian;
      if (row.contains("input_tokens") || row.contains("timestamp_ms")) return TraceFormat::kvgate;
      if (row.contains("input_length")) return TraceFormat::mooncake;
    }
  } else if (first_line.find("ContextTokens") != std::string_view::npos) {
    return TraceFormat::azure;
  } else if (first_line.find("Request tokens") != std::string_view::npos) {
    return TraceFormat::burstgpt;
  }
  throw_input_error_line(name, 1, "cannot tell the trace format from the first line; pass --format "
                                  "mooncake|azure|burstgpt|bailian|kvgate");
}

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

std::string_view format_name(TraceFormat format) {
  switch (format) {
    case TraceFormat::automatic: return "auto";
    case TraceFormat::mooncake: return "mooncake";
    case TraceFormat::azure: return "azure";
    case TraceFormat::burstgpt: return "burstgpt";
    case TraceFormat::bailian: return "bailian";
    case TraceFormat::kvgate: return "kvgate";
  }
  return "?";
}

TraceFormat parse_format_name(std::string_view name) {
  for (TraceFormat f : {TraceFormat::automatic, TraceFormat::mooncake, TraceFormat::azure, TraceFormat::burstgpt,
                        TraceFormat::bailian, TraceFormat::kvgate})
    if (format_name(f) == name) return f;
  throw_usage_error("unknown trace format '" + echo_user_text(name) +
                    "'; valid formats: auto, mooncake, azure, burstgpt, bailian, kvgate");
}

uint64_t chain_block_key(uint64_t previous_key, uint64_t block_id) {
  // splitmix64's finalizer over a combination that is not symmetric in its inputs.
  uint64_t z = previous_key * 0x9e3779b97f4a7c15ull + block_id + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Trace parse_trace(std::string_view text, const std::string& name, TraceFormat format, BadRowPolicy bad_rows) {
  Trace trace;
  trace.source = name;
  ParseState st{&trace, {}, {}, {}};

  uint64_t line_no = 0;
  size_t pos = 0;
  // Spreadsheet exports often start with a UTF-8 byte-order mark; it is not part of the header.
  if (text.starts_with("\xEF\xBB\xBF")) pos = 3;
  CsvColumns columns;
  bool need_header = false;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (blank(line)) continue;
    if (format == TraceFormat::automatic) format = detect_format(line, name);
    if (trace.format == TraceFormat::automatic) {
      trace.format = format;
      need_header = format == TraceFormat::azure || format == TraceFormat::burstgpt;
      if (format == TraceFormat::mooncake) trace.block_tokens = kMooncakeBlockTokens;
      if (format == TraceFormat::bailian) trace.block_tokens = kBailianBlockTokens;
      trace.has_sessions = format == TraceFormat::bailian;
    }
    if (need_header) {
      columns = csv_columns(line, format, name);
      need_header = false;
      continue;
    }
    ++trace.rows_read;
    try {
      switch (format) {
        case TraceFormat::mooncake: parse_mooncake_row(line, st); break;
        case TraceFormat::bailian: parse_bailian_row(line, st); break;
        case TraceFormat::kvgate: parse_kvgate_row(line, st); break;
        case TraceFormat::azure:
        case TraceFormat::burstgpt: parse_csv_row(line, columns, format, st); break;
        case TraceFormat::automatic: break;
      }
    } catch (const RowError& e) {
      if (bad_rows == BadRowPolicy::abort) throw_input_error_line(name, line_no, e.problem);
      if (trace.bad_rows_skipped == 0) trace.first_bad_row = name + ":" + std::to_string(line_no) + ": " + e.problem;
      ++trace.bad_rows_skipped;
    }
  }
  if (trace.format == TraceFormat::automatic) trace.format = format;
  if (trace.requests.empty()) throw_input_error(name + ": the trace has no valid requests");

  if (trace.format == TraceFormat::kvgate) {
    for (const TraceRequest& r : trace.requests) trace.has_sessions = trace.has_sessions || r.session >= 0;
    // A kvgate trace without any hash_ids carries no prefix information.
  }
  std::stable_sort(trace.requests.begin(), trace.requests.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  const double t0 = trace.requests.front().arrival_s;
  for (TraceRequest& r : trace.requests) r.arrival_s -= t0;
  return trace;
}

Trace load_trace(const std::string& path, TraceFormat format, BadRowPolicy bad_rows) {
  MappedFile file(path);
  std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  return parse_trace(text, path, format, bad_rows);
}

void write_kvgate_trace(const Trace& trace, std::ostream& out) {
  for (const TraceRequest& r : trace.requests) {
    json row = json::object();
    if (r.session >= 0) row["session"] = std::string("s").append(std::to_string(r.session));
    if (r.turn > 0) row["turn"] = r.turn;
    row["timestamp_ms"] = std::round(r.arrival_s * 1e6) / 1e3;  // microsecond resolution
    row["input_tokens"] = r.input_tokens;
    row["output_tokens"] = r.output_tokens;
    if (trace.block_tokens > 0 && !r.block_ids.empty()) {
      row["block_tokens"] = trace.block_tokens;
      row["hash_ids"] = r.block_ids;
    }
    out << row.dump() << '\n';
  }
}

}  // namespace kvgate::workloads
