#pragma once
// The domain table: one DomainInfo per built-in generator domain. Everything that lists or
// dispatches on domains reads it (`evalset generate`, its --domain help, suite validation, the
// "all" and "long" groups, default token ranges, long-item ids), so adding a domain is one entry
// here plus its generator (docs/adding-a-domain.md).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/rng.h"
#include "evalsets/generate.h"
#include "evalsets/item.h"

namespace kvgate::evalsets {

// What a generator is handed for item `index` of a domain: its length target (drawn first from
// the item's stream) and, for long domains, where its evidence goes.
struct ItemDraw {
  size_t target = 0;        // estimated prompt tokens to aim for
  int depth = kNoDepth;     // long domains: thousandths of the document (resolved, never kNoDepth)
  size_t index = 0;         // the item's position within the domain's list
  uint64_t seed = 0;
};

struct DomainInfo {
  std::string_view name;  // the --domain value and the items' `domain`, [a-z0-9_]
  // Long domains build documents around evidence at a depth (docs/evalsets.md, "Long items"):
  // they take --depth and --sweep, draw a depth per item, carry it in the id when given, and
  // belong to the group "long" (the others to "all").
  bool is_long = false;
  TokenRange default_tokens;  // 0/0 on the command line picks this
  // The item, from its own stream (seeded by domain, seed and index; the length target and,
  // for long domains, the depth already drawn from it).
  EvalItem (*make)(Rng& rng, const ItemDraw& draw) = nullptr;
};

// In the order `--domain all` and `--domain long` generate them.
std::span<const DomainInfo> domain_table();
// nullptr for a group ("all", "long") or an unknown name.
const DomainInfo* find_domain(std::string_view name);

}  // namespace kvgate::evalsets
