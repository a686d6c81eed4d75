#pragma once
// Eval items: the JSONL format every eval set uses (docs/evalsets.md), its validating loader
// and its canonical serialization. An item says what the model reads (messages or raw text),
// which bytes of it are scored, and optionally the gold answer.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvgate::evalsets {

struct Message {
  std::string role;     // system | user | assistant | tool
  std::string content;  // may be empty only on an assistant message that carries tool_calls
  std::string name;          // optional
  std::string tool_call_id;  // optional, tool messages: which call this result answers
  nlohmann::json tool_calls;  // null, or OpenAI-style [{"id", "type":"function", "function":{"name","arguments"}}]
};

enum class ScoreKind {
  answer,  // the last message (an assistant message) is the scored continuation
  turns,   // every assistant message with non-empty content is scored, each with what precedes it
  spans,   // explicit byte ranges into "text", or into the last message's content
};

struct ByteSpan {
  size_t begin = 0;  // UTF-8 byte offsets, on code-point boundaries, begin < end
  size_t end = 0;
};

struct EvalItem {
  std::string id;
  std::string domain;
  std::vector<Message> messages;  // exactly one of messages / text is used
  std::string text;
  bool has_text = false;
  ScoreKind score = ScoreKind::answer;
  std::vector<ByteSpan> spans;  // ScoreKind::spans only
  std::string answer;
  bool has_answer = false;
  nlohmann::json meta;  // null or an object
};

// One scored piece of an item, as a harness consumes it: the model reads everything before
// `begin` (previous messages rendered by the chat template, then content[0, begin)) and is
// scored on content[begin, end).
struct ScoredTarget {
  static constexpr size_t kText = static_cast<size_t>(-1);
  size_t message_index = kText;  // kText for raw-text items
  size_t begin = 0;
  size_t end = 0;
};
std::vector<ScoredTarget> scored_targets(const EvalItem& item);

// Parses and validates one JSONL line; problems are reported as "FILE:LINE: problem"
// (kvgate::Error, input kind). Uniqueness of ids is checked by the file loaders.
EvalItem parse_item(std::string_view line, const std::string& file, uint64_t line_number);

// Loads a JSONL file (blank lines are allowed and skipped) or text already read from one.
std::vector<EvalItem> load_items(const std::string& path);
std::vector<EvalItem> parse_items(std::string_view jsonl, const std::string& file);

// Canonical serialization: keys sorted, no insignificant whitespace, UTF-8 unescaped. Loading
// a canonical line and writing it again gives the same bytes.
nlohmann::json item_to_json(const EvalItem& item);
std::string canonical_line(const EvalItem& item);  // without the trailing newline
std::string canonical_jsonl(const std::vector<EvalItem>& items);  // one line + '\n' per item

// xxHash64 of canonical_jsonl(items): the identity the results store records for an eval set.
uint64_t evalset_hash(const std::vector<EvalItem>& items);

// Throws an input error naming the file and line of the second occurrence of an id.
// line_numbers may be empty (then item indices are reported as lines, 1-based).
void check_unique_ids(const std::vector<EvalItem>& items, const std::string& file,
                      const std::vector<uint64_t>& line_numbers);

// Renders an assistant message's tool calls as text ("<tool_call>\n{json}\n</tool_call>", one
// block per call, as Hermes/Qwen-style templates do) for chat templates that have no tool
// syntax of their own. Empty when the message has no tool calls.
std::string tool_calls_text(const Message& message);

// Rough token count for length targets. There is no tokenizer in this layer, so it counts
// characters the way the default model's tokenizer (SmolLM2) spends tokens: one per digit,
// ~4 bytes per token for other ASCII (English, code), ~2.5 per non-ASCII character (Hangul;
// a multilingual tokenizer needs about a third of that). Measured ratios: docs/evalsets.md.
size_t estimate_tokens(std::string_view text);
size_t estimate_tokens(const EvalItem& item);

}  // namespace kvgate::evalsets
