#pragma once
// The Unicode pieces a byte-level BPE tokenizer needs: strict UTF-8 decoding, the three
// character classes GPT-2-style pre-tokenizers split on (\p{L}, \p{N}, \s), and GPT-2's
// reversible byte <-> printable-code-point mapping that vocabulary strings are written in.
//
// Classes follow llama.cpp (src/unicode.cpp), so token ids match it: letters are the general
// categories Lu Ll Lt Lm Lo, numbers Nd Nl No (from utf8proc's tables), and whitespace is
// llama.cpp's fixed list, which is \s of PCRE plus U+0085, U+00A0 and the Unicode spaces.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::runtime::unicode {

// Position of the first byte that does not start a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence), or nullopt.
std::optional<size_t> find_invalid_utf8(std::string_view text);

// Decodes well-formed UTF-8 (check with find_invalid_utf8 first; invalid input is an internal
// error here). byte_starts, when given, receives the byte offset of every code point plus a
// final entry equal to text.size().
std::vector<uint32_t> decode_utf8(std::string_view text, std::vector<size_t>* byte_starts = nullptr);
void append_utf8(uint32_t code_point, std::string& out);

enum class CharClass : uint8_t { letter, number, whitespace, other };
CharClass classify(uint32_t code_point);
bool is_letter(uint32_t code_point);
bool is_number(uint32_t code_point);
bool is_whitespace(uint32_t code_point);

// GPT-2 byte encoding: every byte maps to one printable code point (printable Latin-1 bytes map
// to themselves, the rest to U+0100 onwards), so any byte string has a whitespace-free spelling.
uint32_t byte_to_code_point(uint8_t byte);
// The byte a code point stands for, or nullopt for a code point outside the mapping.
std::optional<uint8_t> code_point_to_byte(uint32_t code_point);
// Spells raw bytes in the GPT-2 alphabet (the form vocabulary and merge strings are stored in).
std::string bytes_to_vocab_form(std::string_view bytes);
// The inverse, appended to `out`. A code point outside the mapping (a vocabulary entry not
// written by a byte-level tokenizer) is copied through as its own UTF-8 and the result is
// false; `vocab_form` must be well-formed UTF-8, as every string read from a GGUF is checked.
bool vocab_form_to_bytes(std::string_view vocab_form, std::string& out);

// Unicode Normalization Form C of well-formed UTF-8 (utf8proc), as tokenizers' NFC normalizer.
std::string nfc(std::string_view text);

}  // namespace kvgate::runtime::unicode
