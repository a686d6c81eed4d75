#pragma once
// Helpers the domain generators share: seeded choices and locale-free number formatting
// (money is kept in integer cents so sums are exact).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"
#include "evalsets/generate.h"
#include "evalsets/item.h"

namespace kvgate::evalsets::gen {

template <typename T, size_t N>
const T& pick(Rng& rng, const T (&options)[N]) {
  return options[rng.below(N)];
}
template <typename T>
const T& pick(Rng& rng, const std::vector<T>& options) {
  return options[rng.below(options.size())];
}
// Uniform integer in [lo, hi].
inline int64_t between(Rng& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo + 1)));
}
// Fisher–Yates with the project RNG (std::shuffle's algorithm is implementation-defined).
template <typename T>
void shuffle(Rng& rng, std::vector<T>& v) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.below(i)]);
}

std::string cents_text(int64_t cents);           // 123456 -> "1234.56"
std::string thousands_text(int64_t value);       // 1250000 -> "1,250,000"
std::string pad(int64_t value, int width);       // zero-padded decimal
std::string iso_date(int day_of_year_2024);      // 0-based day of 2024 -> "2024-03-15"
void month_day_2024(int day_of_year, int& month, int& day);

// Picks the item's length target inside the range.
size_t target_tokens(Rng& rng, TokenRange range);

Message system_message(std::string content);
Message user_message(std::string content);
Message assistant_message(std::string content);
// A single-question item: system prompt, the user's text, and the scored gold answer.
EvalItem answer_item(std::string system, std::string user, std::string answer, nlohmann::json meta);

EvalItem make_tables_item(Rng& rng, size_t target);
EvalItem make_diffs_item(Rng& rng, size_t target);
EvalItem make_korean_item(Rng& rng, size_t target);
EvalItem make_policy_item(Rng& rng, size_t target);
EvalItem make_agentic_item(Rng& rng, size_t target);
// Short-range extractive questions; the kind cycles with the item's index (gen_lookup.cc).
EvalItem make_lookup_item(Rng& rng, size_t target, size_t index);

// Long generators (docs/evalsets.md, "Long items"). `depth` is in thousandths of the document:
// the evidence the answer is read from starts about that far in, by estimated tokens. `cycle`
// (seed + index) picks the question kind in turn, so that a few items cover all of them.
EvalItem make_retrieval_item(Rng& rng, size_t target, int depth, size_t cycle);
EvalItem make_long_tables_item(Rng& rng, size_t target, int depth, size_t cycle);
EvalItem make_long_diffs_item(Rng& rng, size_t target, int depth);
EvalItem make_long_policy_item(Rng& rng, size_t target, int depth);
EvalItem make_long_korean_item(Rng& rng, size_t target, int depth);
EvalItem make_long_agentic_item(Rng& rng, size_t target, int depth);

// Where to insert evidence among a document's pieces (in order) so that the estimated tokens
// before it come closest to depth/1000 of the whole: an index in [0, units.size()].
size_t depth_index(const std::vector<std::string>& units, int depth);
// Two-fact items put the other fact half a document away from the evidence at `depth`.
int partner_depth(int depth);
std::string join_units(const std::vector<std::string>& units);

}  // namespace kvgate::evalsets::gen
