// The domain table (evalsets/domains.h) is the only list of domains: every consumer's view of it
// (the groups, the defaults, the help text, depth rules, ids) must follow the entries.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "evalsets/domains.h"
#include "evalsets/generate.h"

namespace kvgate::evalsets {
namespace {

TEST(DomainTable, NamesAreUniqueLowerCaseAndNotAGroup) {
  std::set<std::string> seen;
  for (const DomainInfo& d : domain_table()) {
    const std::string name(d.name);
    EXPECT_TRUE(seen.insert(name).second) << name << " is in the table twice";
    EXPECT_NE(name, "all");
    EXPECT_NE(name, "long");
    for (char c : name) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') << name;
    EXPECT_NE(d.make, nullptr) << name;
    EXPECT_GE(d.default_tokens.min, 64u) << name;
    EXPECT_TRUE(token_range_problem(name, d.default_tokens).empty()) << name;
  }
}

TEST(DomainTable, GroupsAndDefaultsFollowTheEntries) {
  std::vector<std::string> short_names, long_names;
  for (const DomainInfo& d : domain_table()) {
    (d.is_long ? long_names : short_names).emplace_back(d.name);
    EXPECT_EQ(is_long_domain(std::string(d.name)), d.is_long) << d.name;
    EXPECT_TRUE(is_known_domain(std::string(d.name))) << d.name;
    const TokenRange r = default_token_range(std::string(d.name));
    EXPECT_EQ(r.min, d.default_tokens.min) << d.name;
    EXPECT_EQ(r.max, d.default_tokens.max) << d.name;
    EXPECT_EQ(max_tokens_for(std::string(d.name)), d.is_long ? 131072u : 32768u) << d.name;
  }
  EXPECT_EQ(generator_domains(), short_names);
  EXPECT_EQ(long_generator_domains(), long_names);
  // Every accepted value is in the error message and in --domain's help, in table order.
  std::string listed, help;
  for (const std::string& d : short_names) listed += d + ", ", help += d + ", ";
  listed += "all, ", help += "all; ";
  for (const std::string& d : long_names) listed += d + ", ", help += d + ", ";
  EXPECT_EQ(domain_list_text(), listed + "long");
  EXPECT_EQ(domain_help_text(), help + "long");
  EXPECT_FALSE(is_known_domain("sports"));
}

TEST(DomainTable, EveryEntryGeneratesItsOwnItems) {
  for (const DomainInfo& d : domain_table()) {
    const std::string name(d.name);
    const std::vector<EvalItem> items = generate(GenerateOptions{name, 4, 2, {}});
    ASSERT_EQ(items.size(), 2u) << name;
    for (const EvalItem& item : items) {
      EXPECT_EQ(item.domain, name);
      EXPECT_EQ(item.id.rfind(name + "-s4-", 0), 0u) << item.id;
      EXPECT_EQ(item.meta.contains("depth"), d.is_long) << item.id;
    }
    // Only long domains place evidence at a depth, and only theirs is in the id.
    if (d.is_long) {
      const std::vector<EvalItem> deep = generate(GenerateOptions{name, 4, 1, {}, {300}});
      ASSERT_EQ(deep.size(), 1u);
      EXPECT_EQ(deep[0].id, name + "-s4-d300-0000");
      EXPECT_EQ(generated_depth_permille(deep[0].id), 300);
    } else {
      EXPECT_THROW(generate(GenerateOptions{name, 4, 1, {}, {300}}), Error) << name;
    }
  }
}

}  // namespace
}  // namespace kvgate::evalsets
