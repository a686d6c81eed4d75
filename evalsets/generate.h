#pragma once
// Deterministic domain generators. Every text is composed here from the project's own
// templates (no copied corpora), and every scored answer is a fact the generator computed
// exactly. Item i of a domain depends only on (domain, seed, i, token range), so the same
// request gives byte-identical output on every machine, and a larger n extends a smaller one.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "evalsets/item.h"

namespace kvgate::evalsets {

struct TokenRange {
  size_t min = 0;
  size_t max = 0;
};

// Depth of the evidence in a long item, in thousandths of its document (0 = first, 1000 =
// last); kNoDepth lets each item draw one of 0, 100, ..., 1000.
constexpr int kNoDepth = -1;

struct GenerateOptions {
  std::string domain;  // one of generator_domains() or long_generator_domains(), "all" or "long"
  uint64_t seed = 0;
  size_t n = 0;  // items per domain
  // Approximate prompt-length target (estimate_tokens); 0/0 picks the domain's default.
  TokenRange tokens;
  // Long domains only: the depths to put each item's evidence at (every item at each, in this
  // order; the same seed gives the same documents, so this sweeps the evidence's depth over the
  // same haystacks); empty lets each item draw one.
  std::vector<int> depths_permille;
  // Long domains only: each item's document as a depth sweep (evalsets/sweep.h) instead of its
  // question; no depth then (every depth is scored).
  bool sweep = false;
};

const std::vector<std::string>& generator_domains();  // tables, diffs, korean, policy, agentic, lookup ("all")
// retrieval, long_tables, long_diffs, long_policy, long_korean, long_agentic ("long")
const std::vector<std::string>& long_generator_domains();
bool is_long_domain(const std::string& domain);  // one of long_generator_domains(), or "long"
// A generator domain or one of the groups "all" and "long".
bool is_known_domain(const std::string& domain);
std::string domain_list_text();  // every accepted --domain value, for error messages
TokenRange default_token_range(const std::string& domain);
// The largest --tokens-max a domain takes: 32768 for the short domains, 131072 for long ones.
size_t max_tokens_for(const std::string& domain);
// Empty if the range suits the domain, else what is wrong with it.
std::string token_range_problem(const std::string& domain, TokenRange range);
// Parses a depth fraction "0".."1" (e.g. "0.25") into thousandths; throws a usage error.
int parse_depth(const std::string& text);
// A comma-separated list of depth fractions ("0.1,0.5,0.9"), each as parse_depth; a depth given
// twice is a usage error.
std::vector<int> parse_depths(const std::string& text);

// The depth a generated long item's id names ("retrieval-s5-d250-0003": 250), the one place
// besides generate_item that knows the id's form; nullopt for any other id (a drawn depth is not
// in the id, nor are a user's own items).
std::optional<int> generated_depth_permille(std::string_view id);

// Throws a usage error for an unknown domain, n == 0 or n > 100000, a bad token range, a depth
// or a sweep for a domain that has none, or a depth with a sweep.
std::vector<EvalItem> generate(const GenerateOptions& options);

// One item; `index` is its position within the domain's list. Long domains draw a depth when
// depth_permille is kNoDepth; the draw comes before anything else, so the same item at another
// depth has the same document with only the evidence moved (long_agentic excepted: its evidence
// turn is a file read placed by depth, the other turns are drawn around it).
EvalItem generate_item(const std::string& domain, uint64_t seed, size_t index, TokenRange tokens,
                       int depth_permille = kNoDepth);

}  // namespace kvgate::evalsets
