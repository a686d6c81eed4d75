// SentencePiece half of the tokenizer (tokenizer.h): vocabulary setup, score-ordered merges with
// byte fallback, and pieces, as llama.cpp's llm_tokenizer_spm_session and token_to_piece do.
#include <algorithm>
#include <queue>

#include "core/error.h"
#include "runtime/tokenizer.h"
#include "runtime/unicode.h"

namespace kvgate::runtime {

namespace {

constexpr std::string_view kEscapedSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

[[noreturn]] void fail_key(const std::string& source, std::string_view key, const std::string& problem) {
  throw_input_error(source + ": " + std::string(key) + ": " + problem);
}

// Length of the UTF-8 sequence a lead byte starts (1 for stray continuation bytes, as
// llama.cpp's unicode_len_utf8).
size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

struct SpmBigram {
  float score;
  int32_t left;
  int32_t right;
  size_t size;  // bytes of the merged text, to recognise entries made stale by other merges
};
// Highest score first; among equal scores the leftmost pair.
struct SpmBigramAfter {
  bool operator()(const SpmBigram& a, const SpmBigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

Tokenizer Tokenizer::from_spm_vocab(VocabData data) {
  const std::string& src = data.source;
  Tokenizer t;
  t.model_ = TokenizerModel::spm;
  t.pre_name_ = "default";
  if (data.tokens.empty()) fail_key(src, "tokenizer.ggml.tokens", "empty vocabulary");
  if (data.tokens.size() > static_cast<size_t>(INT32_MAX / 2)) fail_key(src, "tokenizer.ggml.tokens", "too many tokens");
  if (!data.types.empty() && data.types.size() != data.tokens.size())
    fail_key(src, "tokenizer.ggml.token_type", "length differs from the token list");
  if (data.scores.empty()) data.scores.assign(data.tokens.size(), 0.0f);
  if (data.scores.size() != data.tokens.size()) fail_key(src, "tokenizer.ggml.scores", "length differs from the token list");
  t.tokens_ = std::move(data.tokens);
  t.types_ = data.types.empty() ? std::vector<TokenType>(t.tokens_.size(), TokenType::normal) : std::move(data.types);
  t.scores_ = std::move(data.scores);
  t.add_space_prefix_ = data.add_space_prefix;
  t.bos_ = data.bos_id;
  t.eos_ = data.eos_id;
  t.unk_ = data.unk_id;
  t.pad_ = data.pad_id;
  t.add_bos_ = data.add_bos;
  for (auto id : {t.bos_, t.eos_, t.unk_, t.pad_, data.eot_id, data.eom_id})
    if (id && !t.valid_id(*id)) fail_key(src, "special token ids", "id " + std::to_string(*id) + " is out of range");

  t.token_ids_.reserve(t.tokens_.size());
  for (size_t i = 0; i < t.tokens_.size(); ++i) {
    const std::string& tok = t.tokens_[i];
    if (auto bad = unicode::find_invalid_utf8(tok))
      fail_key(src, "tokenizer.ggml.tokens", "token " + std::to_string(i) + " is not valid UTF-8 at byte " + std::to_string(*bad));
    t.token_ids_[tok] = static_cast<int32_t>(i);  // later duplicates win, as llama.cpp's token_to_id
    const TokenType type = t.types_[i];
    if ((type == TokenType::control || type == TokenType::user_defined || type == TokenType::unknown) && !tok.empty())
      t.special_ids_.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(t.special_ids_.begin(), t.special_ids_.end(),
                   [&](int32_t a, int32_t b) { return t.tokens_[a].size() > t.tokens_[b].size(); });

  // Byte fallback: "<0xXX>", else the byte's own one-character entry (llama.cpp's byte_to_token).
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const std::string hex = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
    auto it = t.token_ids_.find(hex);
    if (it == t.token_ids_.end()) it = t.token_ids_.find(std::string(1, static_cast<char>(b)));
    t.spm_byte_token_[static_cast<size_t>(b)] = it == t.token_ids_.end() ? -1 : it->second;
  }
  t.set_end_of_generation(data);
  return t;
}

void Tokenizer::spm_fragment(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    size_t start;
    size_t n;  // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  for (size_t offs = 0; offs < text.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(text[offs])), text.size() - offs);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({offs, n, index - 1, offs + n == text.size() ? -1 : index + 1});
    offs += n;
  }
  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmBigramAfter> queue;
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const std::string_view merged = text.substr(symbols[left].start, symbols[left].n + symbols[right].n);
    const auto it = token_ids_.find(merged);
    if (it == token_ids_.end()) return;
    queue.push({scores_[static_cast<size_t>(it->second)], left, right, merged.size()});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_pair(i - 1, i);

  while (!queue.empty()) {
    const SpmBigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;
    left.n += right.n;
    right.n = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_pair(left.prev, b.left);
    try_pair(b.left, left.next);
  }

  // Every merged symbol is a vocabulary entry; a single code point may not be, and falls back
  // to one token per byte.
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].start, symbols[i].n);
    if (const auto it = token_ids_.find(piece); it != token_ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_token = spm_byte_token_[static_cast<uint8_t>(c)];
      if (byte_token >= 0) {
        out.push_back(byte_token);
      } else if (unk_) {
        out.push_back(*unk_);
      } else {
        throw_input_error("tokenizer vocabulary has no token for byte " + std::to_string(static_cast<uint8_t>(c)) +
                          " and no unknown token");
      }
    }
  }
}

std::string Tokenizer::spm_piece(int32_t id, bool render_special) const {
  const std::string& text = tokens_[static_cast<size_t>(id)];
  switch (types_[static_cast<size_t>(id)]) {
    case TokenType::control:
    case TokenType::unknown:
      return render_special ? text : std::string();
    case TokenType::user_defined:
      return text;
    case TokenType::normal: {
      std::string out;
      for (size_t at = 0; at < text.size();) {
        if (text.compare(at, kEscapedSpace.size(), kEscapedSpace) == 0) {
          out.push_back(' ');
          at += kEscapedSpace.size();
        } else {
          out.push_back(text[at++]);
        }
      }
      return out;
    }
    case TokenType::byte: {
      // "<0xXX>"; anything else renders as nothing, like other types a vocabulary should not have
      auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
      if (text.size() != 6 || text.compare(0, 3, "<0x") != 0 || text[5] != '>' || hex(text[3]) < 0 || hex(text[4]) < 0)
        return std::string();
      return std::string(1, static_cast<char>(hex(text[3]) * 16 + hex(text[4])));
    }
    case TokenType::undefined:
    case TokenType::unused:
      break;
  }
  return std::string();
}

}  // namespace kvgate::runtime
