#include "evalsets/sweep.h"

#include "core/error.h"
#include "evalsets/utf8.h"

namespace kvgate::evalsets {
namespace {

// estimate_tokens of a growing prefix, one byte at a time (the same counts and formula).
struct RunningEstimate {
  size_t digits = 0, punctuation = 0, letters = 0, other = 0;
  void add(unsigned char c) {
    if (c >= '0' && c <= '9') ++digits;
    else if (c >= 0x80) other += (c & 0xC0) != 0x80;
    else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ' ') ++letters;
    else ++punctuation;
  }
  size_t tokens() const { return digits + punctuation * 2 / 3 + (letters + 4) / 5 + (other * 5 + 1) / 2; }
};

// How far past the warm-up a space is looked for before a code-point boundary is taken instead.
constexpr size_t kSpaceSearchBytes = 256;

}  // namespace

size_t sweep_begin(std::string_view text, size_t warmup_tokens) {
  RunningEstimate e;
  size_t reached = std::string_view::npos;
  for (size_t i = 0; i < text.size(); ++i) {
    e.add(static_cast<unsigned char>(text[i]));
    if (e.tokens() >= warmup_tokens) {
      reached = i + 1;
      break;
    }
  }
  if (reached == std::string_view::npos || reached >= text.size()) return std::string_view::npos;
  for (size_t i = reached; i < text.size() && i < reached + kSpaceSearchBytes; ++i)
    if (text[i] == ' ' || text[i] == '\n') return i;
  size_t at = reached;
  while (at < text.size() && !on_code_point_boundary(text, at)) ++at;
  return at < text.size() ? at : std::string_view::npos;
}

size_t sweep_cut(std::string_view text, size_t from, size_t max_tokens) {
  // The latest cut of each kind that still fits, with the estimated tokens before it.
  struct Cut {
    size_t at = 0, tokens = 0;
  } paragraph{from, 0}, line{from, 0}, space{from, 0};
  RunningEstimate e;
  for (size_t i = from; i < text.size(); ++i) {
    const char c = text[i];
    const size_t before = e.tokens();
    if (before > max_tokens) break;
    if (c == '\n' && i + 1 < text.size() && text[i + 1] == '\n') paragraph = {i, before};
    if (c == '\n') line = {i, before};
    if (c == ' ' && i > from && (text[i - 1] == '.' || text[i - 1] == '?' || text[i - 1] == '!')) line = {i, before};
    if (c == ' ' || c == '\n') space = {i, before};
    e.add(static_cast<unsigned char>(c));
  }
  if (e.tokens() <= max_tokens) return text.size();
  // A paragraph break unless it leaves the piece short of kSweepMinFillPercent (from-text would
  // then drop it); then a line or sentence end on the same terms; then the last space.
  const size_t enough = max_tokens * kSweepMinFillPercent / 100;
  if (paragraph.at > from && paragraph.tokens >= enough) return paragraph.at;
  if (line.at > from && line.tokens >= enough) return line.at;
  return space.at;
}

EvalItem make_sweep_item(std::string id, std::string domain, std::string text, nlohmann::json meta) {
  const size_t begin = sweep_begin(text);
  if (begin == std::string::npos)
    throw_input_error("item " + echo_user_text(id) + ": a depth sweep needs text after its warm-up of " +
                      std::to_string(kSweepWarmupTokens) + " estimated tokens (the text has " +
                      std::to_string(estimate_tokens(text)) + ")");
  EvalItem item;
  item.id = std::move(id);
  item.domain = std::move(domain);
  item.spans = {{begin, text.size()}};
  item.text = std::move(text);
  item.has_text = true;
  item.score = ScoreKind::spans;
  item.meta = meta.is_object() ? std::move(meta) : nlohmann::json::object();
  item.meta["sweep"] = {{"warmup_tokens", kSweepWarmupTokens}};
  return item;
}

std::string item_document(const EvalItem& item) {
  if (item.has_text) return item.text;
  std::string out;
  for (const Message& m : item.messages)
    for (const std::string& part : {m.content, tool_calls_text(m)}) {
      if (part.empty()) continue;
      if (!out.empty()) out += "\n\n";
      out += part;
    }
  return out;
}

bool is_sweep_item(const EvalItem& item) { return item.meta.is_object() && item.meta.contains("sweep"); }

}  // namespace kvgate::evalsets
