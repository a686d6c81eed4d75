#pragma once
// Comparing two generated token sequences (greedy continuation under two configs, or a
// continuation against the gold answer).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kvgate::scoring {

// Index of the first position where the sequences differ; a sequence that is a strict prefix
// of the other diverges at its own length. nullopt when both are identical.
std::optional<size_t> first_divergence(std::span<const int32_t> a, std::span<const int32_t> b);

inline bool exact_match(std::span<const int32_t> a, std::span<const int32_t> b) {
  return !first_divergence(a, b).has_value();
}

// The same for two answers as text, in bytes, moved back to the start of a UTF-8 character so a
// marker placed there never splits one (a Hangul syllable is three bytes). nullopt when equal.
std::optional<size_t> first_text_divergence(std::string_view a, std::string_view b);

}  // namespace kvgate::scoring
