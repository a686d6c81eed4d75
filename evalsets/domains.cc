#include "evalsets/domains.h"

#include "evalsets/gen_common.h"

namespace kvgate::evalsets {

namespace {

// The short domains' usual prompt length; agentic sessions need room for several tool turns,
// lookup questions are short on purpose.
constexpr TokenRange kShortTokens{300, 1200};
// Long items default to what the default model (SmolLM2-135M, 8192-token context) can read,
// with room for the ~1.1x real/estimated token ratio and the greedy answer.
constexpr TokenRange kLongTokens{4000, 6500};

// Question kinds cycle with seed + index (`cycle`), so that short suite entries with different
// seeds still cover every kind; lookup cycles with the index alone.
size_t cycle(const ItemDraw& d) { return static_cast<size_t>(d.seed) + d.index; }

const DomainInfo kDomains[] = {
    {"tables", false, kShortTokens, [](Rng& rng, const ItemDraw& d) { return gen::make_tables_item(rng, d.target); }},
    {"diffs", false, kShortTokens, [](Rng& rng, const ItemDraw& d) { return gen::make_diffs_item(rng, d.target); }},
    {"korean", false, kShortTokens, [](Rng& rng, const ItemDraw& d) { return gen::make_korean_item(rng, d.target); }},
    {"policy", false, kShortTokens, [](Rng& rng, const ItemDraw& d) { return gen::make_policy_item(rng, d.target); }},
    {"agentic", false, {1500, 4000}, [](Rng& rng, const ItemDraw& d) { return gen::make_agentic_item(rng, d.target); }},
    {"lookup", false, {100, 300}, [](Rng& rng, const ItemDraw& d) { return gen::make_lookup_item(rng, d.target, d.index); }},
    {"retrieval", true, kLongTokens,
     [](Rng& rng, const ItemDraw& d) { return gen::make_retrieval_item(rng, d.target, d.depth, cycle(d)); }},
    {"long_tables", true, kLongTokens,
     [](Rng& rng, const ItemDraw& d) { return gen::make_long_tables_item(rng, d.target, d.depth, cycle(d)); }},
    {"long_diffs", true, kLongTokens,
     [](Rng& rng, const ItemDraw& d) { return gen::make_long_diffs_item(rng, d.target, d.depth); }},
    {"long_policy", true, kLongTokens,
     [](Rng& rng, const ItemDraw& d) { return gen::make_long_policy_item(rng, d.target, d.depth); }},
    {"long_korean", true, kLongTokens,
     [](Rng& rng, const ItemDraw& d) { return gen::make_long_korean_item(rng, d.target, d.depth); }},
    {"long_agentic", true, kLongTokens,
     [](Rng& rng, const ItemDraw& d) { return gen::make_long_agentic_item(rng, d.target, d.depth); }},
};

}  // namespace

std::span<const DomainInfo> domain_table() { return kDomains; }

const DomainInfo* find_domain(std::string_view name) {
  for (const DomainInfo& d : kDomains)
    if (d.name == name) return &d;
  return nullptr;
}

}  // namespace kvgate::evalsets
