#include "runtime/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "core/error.h"
#include "core/hash.h"
#include "runtime/gguf.h"
#include "runtime/unicode.h"

namespace kvgate::runtime {

namespace {

using unicode::CharClass;

// Pre-tokenizer names llama.cpp maps to each pattern (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_*).
std::optional<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
  if (name == "default" || name == "gpt2" || name == "gpt-2" || name == "mpt" || name == "olmo" ||
      name == "jais") {
    return PreTokenizer::gpt2;
  }
  if (name == "smollm" || name == "starcoder" || name == "refact" || name == "command-r" ||
      name == "codeshell" || name == "exaone" || name == "minerva-7b") {
    return PreTokenizer::smollm;
  }
  if (name == "llama3" || name == "llama-v3" || name == "llama-bpe" || name == "falcon3" ||
      name == "pixtral") {
    return PreTokenizer::llama3;
  }
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::qwen2;
  if (name == "none") return PreTokenizer::none;
  return std::nullopt;
}

// A code-point range [begin, end) of the fragment being split, with the classes of its code
// points; positions outside the range read as a sentinel, as llama.cpp's splitters do, so the
// lookahead of \s+(?!\S) treats a range end like the end of the text.
class Segment {
 public:
  Segment(const std::vector<uint32_t>& cps, const std::vector<CharClass>& classes, size_t begin, size_t end)
      : cps_(cps), classes_(classes), begin_(begin), end_(end) {}

  static constexpr uint32_t kOutside = 0xFFFFFFFF;
  bool inside(size_t pos) const { return pos >= begin_ && pos < end_; }
  uint32_t cp(size_t pos) const { return inside(pos) ? cps_[pos] : kOutside; }
  bool is(size_t pos, CharClass c) const { return inside(pos) && classes_[pos] == c; }
  // [^\s\p{L}\p{N}]
  bool is_other(size_t pos) const { return is(pos, CharClass::other); }
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }

 private:
  const std::vector<uint32_t>& cps_;
  const std::vector<CharClass>& classes_;
  size_t begin_, end_;
};

uint32_t ascii_lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

// Length of a contraction ('s 't 're 've 'm 'll 'd) starting at pos, 0 if none.
size_t contraction_length(const Segment& s, size_t pos, bool ignore_case) {
  if (s.cp(pos) != '\'' || !s.inside(pos + 1)) return 0;
  auto lower = [&](size_t p) { return ignore_case ? ascii_lower(s.cp(p)) : s.cp(p); };
  const uint32_t c1 = lower(pos + 1);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (!s.inside(pos + 2)) return 0;
  const uint32_t c2 = lower(pos + 2);
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Mirrors llama.cpp's unicode_regex_split_custom_gpt2; appends the end of every word.
void split_gpt2(const Segment& s, std::vector<size_t>& ends) {
  size_t pos = s.begin();
  while (pos < s.end()) {
    if (size_t n = contraction_length(s, pos, false)) {
      pos += n;
      ends.push_back(pos);
      continue;
    }
    const bool space = s.cp(pos) == ' ';
    const size_t body = pos + (space ? 1 : 0);  // where the class after an optional space starts
    if (s.is(body, CharClass::letter) || s.is(body, CharClass::number) || s.is_other(body)) {
      const CharClass c = s.is(body, CharClass::letter) ? CharClass::letter
                          : s.is(body, CharClass::number) ? CharClass::number
                                                          : CharClass::other;
      pos = body;
      while (s.is(pos, c)) ++pos;
      ends.push_back(pos);
      continue;
    }
    size_t n_space = 0;
    while (s.is(pos + n_space, CharClass::whitespace)) ++n_space;
    if (n_space > 1 && s.inside(pos + n_space)) {
      // \s+(?!\S): leave the last whitespace to prefix the next word.
      pos += n_space - 1;
      ends.push_back(pos);
      continue;
    }
    if (n_space > 0) {
      pos += n_space;
      ends.push_back(pos);
      continue;
    }
    ends.push_back(++pos);
  }
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+    Mirrors llama.cpp's unicode_regex_split_custom_llama3. With
// max_digits 1 it is Qwen2's pattern (\p{N} one at a time).
void split_llama3(const Segment& s, std::vector<size_t>& ends, size_t max_digits = 3) {
  auto is_newline = [&](size_t p) { return s.cp(p) == '\r' || s.cp(p) == '\n'; };
  size_t pos = s.begin();
  while (pos < s.end()) {
    if (size_t n = contraction_length(s, pos, true)) {
      pos += n;
      ends.push_back(pos);
      continue;
    }
    if (!is_newline(pos) && !s.is(pos, CharClass::number)) {
      if (s.is(pos, CharClass::letter) || s.is(pos + 1, CharClass::letter)) {
        ++pos;
        while (s.is(pos, CharClass::letter)) ++pos;
        ends.push_back(pos);
        continue;
      }
    }
    if (s.is(pos, CharClass::number)) {
      size_t run = 0;
      while (s.is(pos, CharClass::number)) {
        ++pos;
        if (++run == max_digits) {
          ends.push_back(pos);
          run = 0;
        }
      }
      if (run > 0) ends.push_back(pos);
      continue;
    }
    const size_t body = pos + (s.cp(pos) == ' ' ? 1 : 0);
    if (s.is_other(body)) {
      pos = body;
      while (s.is_other(pos)) ++pos;
      while (is_newline(pos)) ++pos;
      ends.push_back(pos);
      continue;
    }
    size_t n_space = 0;
    size_t after_last_newline = 0;
    while (s.is(pos + n_space, CharClass::whitespace)) {
      if (is_newline(pos + n_space)) after_last_newline = pos + n_space + 1;
      ++n_space;
    }
    if (after_last_newline > 0) {
      pos = after_last_newline;
      ends.push_back(pos);
      continue;
    }
    if (n_space > 1 && s.inside(pos + n_space)) {
      pos += n_space - 1;
      ends.push_back(pos);
      continue;
    }
    if (n_space > 0) {
      pos += n_space;
      ends.push_back(pos);
      continue;
    }
    ends.push_back(++pos);
  }
}

struct Bigram {
  int32_t rank;
  int32_t left;  // symbol positions in the word
  int32_t right;
  int32_t left_symbol;  // symbol ids when queued, to recognise entries made stale by a merge
  int32_t right_symbol;
  int32_t merged_symbol;
};
// Lowest rank first; among equal ranks the leftmost pair, as llama.cpp's llm_bigram_bpe.
struct BigramAfter {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

[[noreturn]] void fail_key(const std::string& file, std::string_view key, const std::string& problem) {
  throw_input_error(file + ": " + std::string(key) + ": " + problem);
}

}  // namespace

const char* token_type_name(TokenType type) {
  switch (type) {
    case TokenType::undefined: return "undefined";
    case TokenType::normal: return "normal";
    case TokenType::unknown: return "unknown";
    case TokenType::control: return "control";
    case TokenType::user_defined: return "user_defined";
    case TokenType::unused: return "unused";
    case TokenType::byte: return "byte";
  }
  return "invalid";
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  const std::string& name = file.name();
  VocabData data;
  data.source = name;

  const auto model = file.get_string("tokenizer.ggml.model");
  if (!model) fail_key(name, "tokenizer.ggml.model", "missing; the file has no tokenizer");
  if (*model != "gpt2" && *model != "llama") {
    std::string problem = "\"";  // built with append: GCC 12 misreports "..." + std::string (-Wrestrict)
    problem.append(*model).append("\" is not supported (byte-level BPE \"gpt2\" and SentencePiece \"llama\" are)");
    fail_key(name, "tokenizer.ggml.model", problem);
  }
  const bool spm = *model == "llama";
  data.model = spm ? TokenizerModel::spm : TokenizerModel::bpe;
  // llama.cpp reads no pre-tokenizer for SentencePiece vocabularies.
  data.pre = spm ? "default" : std::string(file.get_string("tokenizer.ggml.pre").value_or("default"));

  auto string_array = [&](std::string_view key, bool required) {
    std::vector<std::string> out;
    const GgufArray* a = file.get_array(key);
    if (!a) {
      if (required) fail_key(name, key, "missing");
      return out;
    }
    if (a->element_type != GgufValueType::string) fail_key(name, key, "is not an array of strings");
    out.reserve(a->strings.size());
    for (std::string_view s : a->strings) out.emplace_back(s);
    return out;
  };
  data.tokens = string_array("tokenizer.ggml.tokens", true);
  data.merges = string_array("tokenizer.ggml.merges", !spm);
  if (spm) {
    // Without scores every merge ties, as in llama.cpp (score 0).
    if (const GgufArray* scores = file.get_array("tokenizer.ggml.scores")) {
      if (scores->count != data.tokens.size())
        fail_key(name, "tokenizer.ggml.scores",
                 std::to_string(scores->count) + " entries for " + std::to_string(data.tokens.size()) + " tokens");
      data.scores.reserve(scores->count);
      for (uint64_t i = 0; i < scores->count; ++i) {
        const auto v = GgufValue::array_float(*scores, i);
        if (!v) fail_key(name, "tokenizer.ggml.scores", "entry " + std::to_string(i) + " is not a number");
        data.scores.push_back(static_cast<float>(*v));
      }
    } else {
      data.scores.assign(data.tokens.size(), 0.0f);
    }
    data.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  }

  if (const GgufArray* types = file.get_array("tokenizer.ggml.token_type")) {
    if (types->count != data.tokens.size()) {
      fail_key(name, "tokenizer.ggml.token_type",
               std::to_string(types->count) + " entries for " + std::to_string(data.tokens.size()) + " tokens");
    }
    data.types.reserve(types->count);
    for (uint64_t i = 0; i < types->count; ++i) {
      const auto t = GgufValue::array_uint(*types, i);
      if (!t || *t > static_cast<uint64_t>(TokenType::byte)) {
        fail_key(name, "tokenizer.ggml.token_type", "entry " + std::to_string(i) + " is not a token type (0..6)");
      }
      data.types.push_back(static_cast<TokenType>(*t));
    }
  }

  auto id_key = [&](std::string_view key) -> std::optional<int32_t> {
    const auto v = file.get_u32(key);
    if (!v) return std::nullopt;
    if (*v >= data.tokens.size()) {
      fail_key(name, key, "id " + std::to_string(*v) + " is outside the vocabulary of " +
                              std::to_string(data.tokens.size()) + " tokens");
    }
    return static_cast<int32_t>(*v);
  };
  data.bos_id = id_key("tokenizer.ggml.bos_token_id");
  data.eos_id = id_key("tokenizer.ggml.eos_token_id");
  data.unk_id = id_key("tokenizer.ggml.unknown_token_id");
  data.pad_id = id_key("tokenizer.ggml.padding_token_id");
  data.eot_id = id_key("tokenizer.ggml.eot_token_id");
  data.eom_id = id_key("tokenizer.ggml.eom_token_id");
  data.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  if (spm) {
    // llama.cpp's SentencePiece defaults when the file names none.
    auto fallback = [&](std::optional<int32_t>& id, int32_t value) {
      if (!id && value < static_cast<int32_t>(data.tokens.size())) id = value;
    };
    fallback(data.bos_id, 1);
    fallback(data.eos_id, 2);
    fallback(data.unk_id, 0);
  }
  return from_vocab(std::move(data));
}

Tokenizer Tokenizer::from_vocab(VocabData data) {
  if (data.model == TokenizerModel::spm) return from_spm_vocab(std::move(data));
  const std::string& src = data.source;
  Tokenizer t;
  const auto pre = pre_tokenizer_from_name(data.pre);
  if (!pre) {
    fail_key(src, "tokenizer.ggml.pre",
             "pre-tokenizer \"" + data.pre +
                 "\" is not supported (supported: default/gpt2, smollm/starcoder family, llama3)");
  }
  t.pre_ = *pre;
  t.pre_name_ = data.pre;
  t.byte_level_ = data.byte_level;
  t.byte_fallback_ = data.byte_fallback;
  // llama.cpp sets ignore_merges for llama3 vocabularies; a tokenizer.json says so itself.
  t.ignore_merges_ = data.ignore_merges || *pre == PreTokenizer::llama3;
  t.fuse_unk_ = data.fuse_unk;
  t.drop_missing_bytes_ = data.drop_missing_bytes;
  t.nfc_ = data.nfc;
  t.space_replacement_ = data.space_replacement;
  t.prepend_ = data.prepend;
  if (!t.byte_level_ && (*pre != PreTokenizer::none))
    fail_key(src, "pre-tokenizer", "a character-level BPE takes no byte-level pre-tokenizer pattern");
  if (data.tokens.empty()) fail_key(src, "tokenizer.ggml.tokens", "empty vocabulary");
  if (data.tokens.size() > static_cast<size_t>(INT32_MAX / 2)) fail_key(src, "tokenizer.ggml.tokens", "too many tokens");
  if (!data.types.empty() && data.types.size() != data.tokens.size()) {
    fail_key(src, "tokenizer.ggml.token_type", "length differs from the token list");
  }
  t.tokens_ = std::move(data.tokens);
  t.types_ = data.types.empty() ? std::vector<TokenType>(t.tokens_.size(), TokenType::normal) : std::move(data.types);
  t.bos_ = data.bos_id;
  t.eos_ = data.eos_id;
  t.unk_ = data.unk_id;
  t.pad_ = data.pad_id;
  t.add_bos_ = data.add_bos;
  for (auto id : {t.bos_, t.eos_, t.unk_, t.pad_, data.eot_id, data.eom_id}) {
    if (id && !t.valid_id(*id)) fail_key(src, "special token ids", "id " + std::to_string(*id) + " is out of range");
  }
  for (int32_t id : data.more_end_of_generation)
    if (!t.valid_id(id)) fail_key(src, "eos_token_id", "id " + std::to_string(id) + " is out of range");

  t.token_ids_.reserve(t.tokens_.size());
  for (size_t i = 0; i < t.tokens_.size(); ++i) {
    const std::string& tok = t.tokens_[i];
    if (auto bad = unicode::find_invalid_utf8(tok)) {
      fail_key(src, "tokenizer.ggml.tokens",
               "token " + std::to_string(i) + " is not valid UTF-8 at byte " + std::to_string(*bad));
    }
    // Later duplicates win, as in llama.cpp's token_to_id map.
    t.token_ids_[tok] = static_cast<int32_t>(i);
    const TokenType type = t.types_[i];
    if ((type == TokenType::control || type == TokenType::user_defined || type == TokenType::unknown) &&
        !tok.empty()) {
      t.special_ids_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(t.special_ids_.begin(), t.special_ids_.end(), [&](int32_t a, int32_t b) {
    return t.tokens_[a].size() > t.tokens_[b].size();
  });

  // Symbols the merges mention but the vocabulary lacks get ids past the vocabulary.
  auto symbol_of = [&](const std::string& s) -> int32_t {
    if (auto it = t.token_ids_.find(s); it != t.token_ids_.end()) return it->second;
    auto [it, inserted] = t.extra_ids_.try_emplace(s, static_cast<int32_t>(t.tokens_.size() + t.extra_symbols_.size()));
    if (inserted) t.extra_symbols_.push_back(s);
    return it->second;
  };
  for (int b = 0; b < 256 && t.byte_level_; ++b) {
    const std::string form = unicode::bytes_to_vocab_form(std::string(1, static_cast<char>(b)));
    t.byte_symbol_[b] = symbol_of(form);
    auto it = t.token_ids_.find(form);
    t.byte_token_[b] = it == t.token_ids_.end() ? -1 : it->second;
  }
  // Character BPE falls back to "<0xXX>" tokens (tokenizers' byte_fallback).
  static constexpr char kHex[] = "0123456789ABCDEF";
  t.spm_byte_token_.fill(-1);
  for (int b = 0; b < 256 && !t.byte_level_ && t.byte_fallback_; ++b) {
    const std::string hex = std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
    if (auto it = t.token_ids_.find(hex); it != t.token_ids_.end()) t.spm_byte_token_[static_cast<size_t>(b)] = it->second;
  }
  t.merges_.reserve(data.merges.size());
  for (size_t rank = 0; rank < data.merges.size(); ++rank) {
    const std::string& m = data.merges[rank];
    const size_t sep = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (sep == std::string::npos) {
      fail_key(src, "tokenizer.ggml.merges", "entry " + std::to_string(rank) + " has no space between its pair");
    }
    const std::string left = m.substr(0, sep);
    const std::string right = m.substr(sep + 1);
    const int32_t l = symbol_of(left);
    const int32_t r = symbol_of(right);
    const int32_t merged = symbol_of(left + right);
    // The first occurrence of a pair keeps its rank, as llama.cpp's bpe_ranks.emplace.
    t.merges_.try_emplace(pair_key(l, r), MergeResult{static_cast<int32_t>(rank), merged});
  }
  t.set_end_of_generation(data);
  return t;
}

void Tokenizer::set_end_of_generation(const VocabData& data) {
  end_of_generation_.clear();
  for (const auto& id : {data.eos_id, data.eot_id, data.eom_id})
    if (id) end_of_generation_.push_back(*id);
  for (int32_t id : data.more_end_of_generation) end_of_generation_.push_back(id);
  for (std::string_view turn_end : {"<end_of_turn>", "<|im_end|>"})
    if (const auto id = find_token(turn_end)) end_of_generation_.push_back(*id);
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()), end_of_generation_.end());
}

bool Tokenizer::ends_generation(int32_t id) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = token_ids_.find(text);
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string_view> Tokenizer::split_words(std::string_view text) const {
  if (auto bad = unicode::find_invalid_utf8(text)) {
    throw_input_error_at("text", *bad, "invalid UTF-8");
  }
  std::vector<size_t> byte_starts;
  const std::vector<uint32_t> cps = unicode::decode_utf8(text, &byte_starts);
  std::vector<CharClass> classes(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) classes[i] = unicode::classify(cps[i]);

  std::vector<size_t> ends;  // code-point index where each word ends
  ends.reserve(cps.size() / 3 + 1);
  switch (pre_) {
    case PreTokenizer::gpt2:
      split_gpt2(Segment(cps, classes, 0, cps.size()), ends);
      break;
    case PreTokenizer::llama3:
      split_llama3(Segment(cps, classes, 0, cps.size()), ends);
      break;
    case PreTokenizer::qwen2:
      split_llama3(Segment(cps, classes, 0, cps.size()), ends, 1);
      break;
    case PreTokenizer::none:
      if (!cps.empty()) ends.push_back(cps.size());
      break;
    case PreTokenizer::smollm: {
      // First pass, \p{N}: each number code point is a piece of its own and the runs between
      // them are pieces too; the gpt2 pattern then splits every piece independently.
      size_t begin = 0;
      for (size_t i = 0; i <= cps.size(); ++i) {
        if (i == cps.size() || classes[i] == CharClass::number) {
          if (i > begin) split_gpt2(Segment(cps, classes, begin, i), ends);
          if (i < cps.size()) ends.push_back(i + 1);
          begin = i + 1;
        }
      }
      break;
    }
  }

  std::vector<std::string_view> words;
  words.reserve(ends.size());
  size_t start = 0;
  for (size_t end : ends) {
    words.push_back(text.substr(byte_starts[start], byte_starts[end] - byte_starts[start]));
    start = end;
  }
  return words;
}

void Tokenizer::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    // A word that is a vocabulary entry is one token (llama.cpp for llama3, tokenizers' ignore_merges).
    if (auto id = find_token(byte_level_ ? unicode::bytes_to_vocab_form(word) : std::string(word))) {
      out.push_back(*id);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<int32_t> initial;
  if (byte_level_) {
    initial.reserve(word.size());
    for (char c : word) initial.push_back(byte_symbol_[static_cast<uint8_t>(c)]);
  } else {
    char_symbols(word, initial);
  }
  const auto n = static_cast<int32_t>(initial.size());
  std::vector<Symbol> symbols(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) symbols[i] = Symbol{initial[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1, true};
  std::vector<Bigram> storage;
  storage.reserve(static_cast<size_t>(n));
  std::priority_queue<Bigram, std::vector<Bigram>, BigramAfter> queue(BigramAfter{}, std::move(storage));
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it == merges_.end()) return;
    queue.push(Bigram{it->second.rank, left, right, symbols[left].id, symbols[right].id, it->second.symbol});
  };
  for (int32_t i = 1; i < n; ++i) try_pair(i - 1, i);

  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (!left.alive || !right.alive || left.id != b.left_symbol || right.id != b.right_symbol) continue;
    left.id = b.merged_symbol;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_pair(left.prev, b.left);
    try_pair(b.left, left.next);
  }

  for (int32_t i = 0; i >= 0 && i < n; i = symbols[i].next) {
    const int32_t id = symbols[i].id;
    if (id < vocab_size()) {
      out.push_back(id);
      continue;
    }
    // A merge produced a string the vocabulary lacks: fall back to one token per byte.
    std::string bytes;
    const std::string& extra = extra_symbols_[static_cast<size_t>(id - vocab_size())];
    if (byte_level_) unicode::vocab_form_to_bytes(extra, bytes);
    else bytes = extra;
    for (char c : bytes) {
      const int32_t byte_token = (byte_level_ ? byte_token_ : spm_byte_token_)[static_cast<uint8_t>(c)];
      if (byte_token >= 0) {
        out.push_back(byte_token);
      } else if (unk_) {
        out.push_back(*unk_);
      } else if (drop_missing_bytes_) {
        continue;  // tokenizers' BPE without an unk_token drops a byte it has no token for
      } else {
        throw_input_error("tokenizer vocabulary has no token for byte " + std::to_string(static_cast<uint8_t>(c)) +
                          " and no unknown token");
      }
    }
  }
}

void Tokenizer::char_symbols(std::string_view word, std::vector<int32_t>& symbols) const {
  // tokenizers' BPE::merge_word: each character is its vocabulary entry, else its bytes'
  // <0xXX> tokens (byte_fallback, when all exist), else the unknown token (consecutive ones
  // fused with fuse_unk). Such symbols never merge.
  for (size_t at = 0; at < word.size();) {
    size_t len = 1;
    const auto lead = static_cast<unsigned char>(word[at]);
    if (lead >= 0xF0) len = 4;
    else if (lead >= 0xE0) len = 3;
    else if (lead >= 0xC0) len = 2;
    len = std::min(len, word.size() - at);
    const std::string_view ch = word.substr(at, len);
    at += len;
    if (const auto id = find_token(ch)) {
      symbols.push_back(*id);
      continue;
    }
    if (auto it = extra_ids_.find(std::string(ch)); it != extra_ids_.end()) {
      symbols.push_back(it->second);
      continue;
    }
    bool all_bytes = byte_fallback_;
    for (char c : ch) all_bytes = all_bytes && spm_byte_token_[static_cast<uint8_t>(c)] >= 0;
    if (all_bytes) {
      for (char c : ch) symbols.push_back(spm_byte_token_[static_cast<uint8_t>(c)]);
      continue;
    }
    if (!unk_) {
      if (drop_missing_bytes_) continue;  // as tokenizers' BPE without an unk_token
      throw_input_error("tokenizer vocabulary has no token for the character '" + std::string(ch) +
                        "', no byte fallback and no unknown token");
    }
    if (fuse_unk_ && !symbols.empty() && symbols.back() == *unk_) continue;
    symbols.push_back(*unk_);
  }
}

std::string Tokenizer::normalize_fragment(std::string_view text, bool at_start) const {
  std::string out = nfc_ ? unicode::nfc(text) : std::string(text);
  if (!space_replacement_.empty()) {
    std::string replaced;
    for (char c : out) {
      if (c == ' ') replaced += space_replacement_;
      else replaced += c;
    }
    out = std::move(replaced);
    const bool prepend = prepend_ == VocabData::Prepend::always || (prepend_ == VocabData::Prepend::first && at_start);
    if ((prepend && !out.starts_with(space_replacement_)) || (prepend_ == VocabData::Prepend::unconditional && !out.empty()))
      out = space_replacement_ + out;
  }
  return out;
}

void Tokenizer::encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
  for (std::string_view word : split_words(text)) bpe_word(word, out);
}

std::string Tokenizer::fingerprint() const {
  std::string text = pipeline_description() + "\n";
  auto put = [&](std::string_view s) {
    text += std::to_string(s.size());
    text += ':';
    text += s;
  };
  for (size_t i = 0; i < tokens_.size(); ++i) {
    put(tokens_[i]);
    text += static_cast<char>('0' + static_cast<int>(types_[i]));
  }
  for (float f : scores_) {
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    put(std::to_string(bits));
  }
  std::vector<std::pair<int32_t, uint64_t>> ranked;
  ranked.reserve(merges_.size());
  for (const auto& [pair, merge] : merges_) ranked.emplace_back(merge.rank, pair);
  std::sort(ranked.begin(), ranked.end());
  auto symbol_text = [&](int32_t id) -> const std::string& {
    return id < vocab_size() ? tokens_[static_cast<size_t>(id)] : extra_symbols_[static_cast<size_t>(id - vocab_size())];
  };
  for (const auto& [rank, pair] : ranked) {
    put(symbol_text(static_cast<int32_t>(pair >> 32)));
    put(symbol_text(static_cast<int32_t>(pair & 0xFFFFFFFFu)));
  }
  // Left out for byte-level vocabularies: there the unknown token only stands in for bytes the
  // vocabulary lacks (SmolLM2's: six control characters, lead bytes of planes 4+), which
  // llama.cpp writes as it and tokenizers drops; a GGUF names one where the tokenizer.json
  // it was converted from does not.
  if (!(byte_level_ && model_ == TokenizerModel::bpe)) text += "unk " + (unk_ ? std::to_string(*unk_) : std::string("-"));
  text += " bos " + (add_bos_ && bos_ ? std::to_string(*bos_) : std::string("-"));
  return hex_u64(xxhash64(text));
}

std::string Tokenizer::pipeline_description() const {
  if (model_ == TokenizerModel::spm) return std::string("sentencepiece scores, space prefix ") + (add_space_prefix_ ? "yes" : "no");
  std::string d = byte_level_ ? "byte-level BPE" : "character BPE";
  // The pattern, not the name: llama.cpp's "llama-bpe" and a tokenizer.json's Llama 3 Split are one.
  static constexpr const char* kPatterns[] = {"gpt2", "smollm", "llama3", "qwen2", "none"};
  d += std::string(", pre-tokenizer ") + kPatterns[static_cast<int>(pre_)];
  if (nfc_) d += ", NFC";
  if (!space_replacement_.empty())
    d += std::string(", spaces as U+2581, prepend ") +
         (prepend_ == VocabData::Prepend::always          ? "always"
          : prepend_ == VocabData::Prepend::unconditional ? "unconditional"
          : prepend_ == VocabData::Prepend::first         ? "first"
                                                          : "never");
  if (byte_fallback_) d += ", byte fallback";
  if (ignore_merges_) d += ", whole-word vocabulary entries";
  if (fuse_unk_) d += ", fused unknowns";
  return d;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special, const std::string& source) const {
  KVGATE_CHECK(!tokens_.empty(), "encode called on an empty tokenizer");
  if (auto bad = unicode::find_invalid_utf8(text)) {
    throw_input_error_at(source, *bad, "invalid UTF-8 (the tokenizer accepts UTF-8 text only)");
  }
  // Fragments: plain text, or one special token (id >= 0). Special tokens are cut out longest
  // first, each from the plain fragments the longer ones left, as llama.cpp's
  // tokenizer_st_partition does.
  struct Fragment {
    int32_t id;
    std::string_view text;
  };
  std::vector<Fragment> fragments{{-1, text}};
  for (int32_t special : special_ids_) {
    const TokenType type = types_[special];
    if (!parse_special && type != TokenType::user_defined) continue;
    const std::string& needle = tokens_[special];
    std::vector<Fragment> next;
    bool found_any = false;
    for (const Fragment& f : fragments) {
      if (f.id >= 0 || f.text.find(needle) == std::string_view::npos) {
        next.push_back(f);
        continue;
      }
      found_any = true;
      std::string_view rest = f.text;
      for (size_t at = rest.find(needle); at != std::string_view::npos; at = rest.find(needle)) {
        if (at > 0) next.push_back({-1, rest.substr(0, at)});
        next.push_back({special, needle});
        rest.remove_prefix(at + needle.size());
      }
      if (!rest.empty()) next.push_back({-1, rest});
    }
    if (found_any) fragments = std::move(next);
  }

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  bool after_special = true;  // the text's start counts as following a special token
  for (const Fragment& f : fragments) {
    if (f.id >= 0) {
      ids.push_back(f.id);
      after_special = true;
    } else if (model_ == TokenizerModel::spm) {
      if (f.text.empty()) continue;  // only an empty input leaves an empty fragment; llama.cpp adds nothing
      std::string escaped = add_space_prefix_ && after_special ? "\xE2\x96\x81" : "";
      for (char c : f.text) {
        if (c == ' ') escaped += "\xE2\x96\x81";  // U+2581
        else escaped += c;
      }
      spm_fragment(escaped, ids);
      after_special = false;
    } else if (f.text.empty()) {
      continue;  // an empty input: tokenizers' normalizers add nothing to nothing
    } else if (nfc_ || !space_replacement_.empty()) {
      const bool at_start = f.text.data() == text.data();
      const std::string normalized = normalize_fragment(f.text, at_start);
      encode_fragment(normalized, ids);
    } else {
      encode_fragment(f.text, ids);
    }
  }
  return ids;
}

std::string Tokenizer::piece(int32_t id, bool render_special) const {
  KVGATE_CHECK(valid_id(id), "token id " + std::to_string(id) + " outside the vocabulary");
  const std::string& text = tokens_[static_cast<size_t>(id)];
  if (model_ == TokenizerModel::spm) return spm_piece(id, render_special);
  switch (types_[static_cast<size_t>(id)]) {
    case TokenType::control:
    case TokenType::unknown:
      return render_special ? text : std::string();
    case TokenType::user_defined:
      return text;
    case TokenType::normal: {
      if (!byte_level_) return spm_piece(id, render_special);
      std::string bytes;
      unicode::vocab_form_to_bytes(text, bytes);
      return bytes;
    }
    case TokenType::byte:
      if (!byte_level_) return spm_piece(id, render_special);
      break;
    case TokenType::undefined:
    case TokenType::unused:
      break;
  }
  // llama.cpp renders the types a byte-level vocabulary should not contain as nothing.
  return std::string();
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (!valid_id(id)) {
      throw_input_error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(vocab_size()) + ")");
    }
    std::string p = piece(id, render_special);
    // llama.cpp's detokenizer drops the space the SentencePiece encoder prefixed: at most one,
    // from the first token.
    if (i == 0 && model_ == TokenizerModel::spm && add_space_prefix_ && !p.empty() && p[0] == ' ') p.erase(0, 1);
    // tokenizers' Strip decoder of a Metaspace tokenizer that prepends: the same single space.
    if (i == 0 && model_ == TokenizerModel::bpe && !byte_level_ && prepend_ != VocabData::Prepend::never && !p.empty() &&
        p[0] == ' ')
      p.erase(0, 1);
    out += p;
  }
  return out;
}

}  // namespace kvgate::runtime
