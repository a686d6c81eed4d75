#pragma once
// Which kind of text a scored token is, so quality can be broken down where quantization
// hurts most: numbers in tables, Korean text, code punctuation.
#include <optional>
#include <string_view>

namespace kvgate::scoring {

enum class TokenClass { digits, hangul, code_punct, other };
inline constexpr TokenClass kAllTokenClasses[] = {TokenClass::digits, TokenClass::hangul, TokenClass::code_punct,
                                                  TokenClass::other};

// Classification of a token's text (UTF-8), ignoring whitespace:
//   hangul      any Hangul code point (syllables U+AC00–U+D7A3, jamo U+1100–U+11FF,
//               U+3130–U+318F, U+A960–U+A97F, U+D7B0–U+D7FF); Korean tokens often carry a
//               particle or punctuation, and the Korean character is what matters
//   digits      otherwise, every non-space character is an ASCII digit 0-9
//   code_punct  otherwise, every non-space character is one of ()[]{}<>;:,.=+-*/%&|^!~?'"`\#@$_
//   other       everything else: letters, mixed tokens, whitespace-only tokens, and text that
//               is not valid UTF-8 (byte-level BPE can split a character across tokens; such a
//               fragment has no character class of its own)
TokenClass classify_token(std::string_view utf8_text);

std::string_view token_class_name(TokenClass c);  // "digits", "hangul", "code_punct", "other"
std::optional<TokenClass> parse_token_class(std::string_view name);

}  // namespace kvgate::scoring
