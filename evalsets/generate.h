#pragma once
// Deterministic domain generators. Every text is composed here from the project's own
// templates (no copied corpora), and every scored answer is a fact the generator computed
// exactly. Item i of a domain depends only on (domain, seed, i, token range), so the same
// request gives byte-identical output on every machine, and a larger n extends a smaller one.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "evalsets/item.h"

namespace kvgate::evalsets {

struct TokenRange {
  size_t min = 0;
  size_t max = 0;
};

struct GenerateOptions {
  std::string domain;  // one of generator_domains(), or "all"
  uint64_t seed = 0;
  size_t n = 0;  // items per domain
  // Approximate prompt-length target (estimate_tokens); 0/0 picks the domain's default.
  TokenRange tokens;
};

const std::vector<std::string>& generator_domains();  // tables, diffs, korean, policy, agentic, lookup
TokenRange default_token_range(const std::string& domain);

// Throws a usage error for an unknown domain, n == 0 or n > 100000, or a bad token range.
std::vector<EvalItem> generate(const GenerateOptions& options);

// One item; `index` is its position within the domain's list.
EvalItem generate_item(const std::string& domain, uint64_t seed, size_t index, TokenRange tokens);

}  // namespace kvgate::evalsets
