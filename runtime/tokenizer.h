#pragma once
// Tokenizers built from a GGUF vocabulary, producing the same ids as llama.cpp for the same
// text: byte-level BPE (tokenizer.ggml.model = "gpt2": SmolLM2, Llama 3, Qwen) and
// SentencePiece (tokenizer.ggml.model = "llama": Gemma, Llama 2, Mistral).
//
// Byte-level BPE:
//
//   1. Special tokens. With parse_special, unknown, control and user-defined tokens (token
//      types 2, 3, 4) are cut out of the text as whole strings, longest first, before anything
//      else; without it only user-defined tokens are, as in llama.cpp.
//   2. Pre-tokenization of each remaining fragment by the pattern tokenizer.ggml.pre names:
//        "gpt2", "default":  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//        "smollm" (also starcoder, refact, codeshell, ...): every \p{N} code point is split off
//                 on its own first, then the gpt2 pattern runs on the pieces in between
//        "llama3":  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//                   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (merges ignored for
//                   words that are whole vocabulary entries, as llama.cpp does)
//      Any other name is an input error: guessing a pattern silently produces wrong ids.
//   3. Each word's bytes are spelled in GPT-2's byte alphabet and merged pairwise, lowest merge
//      rank first (leftmost on ties), with a priority queue: O(n log n) per word.
//
// SentencePiece (llama.cpp's llm_tokenizer_spm): special tokens are cut out as in step 1; each
// remaining fragment gets a leading space when tokenizer.ggml.add_space_prefix says so (default
// true) and it is the first fragment or follows a special token; spaces become U+2581; the
// fragment starts as one symbol per code point and the adjacent pair whose concatenation is
// the vocabulary entry with the highest score (tokenizer.ggml.scores) merges first (leftmost
// on ties) until no pair is an entry; a final symbol that is no entry is emitted as its bytes'
// <0xXX> tokens (byte fallback).
//
// Text must be well-formed UTF-8; anything else is an input error naming the byte offset of the
// first bad byte (llama.cpp would substitute or throw; we refuse rather than guess).
//
//   GgufFile f = GgufFile::open(path);
//   Tokenizer tok = Tokenizer::from_gguf(f);
//   std::vector<int32_t> ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n");
//   std::string text = tok.decode(ids);
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvgate::runtime {

class GgufFile;

// Token types as stored in tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : uint8_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

// none: the whole fragment is one word (SentencePiece-style BPE of a tokenizer.json); qwen2:
// llama3's pattern with one digit per word (\p{N} instead of \p{N}{1,3}).
enum class PreTokenizer : uint8_t { gpt2, smollm, llama3, qwen2, none };
enum class TokenizerModel : uint8_t { bpe, spm };

// Everything a tokenizer is built from, independent of the file it came from.
struct VocabData {
  TokenizerModel model = TokenizerModel::bpe;
  std::vector<std::string> tokens;  // BPE: in GPT-2 byte alphabet, except control/user-defined text
  std::vector<TokenType> types;     // empty: all normal
  std::vector<std::string> merges;  // BPE: "left right", rank = index
  std::vector<float> scores;        // SentencePiece: one per token
  bool add_space_prefix = true;     // SentencePiece only
  std::string pre = "default";      // tokenizer.ggml.pre
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  // tokenizer.ggml.eot_token_id / eom_token_id: end of turn / end of message, when declared.
  std::optional<int32_t> eot_id, eom_id;
  bool add_bos = false;
  std::string source = "vocabulary";  // names the origin in error messages

  // What a Hugging Face tokenizer.json declares beyond a GGUF vocabulary (hf_tokenizer.cc); a
  // GGUF's tokenizer leaves these as they are.
  bool byte_level = true;       // BPE symbols start as GPT-2-alphabet bytes; false: as characters
  bool byte_fallback = false;   // character BPE: a character missing from the vocabulary is <0xXX> tokens
  bool ignore_merges = false;   // a word that is a vocabulary entry is one token (llama3 does this anyway)
  bool fuse_unk = false;        // consecutive unknown tokens are one
  bool nfc = false;             // fragments are NFC-normalized first (Qwen's normalizer)
  std::string space_replacement;  // non-empty ("\u2581"): spaces are written as it
  enum class Prepend : uint8_t { never, first, always, unconditional };
  // Whether a fragment gets space_replacement in front: tokenizers' Metaspace prepend_scheme
  // (first: only a fragment at the start of the text; first and always never to a fragment that
  // already starts with it), or its Prepend normalizer (unconditional).
  Prepend prepend = Prepend::never;
  // A byte the vocabulary lacks, with no unknown token, is dropped (tokenizers' BPE) rather than
  // refused (an input error, the GGUF path's rule: llama.cpp would need an unknown token).
  bool drop_missing_bytes = false;
  // More end-of-generation ids (generation_config.json may list several).
  std::vector<int32_t> more_end_of_generation;
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,scores,*_token_id,add_bos_token,
  // add_space_prefix} (*_token_id: bos, eos, unknown, padding, eot, eom). A model other than "gpt2" or "llama", an unknown pre-tokenizer,
  // mismatched array lengths or an id out of range are input errors naming the file and key.
  static Tokenizer from_gguf(const GgufFile& file);
  static Tokenizer from_vocab(VocabData data);

  // An empty tokenizer (no vocabulary), to be assigned from from_gguf or from_vocab.
  Tokenizer() = default;
  // Move-only: token_ids_ holds views into tokens_.
  Tokenizer(Tokenizer&&) noexcept = default;
  Tokenizer& operator=(Tokenizer&&) noexcept = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids for `text`, without BOS (callers that want one prepend bos_id()). `source` names
  // the text in the error for invalid UTF-8 ("SOURCE: at byte N: ...").
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true,
                              const std::string& source = "text") const;

  // The bytes a token stands for. Control and unknown tokens render as their text when
  // render_special is true and as nothing otherwise; user-defined tokens always render as their
  // text; unused, byte and undefined tokens render as nothing (as llama.cpp does for BPE).
  std::string piece(int32_t id, bool render_special = true) const;
  // Concatenated pieces; may be invalid UTF-8 when ids split a multi-byte character. An id
  // outside the vocabulary is an input error.
  std::string decode(std::span<const int32_t> ids, bool render_special = true) const;

  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  bool valid_id(int64_t id) const { return id >= 0 && id < vocab_size(); }
  const std::string& token_text(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  TokenType token_type(int32_t id) const { return types_.at(static_cast<size_t>(id)); }
  std::optional<int32_t> find_token(std::string_view text) const;

  TokenizerModel model() const { return model_; }
  PreTokenizer pre_tokenizer() const { return pre_; }
  const std::string& pre_tokenizer_name() const { return pre_name_; }
  std::optional<int32_t> bos_id() const { return bos_; }
  std::optional<int32_t> eos_id() const { return eos_; }
  std::optional<int32_t> unk_id() const { return unk_; }
  std::optional<int32_t> pad_id() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  // One line of what decides the ids a text gets beyond the vocabulary and merges (model,
  // pre-tokenizer, normalizer, fallbacks), for fingerprints and model info.
  std::string pipeline_description() const;
  // xxHash64 (hex) of everything that decides the ids of a text: the pipeline, tokens, token
  // types, scores, merges in rank order, the unknown token, and BOS when it is added. Equal for
  // the same vocabulary read from a GGUF and from a tokenizer.json.
  std::string fingerprint() const;

  // Whether greedy generation stops before `id` (the token is not part of the answer): EOS, the
  // end-of-turn and end-of-message tokens the GGUF declares (tokenizer.ggml.eot_token_id,
  // eom_token_id), and the tokens that close a turn in the chat templates kvgate renders
  // (runtime/chat_template.h): Gemma's <end_of_turn> and ChatML's <|im_end|>, by their text, as
  // llama.cpp counts them among its end-of-generation tokens. Gemma 3's EOS is <eos>, yet its
  // chat answers end with <end_of_turn>; without it generation would run on past the answer.
  bool ends_generation(int32_t id) const;
  // Those ids, ascending, without duplicates.
  const std::vector<int32_t>& end_of_generation_ids() const { return end_of_generation_; }

  // Pre-tokenized words of a fragment without special tokens (exposed for tests).
  std::vector<std::string_view> split_words(std::string_view text) const;

 private:
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_fragment(std::string_view text, std::vector<int32_t>& out) const;
  // SentencePiece merges of one fragment, spaces already escaped (tokenizer_spm.cc).
  void spm_fragment(std::string_view escaped, std::vector<int32_t>& out) const;
  static Tokenizer from_spm_vocab(VocabData data);
  // Fills end_of_generation_ from the ids in `data` and the vocabulary (token_ids_ built).
  void set_end_of_generation(const VocabData& data);
  std::string spm_piece(int32_t id, bool render_special) const;
  // Normalization of one fragment (VocabData's nfc, space_replacement, prepend); `at_start`:
  // the fragment starts the text.
  std::string normalize_fragment(std::string_view text, bool at_start) const;
  void char_symbols(std::string_view word, std::vector<int32_t>& symbols) const;

  struct MergeResult {
    int32_t rank;
    int32_t symbol;  // merged symbol
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string_view, int32_t> token_ids_;  // views into tokens_
  // BPE runs on symbols: ids of vocabulary entries, or ids >= vocab_size() for strings a merge
  // produces that the vocabulary lacks (their bytes are emitted as byte tokens at the end).
  std::vector<std::string> extra_symbols_;
  std::array<int32_t, 256> byte_symbol_{};  // symbol for each raw byte
  std::array<int32_t, 256> byte_token_{};   // vocabulary id for each raw byte, -1 if missing
  std::unordered_map<uint64_t, MergeResult> merges_;
  std::vector<int32_t> special_ids_;  // control, user-defined and unknown tokens, longest first

  TokenizerModel model_ = TokenizerModel::bpe;
  std::vector<float> scores_;              // SentencePiece
  bool add_space_prefix_ = false;          // SentencePiece
  std::array<int32_t, 256> spm_byte_token_{};  // <0xXX> token of each byte (or the byte's own entry), -1 if none
  PreTokenizer pre_ = PreTokenizer::gpt2;
  std::string pre_name_;
  bool byte_level_ = true;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  bool drop_missing_bytes_ = false;
  bool nfc_ = false;
  std::string space_replacement_;
  VocabData::Prepend prepend_ = VocabData::Prepend::never;
  std::unordered_map<std::string, int32_t> extra_ids_;  // extra_symbols_' ids
  std::optional<int32_t> bos_, eos_, unk_, pad_;
  bool add_bos_ = false;
  std::vector<int32_t> end_of_generation_;  // ascending
};

const char* token_type_name(TokenType type);

}  // namespace kvgate::runtime
