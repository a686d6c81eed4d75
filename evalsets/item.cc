#include "evalsets/item.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/json_input.h"
#include "core/hash.h"
#include "core/mapped_file.h"
#include "evalsets/utf8.h"

namespace kvgate::evalsets {
namespace {

using nlohmann::json;

// Items are read whole into memory; a line this long is a broken file, not an eval item.
constexpr size_t kMaxLineBytes = 64u << 20;

struct LineContext {
  const std::string& file;
  uint64_t line;
  [[noreturn]] void fail(const std::string& problem) const { throw_input_error_line(file, line, problem); }
};

bool valid_domain(const std::string& d) {
  if (d.empty() || d.size() > 64) return false;
  return std::all_of(d.begin(), d.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

const std::string& require_string(const json& obj, const char* key, const std::string& where, const LineContext& ctx) {
  auto it = obj.find(key);
  if (it == obj.end()) ctx.fail(where + "missing field \"" + key + "\"");
  if (!it->is_string()) ctx.fail(where + "field \"" + key + "\" must be a string");
  return it->get_ref<const std::string&>();
}

void check_tool_calls(const json& calls, const std::string& where, const LineContext& ctx) {
  if (!calls.is_array() || calls.empty()) ctx.fail(where + "\"tool_calls\" must be a non-empty array");
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& call = calls[i];
    const std::string w = where + "tool_calls[" + std::to_string(i) + "]: ";
    if (!call.is_object()) ctx.fail(w + "must be an object");
    for (const auto& [key, value] : call.items())
      if (key != "id" && key != "type" && key != "function") ctx.fail(w + "unknown field \"" + echo_user_text(key) + "\"");
    if (call.contains("id") && !call["id"].is_string()) ctx.fail(w + "\"id\" must be a string");
    if (call.contains("type") && call["type"] != "function") ctx.fail(w + "\"type\" must be \"function\"");
    auto fn = call.find("function");
    if (fn == call.end() || !fn->is_object()) ctx.fail(w + "needs a \"function\" object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      ctx.fail(w + "\"function\" needs a non-empty string \"name\"");
    auto args = fn->find("arguments");
    if (args == fn->end() || !(args->is_string() || args->is_object()))
      ctx.fail(w + "\"function\" needs \"arguments\" (a JSON string or object)");
  }
}

Message parse_message(const json& m, size_t index, const LineContext& ctx) {
  const std::string where = "messages[" + std::to_string(index) + "]: ";
  if (!m.is_object()) ctx.fail(where + "must be an object");
  for (const auto& [key, value] : m.items())
    if (key != "role" && key != "content" && key != "name" && key != "tool_call_id" && key != "tool_calls")
      ctx.fail(where + "unknown field \"" + echo_user_text(key) + "\"");
  Message msg;
  msg.role = require_string(m, "role", where, ctx);
  if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
    ctx.fail(where + "role \"" + echo_user_text(msg.role) + "\" is not one of system, user, assistant, tool");
  msg.content = require_string(m, "content", where, ctx);
  if (m.contains("name")) msg.name = require_string(m, "name", where, ctx);
  if (m.contains("tool_call_id")) {
    if (msg.role != "tool") ctx.fail(where + "\"tool_call_id\" is only allowed on tool messages");
    msg.tool_call_id = require_string(m, "tool_call_id", where, ctx);
  }
  if (m.contains("tool_calls")) {
    if (msg.role != "assistant") ctx.fail(where + "\"tool_calls\" is only allowed on assistant messages");
    check_tool_calls(m["tool_calls"], where, ctx);
    msg.tool_calls = m["tool_calls"];
  }
  if (msg.content.empty() && msg.tool_calls.is_null()) ctx.fail(where + "empty content");
  return msg;
}

void parse_score(const json& s, EvalItem& item, const LineContext& ctx) {
  if (!s.is_object()) ctx.fail("\"score\" must be an object");
  const std::string kind = require_string(s, "kind", "score: ", ctx);
  for (const auto& [key, value] : s.items())
    if (key != "kind" && !(key == "spans" && kind == "spans")) ctx.fail("score: unknown field \"" + echo_user_text(key) + "\"");
  if (kind == "answer") {
    item.score = ScoreKind::answer;
    if (item.has_text) ctx.fail("score kind \"answer\" needs \"messages\"; use \"spans\" for raw text");
    const Message& last = item.messages.back();
    if (last.role != "assistant") ctx.fail("score kind \"answer\" needs the last message to be an assistant message");
    if (last.content.empty()) ctx.fail("score kind \"answer\": the last assistant message has empty content");
    if (item.messages.size() < 2) ctx.fail("score kind \"answer\" needs at least one message before the answer");
  } else if (kind == "turns") {
    item.score = ScoreKind::turns;
    if (item.has_text) ctx.fail("score kind \"turns\" needs \"messages\"");
    bool any = false;
    for (size_t i = 0; i < item.messages.size(); ++i)
      if (item.messages[i].role == "assistant" && !item.messages[i].content.empty()) {
        if (i == 0) ctx.fail("score kind \"turns\": messages[0] is a scored assistant message with nothing before it");
        any = true;
      }
    if (!any) ctx.fail("score kind \"turns\" needs at least one assistant message with content");
  } else if (kind == "spans") {
    item.score = ScoreKind::spans;
    auto it = s.find("spans");
    if (it == s.end() || !it->is_array() || it->empty()) ctx.fail("score: \"spans\" must be a non-empty array of [begin, end]");
    const std::string& target = item.has_text ? item.text : item.messages.back().content;
    const char* target_name = item.has_text ? "text" : "the last message's content";
    size_t previous_end = 0;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& sp = (*it)[i];
      const std::string w = "score: spans[" + std::to_string(i) + "]: ";
      if (!sp.is_array() || sp.size() != 2 || !sp[0].is_number_unsigned() || !sp[1].is_number_unsigned())
        ctx.fail(w + "must be [begin, end] with non-negative integer byte offsets");
      const uint64_t b = sp[0].get<uint64_t>(), e = sp[1].get<uint64_t>();
      if (b >= e) ctx.fail(w + "begin " + std::to_string(b) + " must be less than end " + std::to_string(e));
      if (e > target.size())
        ctx.fail(w + "end " + std::to_string(e) + " is past the end of " + target_name + " (" +
                 std::to_string(target.size()) + " bytes)");
      if (b < previous_end) ctx.fail(w + "spans must be in order and must not overlap");
      if (!on_code_point_boundary(target, b) || !on_code_point_boundary(target, e))
        ctx.fail(w + "offsets must fall on UTF-8 code-point boundaries");
      if (!item.has_text && b == 0 && item.messages.size() == 1)
        ctx.fail(w + "a span starting at byte 0 of the only message has nothing before it");
      if (item.has_text && b == 0) ctx.fail(w + "a span at byte 0 of the text has nothing before it");
      item.spans.push_back({static_cast<size_t>(b), static_cast<size_t>(e)});
      previous_end = static_cast<size_t>(e);
    }
  } else {
    ctx.fail("score kind \"" + echo_user_text(kind) + "\" is not one of answer, turns, spans");
  }
}

}  // namespace

EvalItem parse_item(std::string_view line, const std::string& file, uint64_t line_number) {
  const LineContext ctx{file, line_number};
  if (line.size() > kMaxLineBytes) ctx.fail("line longer than 64 MiB");
  const size_t bad = find_invalid_utf8(line);
  if (bad != std::string_view::npos) ctx.fail("invalid UTF-8 at byte " + std::to_string(bad) + " of the line");
  const json j = parse_json_line(line, file, line_number);
  if (!j.is_object()) ctx.fail("an item must be a JSON object");
  for (const auto& [key, value] : j.items())
    if (key != "id" && key != "domain" && key != "messages" && key != "text" && key != "score" && key != "answer" &&
        key != "meta")
      ctx.fail("unknown field \"" + echo_user_text(key) + "\"");
  EvalItem item;
  item.id = require_string(j, "id", "", ctx);
  if (item.id.empty()) ctx.fail("\"id\" is empty");
  item.domain = require_string(j, "domain", "", ctx);
  if (!valid_domain(item.domain)) ctx.fail("\"domain\" must be 1-64 characters of a-z, 0-9, '_' or '-'");
  const bool has_messages = j.contains("messages");
  item.has_text = j.contains("text");
  if (has_messages == item.has_text) ctx.fail("an item needs exactly one of \"messages\" and \"text\"");
  if (has_messages) {
    const json& ms = j["messages"];
    if (!ms.is_array() || ms.empty()) ctx.fail("\"messages\" must be a non-empty array");
    for (size_t i = 0; i < ms.size(); ++i) item.messages.push_back(parse_message(ms[i], i, ctx));
  } else {
    item.text = require_string(j, "text", "", ctx);
    if (item.text.empty()) ctx.fail("\"text\" is empty");
  }
  auto score = j.find("score");
  if (score == j.end()) ctx.fail("missing field \"score\"");
  parse_score(*score, item, ctx);
  if (j.contains("answer")) {
    item.answer = require_string(j, "answer", "", ctx);
    item.has_answer = true;
  }
  if (j.contains("meta")) {
    if (!j["meta"].is_object()) ctx.fail("\"meta\" must be an object");
    item.meta = j["meta"];
  }
  return item;
}

std::vector<EvalItem> parse_items(std::string_view jsonl, const std::string& file) {
  std::vector<EvalItem> items;
  std::vector<uint64_t> lines;
  uint64_t line_number = 0;
  size_t pos = 0;
  while (pos < jsonl.size()) {
    size_t end = jsonl.find('\n', pos);
    if (end == std::string_view::npos) end = jsonl.size();
    std::string_view line = jsonl.substr(pos, end - pos);
    ++line_number;
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    items.push_back(parse_item(line, file, line_number));
    lines.push_back(line_number);
  }
  check_unique_ids(items, file, lines);
  return items;
}

std::vector<EvalItem> load_items(const std::string& path) {
  const std::string text = read_whole_file(path, kMaxDataFileBytes);
  std::vector<EvalItem> items = parse_items(text, path);
  if (items.empty()) throw_input_error(path + ": no items");
  return items;
}

void check_unique_ids(const std::vector<EvalItem>& items, const std::string& file,
                      const std::vector<uint64_t>& line_numbers) {
  std::map<std::string_view, size_t> first_seen;
  for (size_t i = 0; i < items.size(); ++i) {
    auto [it, inserted] = first_seen.emplace(items[i].id, i);
    if (!inserted) {
      const auto line_of = [&](size_t k) { return line_numbers.empty() ? k + 1 : line_numbers[k]; };
      throw_input_error_line(file, line_of(i),
                             "duplicate id \"" + echo_user_text(items[i].id) + "\" (first used on line " +
                                 std::to_string(line_of(it->second)) + ")");
    }
  }
}

nlohmann::json item_to_json(const EvalItem& item) {
  json j;
  j["id"] = item.id;
  j["domain"] = item.domain;
  if (item.has_text) {
    j["text"] = item.text;
  } else {
    json ms = json::array();
    for (const Message& m : item.messages) {
      json o;
      o["role"] = m.role;
      o["content"] = m.content;
      if (!m.name.empty()) o["name"] = m.name;
      if (!m.tool_call_id.empty()) o["tool_call_id"] = m.tool_call_id;
      if (!m.tool_calls.is_null()) o["tool_calls"] = m.tool_calls;
      ms.push_back(std::move(o));
    }
    j["messages"] = std::move(ms);
  }
  json score;
  switch (item.score) {
    case ScoreKind::answer: score["kind"] = "answer"; break;
    case ScoreKind::turns: score["kind"] = "turns"; break;
    case ScoreKind::spans: {
      score["kind"] = "spans";
      json spans = json::array();
      for (const ByteSpan& s : item.spans) spans.push_back({s.begin, s.end});
      score["spans"] = std::move(spans);
      break;
    }
  }
  j["score"] = std::move(score);
  if (item.has_answer) j["answer"] = item.answer;
  if (!item.meta.is_null()) j["meta"] = item.meta;
  return j;
}

std::string canonical_line(const EvalItem& item) { return item_to_json(item).dump(); }

std::string canonical_jsonl(const std::vector<EvalItem>& items) {
  std::string out;
  for (const EvalItem& item : items) {
    out += canonical_line(item);
    out += '\n';
  }
  return out;
}

uint64_t evalset_hash(const std::vector<EvalItem>& items) { return xxhash64(canonical_jsonl(items)); }

std::vector<ScoredTarget> scored_targets(const EvalItem& item) {
  std::vector<ScoredTarget> targets;
  switch (item.score) {
    case ScoreKind::answer: {
      const size_t last = item.messages.size() - 1;
      targets.push_back({last, 0, item.messages[last].content.size()});
      break;
    }
    case ScoreKind::turns:
      for (size_t i = 0; i < item.messages.size(); ++i)
        if (item.messages[i].role == "assistant" && !item.messages[i].content.empty())
          targets.push_back({i, 0, item.messages[i].content.size()});
      break;
    case ScoreKind::spans: {
      const size_t index = item.has_text ? ScoredTarget::kText : item.messages.size() - 1;
      for (const ByteSpan& s : item.spans) targets.push_back({index, s.begin, s.end});
      break;
    }
  }
  return targets;
}

std::string tool_calls_text(const Message& message) {
  std::string out;
  if (!message.tool_calls.is_array()) return out;
  for (const json& call : message.tool_calls) {
    const json& fn = call["function"];
    json flat = {{"name", fn["name"]}};
    if (fn["arguments"].is_string()) {
      // Arguments are usually a JSON document in a string; show it as JSON when it is one (and
      // as the string it is otherwise, nesting too deep to copy included).
      json parsed;
      JsonProblem problem;
      flat["arguments"] = parse_json_strict(fn["arguments"].get<std::string>(), parsed, problem) ? parsed : fn["arguments"];
    } else {
      flat["arguments"] = fn["arguments"];
    }
    if (!out.empty()) out += '\n';
    out += "<tool_call>\n" + flat.dump() + "\n</tool_call>";
  }
  return out;
}

size_t estimate_tokens(std::string_view text) {
  // Calibrated on the default model's tokenizer (SmolLM2, docs/evalsets.md): it splits
  // numbers into single digits, has few merges for Hangul (~2.5 tokens per syllable) and
  // spends about a token per punctuation mark; letters and spaces run ~5 bytes per token.
  size_t digits = 0, punctuation = 0, letters = 0, other = 0;
  for (unsigned char c : text) {
    if (c >= '0' && c <= '9') ++digits;
    else if (c >= 0x80) other += (c & 0xC0) != 0x80;
    else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ' ') ++letters;
    else ++punctuation;
  }
  return digits + punctuation * 2 / 3 + (letters + 4) / 5 + (other * 5 + 1) / 2;
}

size_t estimate_tokens(const EvalItem& item) {
  if (item.has_text) return estimate_tokens(item.text);
  // A few tokens per message for the chat template's role markers.
  size_t total = 0;
  for (const Message& m : item.messages) {
    total += 4 + estimate_tokens(m.content);
    // Tool calls are counted as the text a template without tool syntax would show.
    total += estimate_tokens(tool_calls_text(m));
  }
  return total;
}

}  // namespace kvgate::evalsets
