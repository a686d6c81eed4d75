// Every generator's answers are recomputed here from the item's own text, with parsers written
// independently of the generators (re-sum the table, re-apply the diff, follow the policy's
// cross-reference, re-read the tool results).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "evalsets/generate.h"
#include "evalsets/item.h"

namespace kvgate::evalsets {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

std::string between(const std::string& text, const std::string& open, const std::string& close) {
  const size_t a = text.find(open);
  EXPECT_NE(a, std::string::npos) << open;
  const size_t b = text.find(close, a + open.size());
  EXPECT_NE(b, std::string::npos) << close;
  return text.substr(a + open.size(), b - a - open.size());
}

int64_t parse_cents(const std::string& s) {
  const size_t dot = s.find('.');
  EXPECT_NE(dot, std::string::npos) << s;
  EXPECT_EQ(s.size() - dot, 3u) << s;
  return std::stoll(s.substr(0, dot)) * 100 + std::stoll(s.substr(dot + 1));
}

std::string cents(int64_t c) {
  const std::string frac = std::to_string(c % 100);
  return std::to_string(c / 100) + "." + (frac.size() < 2 ? "0" + frac : frac);
}

std::vector<EvalItem> make(const std::string& domain, size_t n, TokenRange tokens = {}) {
  std::vector<EvalItem> items = generate(GenerateOptions{domain, 42, n, tokens});
  // Every generated item passes the loader's own validation.
  EXPECT_EQ(canonical_jsonl(parse_items(canonical_jsonl(items), "generated")), canonical_jsonl(items));
  return items;
}

TEST(Generate, SameSeedSameBytesAndLargerNExtendsSmaller) {
  const std::string a = canonical_jsonl(generate(GenerateOptions{"all", 7, 4, {}}));
  const std::string b = canonical_jsonl(generate(GenerateOptions{"all", 7, 4, {}}));
  EXPECT_EQ(a, b);
  const std::string other_seed = canonical_jsonl(generate(GenerateOptions{"all", 8, 4, {}}));
  EXPECT_NE(a, other_seed);
  const auto three = generate(GenerateOptions{"policy", 7, 3, {}});
  const auto five = generate(GenerateOptions{"policy", 7, 5, {}});
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(canonical_line(three[i]), canonical_line(five[i]));
}

// Pinned output: a change here means every stored result keyed by these eval sets changes
// identity. Update the constants only for a deliberate generator change.
TEST(Generate, PinnedHashesOfFixedSeedItems) {
  std::map<std::string, std::string> hashes;
  for (const std::string& d : generator_domains())
    hashes[d] = hex_u64(xxhash64(canonical_line(generate_item(d, 1, 0, default_token_range(d)))));
  EXPECT_EQ(hashes["tables"], "12d8ff2e476b7431");
  EXPECT_EQ(hashes["diffs"], "c0c1fdd3ed5198b3");
  EXPECT_EQ(hashes["korean"], "215cc7f9b3fd129f");
  EXPECT_EQ(hashes["policy"], "d6e1029945419c4e");
  EXPECT_EQ(hashes["agentic"], "2768769e9961af7f");
  EXPECT_EQ(hashes["lookup"], "ad00bbdaaa7fe8b4");
}

TEST(Generate, LengthsFollowTheTokenRange) {
  for (const std::string& d : generator_domains()) {
    if (d == "lookup") continue;  // short by design: LookupAnswersAreCopiedFromAShortContext
    // Five tool turns, the fewest an agentic session has, take ~900 tokens.
    const TokenRange small = d == "agentic" ? TokenRange{900, 1500} : TokenRange{300, 600};
    for (TokenRange range : {small, TokenRange{2000, 4000}}) {
      for (const EvalItem& item : generate(GenerateOptions{d, 3, 6, range})) {
        const size_t t = estimate_tokens(item);
        EXPECT_GE(t, range.min * 6 / 10) << item.id;
        EXPECT_LE(t, range.max * 14 / 10) << item.id;
      }
    }
  }
}

TEST(Generate, BadOptionsAreUsageErrors) {
  EXPECT_THROW(generate(GenerateOptions{"sports", 1, 1, {}}), Error);
  EXPECT_THROW(generate(GenerateOptions{"tables", 1, 0, {}}), Error);
  EXPECT_THROW(generate(GenerateOptions{"tables", 1, 1, {500, 100}}), Error);
}

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> raw;
};

Table parse_table(const std::string& text) {
  Table t;
  for (const std::string& line : lines_of(text)) {
    const bool md = line.rfind("| ", 0) == 0;
    if (!md && line.find(',') == std::string::npos) continue;
    if (line.rfind("|---", 0) == 0) continue;
    std::vector<std::string> cells;
    std::string body = md ? line.substr(2, line.size() - 4) : line;
    const std::string sep = md ? " | " : ",";
    size_t pos = 0;
    while (true) {
      const size_t at = body.find(sep, pos);
      cells.push_back(body.substr(pos, at == std::string::npos ? std::string::npos : at - pos));
      if (at == std::string::npos) break;
      pos = at + sep.size();
    }
    if (cells.size() != 7) continue;
    if (cells[0] == "order_id") t.header = cells;
    else {
      t.rows.push_back(cells);
      t.raw.push_back(line);
    }
  }
  return t;
}

TEST(Generate, TablesAnswersRecomputeFromTheTable) {
  std::map<std::string, int> kinds;
  for (const EvalItem& item : make("tables", 40)) {
    const std::string& prompt = item.messages[1].content;
    const Table t = parse_table(prompt);
    ASSERT_EQ(t.header.size(), 7u) << item.id;
    ASSERT_GE(t.rows.size(), 8u);
    auto col = [&](const std::string& name) {
      for (size_t i = 0; i < 7; ++i)
        if (t.header[i] == name) return i;
      ADD_FAILURE() << name;
      return size_t{0};
    };
    for (const auto& r : t.rows) EXPECT_EQ(parse_cents(r[col("amount")]), std::stoll(r[col("quantity")]) * parse_cents(r[col("unit_price")]));
    const std::string kind = item.meta["question"];
    ++kinds[kind];
    std::string expected;
    if (kind == "lookup" || kind == "row") {
      const std::string key = item.meta["key"];
      EXPECT_NE(prompt.find("order " + key + (kind == "row" ? " exactly" : "?")), std::string::npos);
      int matches = 0;
      for (size_t r = 0; r < t.rows.size(); ++r)
        if (t.rows[r][0] == key) {
          ++matches;
          expected = kind == "row" ? t.raw[r] : t.rows[r][col(item.meta["column"])];
        }
      EXPECT_EQ(matches, 1);
    } else {
      const std::string region = item.meta["region"], column = item.meta["column"];
      EXPECT_NE(prompt.find("sum of the " + column + " column over all rows whose region is " + region + "?"), std::string::npos);
      int64_t sum = 0;
      for (const auto& r : t.rows)
        if (r[col("region")] == region) sum += column == "amount" ? parse_cents(r[col("amount")]) : std::stoll(r[col("quantity")]);
      expected = column == "amount" ? cents(sum) : std::to_string(sum);
    }
    EXPECT_EQ(item.messages.back().content, expected) << item.id;
    EXPECT_EQ(item.answer, expected);
  }
  EXPECT_EQ(kinds.size(), 3u);
}

struct Patched {
  std::vector<std::string> lines;
  std::vector<std::pair<size_t, std::string>> added;  // (new line number, text)
};

// Applies a unified diff, checking every @@ header's counts against its body.
Patched apply_patch(const std::vector<std::string>& old_lines, const std::string& diff) {
  Patched p;
  const std::regex header(R"(^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$)");
  const std::vector<std::string> dl = lines_of(diff);
  size_t old_pos = 0;  // lines of old copied so far
  for (size_t i = 0; i < dl.size();) {
    std::smatch m;
    if (!std::regex_match(dl[i], m, header)) {
      ++i;
      continue;
    }
    const size_t old_start = std::stoul(m[1]), old_count = m[2].matched ? std::stoul(m[2]) : 1;
    const size_t new_start = std::stoul(m[3]), new_count = m[4].matched ? std::stoul(m[4]) : 1;
    const size_t first_old = old_count == 0 ? old_start : old_start - 1;
    while (old_pos < first_old) p.lines.push_back(old_lines[old_pos++]);
    EXPECT_EQ(p.lines.size() + (new_count == 0 ? 0 : 1), new_start) << dl[i];
    size_t seen_old = 0, seen_new = 0;
    for (++i; i < dl.size() && dl[i].rfind("@@", 0) != 0; ++i) {
      const char mark = dl[i][0];
      const std::string body = dl[i].substr(1);
      if (mark == ' ' || mark == '-') {
        EXPECT_EQ(old_lines.at(old_pos), body);
        ++old_pos;
        ++seen_old;
      }
      if (mark == ' ' || mark == '+') {
        p.lines.push_back(body);
        ++seen_new;
        if (mark == '+') p.added.push_back({p.lines.size(), body});
      }
    }
    EXPECT_EQ(seen_old, old_count);
    EXPECT_EQ(seen_new, new_count);
  }
  while (old_pos < old_lines.size()) p.lines.push_back(old_lines[old_pos++]);
  return p;
}

TEST(Generate, DiffsAnswersRecomputeByApplyingThePatch) {
  std::map<std::string, int> kinds;
  for (const EvalItem& item : make("diffs", 40)) {
    const std::string& prompt = item.messages[1].content;
    const bool python = item.meta["language"] == "python";
    const std::string source = between(prompt, python ? "```python\n" : "```c\n", "```\n\nAnd a patch");
    const std::string diff = between(prompt, "```diff\n", "```\n\nQuestion");
    ASSERT_EQ(diff.rfind("--- a/", 0), 0u);
    const Patched patched = apply_patch(lines_of(source), diff);
    ASSERT_FALSE(patched.added.empty());
    const std::string kind = item.meta["question"];
    ++kinds[kind];
    std::string expected;
    if (kind == "added_lines") {
      for (const auto& [number, text] : patched.added) {
        EXPECT_EQ(patched.lines[number - 1], text);
        if (!expected.empty()) expected += '\n';
        expected += std::to_string(number);
        expected += ": " + text;
      }
    } else if (kind == "function_after") {
      const std::string name = item.meta["function"];
      const std::string start = python ? "def " + name + "(" : "static long " + name + "(";
      size_t i = 0;
      while (i < patched.lines.size() && patched.lines[i].rfind(start, 0) != 0) ++i;
      ASSERT_LT(i, patched.lines.size()) << name;
      for (; i < patched.lines.size() && !patched.lines[i].empty(); ++i) {
        expected += (expected.empty() ? "" : "\n") + patched.lines[i];
        if (!python && patched.lines[i] == "}") break;
      }
    } else {
      const std::string name = item.meta["constant"];
      auto value_in = [&](const std::vector<std::string>& lines) {
        const std::string prefix = python ? name + " = " : "#define " + name + " ";
        for (const std::string& l : lines)
          if (l.rfind(prefix, 0) == 0) return l.substr(prefix.size());
        return std::string("missing");
      };
      expected = value_in(patched.lines);
      EXPECT_NE(expected, value_in(lines_of(source)));
    }
    EXPECT_EQ(item.messages.back().content, expected) << item.id << "\n" << diff;
  }
  EXPECT_EQ(kinds.size(), 3u);
}

TEST(Generate, KoreanAnswersAreTheFactsOfTheNamedPerson) {
  const std::map<std::string, std::regex> field_pattern = {
      {"phone", std::regex("010-[0-9]{4}-[0-9]{4}")},
      {"date", std::regex("2024년 [0-9]{1,2}월 [0-9]{1,2}일")},
      {"amount", std::regex("[0-9]{1,3}(,[0-9]{3})*원")},
      {"address", std::regex("(서울특별시|부산광역시|대구광역시|인천광역시|광주광역시|대전광역시|경기도|제주특별자치도) [^ ]+ ([^ ]+구 )?[^ ]+로 [0-9]+")},
  };
  std::map<std::string, int> kinds;
  for (const EvalItem& item : make("korean", 40)) {
    const std::string& prompt = item.messages[1].content;
    const std::string person = item.meta["person"], field = item.meta["field"];
    ++kinds[field];
    EXPECT_NE(prompt.find("질문: " + person + " 씨의"), std::string::npos);
    std::string paragraph;
    int count = 0;
    for (const std::string& line : lines_of(prompt))
      if (line.rfind("질문:", 0) != 0 && line.find(person + " 씨") != std::string::npos) {
        paragraph = line;
        ++count;
      }
    ASSERT_EQ(count, 1) << person;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(paragraph, m, field_pattern.at(field))) << paragraph;
    EXPECT_EQ(item.messages.back().content, m.str()) << paragraph;
  }
  EXPECT_EQ(kinds.size(), 4u);
}

TEST(Generate, PolicyAnswersFollowTheCrossReference) {
  const std::regex clause_line(R"(^(\d+\.\d+) (.*)$)");
  const std::regex value(R"(\$[0-9]{1,3}(,[0-9]{3})*|[0-9]+ days|[0-9]+ hours)");
  const std::regex reference(R"(except as provided in (\d+\.\d+))");
  int exceptions = 0;
  for (const EvalItem& item : make("policy", 40)) {
    std::map<std::string, std::string> clauses;
    for (const std::string& line : lines_of(item.messages[1].content)) {
      std::smatch m;
      if (std::regex_match(line, m, clause_line)) {
        EXPECT_EQ(clauses.count(m[1]), 0u) << "clause id used twice: " << m[1];
        clauses[m[1]] = m[2];
      }
    }
    const std::string base_id = item.meta["base_clause"];
    ASSERT_EQ(clauses.count(base_id), 1u);
    std::smatch ref;
    ASSERT_TRUE(std::regex_search(clauses[base_id], ref, reference)) << clauses[base_id];
    const std::string target_id = ref[1];
    ASSERT_EQ(clauses.count(target_id), 1u) << target_id;
    EXPECT_NE(clauses[target_id].find(base_id), std::string::npos) << "the exception names the clause it overrides";
    EXPECT_NE(target_id.substr(0, target_id.find('.')), base_id.substr(0, base_id.find('.')));
    const bool exception = item.meta["question"] == "exception";
    exceptions += exception;
    const std::string& source = clauses[exception ? target_id : base_id];
    std::vector<std::string> values;
    for (auto it = std::sregex_iterator(source.begin(), source.end(), value); it != std::sregex_iterator(); ++it)
      values.push_back(it->str());
    ASSERT_EQ(values.size(), 1u) << source;
    EXPECT_EQ(item.messages.back().content, values[0]) << item.id;
  }
  EXPECT_GT(exceptions, 20);
  EXPECT_LT(exceptions, 40);
}

// Recomputes the reply of tool turn i (messages 1+4i .. 4+4i) from its own tool result.
void expect_turn_fact(const EvalItem& item, size_t i, std::map<std::string, int>& kinds) {
  const Message& request = item.messages[1 + 4 * i];
  const Message& call = item.messages[2 + 4 * i];
  const Message& result = item.messages[3 + 4 * i];
  const std::string& reply = item.messages[4 + 4 * i].content;
  ASSERT_EQ(call.tool_calls.size(), 1u);
  EXPECT_EQ(result.tool_call_id, call.tool_calls[0]["id"]);
  EXPECT_FALSE(nlohmann::json::parse(call.tool_calls[0]["function"]["arguments"].get<std::string>()).is_discarded());
  const nlohmann::json& fact = item.meta["facts"][i];
  const std::string kind = fact["kind"];
  ++kinds[kind];
  std::string expected;
  if (kind == "first_error" || kind == "error_count") {
    const std::string service = fact["service"];
    EXPECT_NE(request.content.find(service), std::string::npos);
    std::string first;
    int count = 0;
    for (const std::string& line : lines_of(result.content)) {
      std::istringstream in(line);
      std::string ts, level, svc;
      in >> ts >> level >> svc;
      if (level != "ERROR" || svc != service) continue;
      if (count++ == 0) first = ts + ": " + line.substr(ts.size() + level.size() + svc.size() + 3, line.find(" (req=") - (ts.size() + level.size() + svc.size() + 3));
    }
    ASSERT_GT(count, 0);
    expected = kind == "first_error" ? "The first ERROR from " + service + " was at " + first + "."
                                     : service + " wrote " + std::to_string(count) + " ERROR lines in the window.";
  } else if (kind == "max_revenue") {
    int64_t best = -1;
    std::string store;
    for (const std::string& line : lines_of(result.content)) {
      std::vector<std::string> cells;
      std::stringstream ss(line);
      std::string cell;
      while (std::getline(ss, cell, '|')) cells.push_back(cell.substr(cell.find_first_not_of(' '), cell.find_last_not_of(' ') - cell.find_first_not_of(' ') + 1));
      if (cells.size() != 4 || cells[1][0] != 'S') continue;
      if (parse_cents(cells[3]) > best) {
        best = parse_cents(cells[3]);
        store = cells[1];
      }
    }
    const auto args = nlohmann::json::parse(call.tool_calls[0]["function"]["arguments"].get<std::string>());
    const std::string sql = args["sql"];
    const std::string day = sql.substr(sql.find("day = '") + 7, 10);
    expected = "Store " + store + " had the highest revenue on " + day + ": " + cents(best) + ".";
  } else {
    const std::string key = fact["key"];
    EXPECT_NE(request.content.find(key), std::string::npos);
    std::string found;
    for (const std::string& line : lines_of(result.content))
      if (line.rfind("  " + key + ": ", 0) == 0) found = line.substr(key.size() + 4);
    ASSERT_FALSE(found.empty()) << key;
    const auto args = nlohmann::json::parse(call.tool_calls[0]["function"]["arguments"].get<std::string>());
    expected = key + " is set to " + found + " in " + args["path"].get<std::string>() + ".";
  }
  EXPECT_EQ(reply, expected) << item.id << " turn " << i + 1;
}

TEST(Generate, LookupAnswersAreCopiedFromAShortContext) {
  const std::vector<EvalItem> items = make("lookup", 9, {2000, 4000});
  std::map<std::string, int> kinds;
  for (const EvalItem& item : items) {
    const std::string text = item.messages[1].content;
    const std::string kind = item.meta["kind"].get<std::string>();
    ++kinds[kind];
    EXPECT_LE(estimate_tokens(item), 150u) << item.id << ": the context stays short whatever the range";
    ASSERT_TRUE(item.has_answer);
    // Only the value after the reply's lead-in is scored.
    ASSERT_EQ(item.spans.size(), 1u);
    EXPECT_EQ(item.messages.back().content.substr(item.spans[0].begin), " " + item.answer) << item.id;
    std::map<std::string, std::string> fields;  // "key: value" lines
    std::vector<std::string> added;             // a diff's "+" lines
    for (const std::string& line : lines_of(text)) {
      if (line.rfind("+", 0) == 0 && line.rfind("+++", 0) != 0) added.push_back(line.substr(1));
      const size_t colon = line.find(": ");
      if (colon != std::string::npos) fields[line.substr(0, colon)] = line.substr(colon + 2);
    }
    if (kind == "cell") {
      EXPECT_NE(text.find("Order " + item.meta["key"].get<std::string>() + "\n"), std::string::npos) << text;
      EXPECT_EQ(fields[item.meta["column"].get<std::string>()], item.answer) << text;
    } else if (kind == "added_line") {
      ASSERT_EQ(added.size(), 1u) << text;
      EXPECT_EQ(added[0], item.meta["setting"].get<std::string>() + " = " + item.answer) << text;
    } else {
      ASSERT_EQ(kind, "phone");
      EXPECT_EQ(fields["Phone"], item.answer) << text;
      EXPECT_EQ(fields["Name"].rfind(item.meta["person"].get<std::string>() + " (", 0), 0u) << text;
    }
  }
  EXPECT_EQ(kinds, (std::map<std::string, int>{{"added_line", 3}, {"cell", 3}, {"phone", 3}}));
}

TEST(Generate, AgenticRepliesStateFactsOfTheirToolResults) {
  std::map<std::string, int> kinds;
  for (const EvalItem& item : make("agentic", 12, TokenRange{600, 6000})) {
    ASSERT_EQ(item.score, ScoreKind::turns);
    ASSERT_EQ((item.messages.size() - 1) % 4, 0u);
    const size_t turns = (item.messages.size() - 1) / 4;
    EXPECT_GE(turns, 5u);
    EXPECT_LE(turns, 20u);
    EXPECT_EQ(scored_targets(item).size(), turns);
    for (size_t i = 0; i < turns; ++i) expect_turn_fact(item, i, kinds);
  }
  EXPECT_EQ(kinds.size(), 4u);
}

// ---- Long generators: answers re-read from the text, lengths, and where the evidence sits.

std::vector<EvalItem> make_long(const std::string& domain, size_t n, TokenRange tokens, int depth = kNoDepth,
                                uint64_t seed = 42) {
  std::vector<EvalItem> items =
      generate(GenerateOptions{domain, seed, n, tokens, depth == kNoDepth ? std::vector<int>{} : std::vector<int>{depth}});
  EXPECT_EQ(canonical_jsonl(parse_items(canonical_jsonl(items), "generated")), canonical_jsonl(items));
  return items;
}

// The share of `text`'s estimated tokens that come before byte `pos`.
double fraction_at(const std::string& text, size_t pos) {
  EXPECT_NE(pos, std::string::npos);
  if (pos == std::string::npos) return -1;
  return static_cast<double>(estimate_tokens(std::string_view(text).substr(0, pos))) /
         static_cast<double>(estimate_tokens(text));
}

int depth_of(const EvalItem& item) { return static_cast<int>(std::lround(item.meta["depth"].get<double>() * 1000)); }

const std::string& prompt_of(const EvalItem& item) { return item.messages[1].content; }

// Lines with their byte offsets.
std::vector<std::pair<size_t, std::string>> offset_lines(const std::string& text) {
  std::vector<std::pair<size_t, std::string>> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t nl = text.find('\n', at);
    out.push_back({at, text.substr(at, nl == std::string::npos ? std::string::npos : nl - at)});
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return out;
}

// Checks an item at a known depth: `pos` is where its evidence starts in the prompt.
void expect_depth(const EvalItem& item, size_t pos, int depth, double tolerance = 0.03) {
  const double f = fraction_at(prompt_of(item), pos);
  EXPECT_NEAR(f, depth / 1000.0, tolerance) << item.id << " depth " << depth;
}

TEST(GenerateLong, SameSeedSameBytesAndDepthMovesOnlyTheEvidence) {
  for (const std::string& d : long_generator_domains()) {
    const auto a = make_long(d, 3, {3000, 5000});
    const auto b = make_long(d, 3, {3000, 5000});
    EXPECT_EQ(canonical_jsonl(a), canonical_jsonl(b)) << d;
    EXPECT_NE(canonical_jsonl(a), canonical_jsonl(make_long(d, 3, {3000, 5000}, kNoDepth, 43))) << d;
    const auto two = make_long(d, 2, {3000, 5000});
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(canonical_line(two[i]), canonical_line(a[i])) << d;
    for (const EvalItem& item : a) {
      EXPECT_EQ(item.domain, d);
      EXPECT_EQ(depth_of(item) % 100, 0) << "a drawn depth is a tenth";
    }
  }
  // The same item at two depths: ids say the depth, and the document differs only by where
  // the evidence went (the table is the same table, the needle the same needle).
  // Seed 40, item 0: a single needle (the kind cycles with seed + index).
  const auto shallow = make_long("retrieval", 1, {3000, 4000}, 200, 40), deep = make_long("retrieval", 1, {3000, 4000}, 800, 40);
  EXPECT_EQ(shallow[0].meta["task"], "niah_single");
  EXPECT_EQ(shallow[0].id, "retrieval-s40-d200-0000");
  EXPECT_EQ(deep[0].id, "retrieval-s40-d800-0000");
  std::vector<std::string> a = lines_of(prompt_of(shallow[0])), b = lines_of(prompt_of(deep[0]));
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  EXPECT_NE(prompt_of(shallow[0]), prompt_of(deep[0]));
  EXPECT_EQ(shallow[0].answer, deep[0].answer);
  const auto t1 = make_long("long_tables", 1, {3000, 4000}, 100), t2 = make_long("long_tables", 1, {3000, 4000}, 900);
  const std::string& p1 = prompt_of(t1[0]);
  const std::string& p2 = prompt_of(t2[0]);
  EXPECT_EQ(p1.substr(0, p1.find("\nQuestion:")), p2.substr(0, p2.find("\nQuestion:")));
}

TEST(GenerateLong, LengthsStayInsideTheTokenRange) {
  for (const std::string& d : long_generator_domains()) {
    for (TokenRange range : {TokenRange{2000, 3000}, TokenRange{6000, 8000}, TokenRange{20000, 24000}}) {
      for (const EvalItem& item : make_long(d, 3, range)) {
        const size_t t = estimate_tokens(item);
        // Documents grow by whole pieces (a row, a record, a file's diff of up to ~300 tokens).
        EXPECT_GE(t, range.min * 85 / 100) << item.id;
        EXPECT_LE(t, range.max * 102 / 100) << item.id;
      }
    }
  }
  // One item per domain at the top of the range the long suite uses.
  for (const std::string& d : long_generator_domains()) {
    const EvalItem item = generate_item(d, 5, 0, {120000, 128000});
    EXPECT_GE(estimate_tokens(item), 108000u) << d;
    EXPECT_LE(estimate_tokens(item), 130560u) << d;
  }
  const EvalItem tables = generate_item("long_tables", 5, 0, {120000, 128000});
  EXPECT_GT(tables.meta["rows"].get<size_t>(), 2000u) << "thousands of rows";
}

TEST(GenerateLong, BadOptionsAreUsageErrors) {
  EXPECT_THROW(generate(GenerateOptions{"tables", 1, 1, {}, {500}}), Error);  // no depth for short domains
  EXPECT_THROW(generate(GenerateOptions{"retrieval", 1, 1, {}, {1001}}), Error);
  EXPECT_THROW(generate(GenerateOptions{"retrieval", 1, 1, {1000, 140000}}), Error);
  EXPECT_THROW(generate(GenerateOptions{"tables", 1, 1, {1000, 40000}}), Error);
  EXPECT_NO_THROW(generate(GenerateOptions{"long_tables", 1, 1, {1000, 40000}}));
  EXPECT_EQ(parse_depth("0"), 0);
  EXPECT_EQ(parse_depth("1"), 1000);
  EXPECT_EQ(parse_depth("0.25"), 250);
  EXPECT_EQ(parse_depth(".5"), 500);
  EXPECT_EQ(parse_depth("1.000"), 1000);
  for (const char* bad : {"", "1.5", "-0.1", "0.2500", "2", "0.x", "abc", "1.001", "."}) EXPECT_THROW(parse_depth(bad), Error) << bad;
  // "long" is every long domain.
  std::map<std::string, int> domains;
  for (const EvalItem& item : generate(GenerateOptions{"long", 1, 1, {2000, 3000}})) ++domains[item.domain];
  EXPECT_EQ(domains.size(), long_generator_domains().size());
}

struct Needle {
  size_t pos;
  std::string key, value;
};

TEST(GenerateLong, RetrievalAnswersRecomputeFromTheHaystack) {
  const std::regex needle_line(R"(^One of the special magic (numbers|UUIDs|Korean words) for ([a-z]+-[a-z]+) is: (.+)\.$)");
  const std::regex var_line(R"(^VAR ([A-Z]{5}) = (VAR ([A-Z]{5})|([0-9]+))\.$)");
  const std::regex works_line(R"(^([A-Z][a-z]+ [A-Z][a-z]+) works in the ([A-Za-z]+) office\.$)");
  const std::regex code_line(R"(^The door code of the ([A-Za-z]+) office is (.+)\.$)");
  const std::map<std::string, std::regex> value_pattern = {
      {"number", std::regex("[0-9]{7}")},
      {"UUID", std::regex("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")},
      {"Korean word", std::regex("[^ -~]+ [^ -~]+")}};
  std::map<std::string, int> tasks;
  for (const int depth : {0, 250, 500, 750, 1000}) {
    for (const EvalItem& item : make_long("retrieval", 15, {6000, 8000}, depth)) {
      const std::string& prompt = prompt_of(item);
      const std::string task = item.meta["task"];
      ++tasks[task];
      std::vector<Needle> needles;
      std::map<std::string, std::pair<size_t, std::string>> works, codes;  // person/office -> (pos, value)
      const auto lines = offset_lines(prompt);
      for (const auto& [pos, line] : lines) {
        std::smatch m;
        if (std::regex_match(line, m, needle_line)) needles.push_back({pos, m[2], m[3]});
        if (std::regex_match(line, m, works_line)) {
          EXPECT_TRUE(works.insert({m[1], {pos, m[2]}}).second) << m[1];
        }
        if (std::regex_match(line, m, code_line)) {
          EXPECT_TRUE(codes.insert({m[1], {pos, m[2]}}).second) << m[1];
        }
      }
      if (task.rfind("niah", 0) == 0) {
        const std::string key = item.meta["key"];
        EXPECT_NE(prompt.find(" for " + key + " mentioned in the provided text?"), std::string::npos);
        std::vector<Needle> asked;
        std::set<std::string> keys, values;
        for (const Needle& n : needles) {
          keys.insert(n.key);
          EXPECT_TRUE(values.insert(n.value).second) << "every needle value is distinct";
          EXPECT_TRUE(std::regex_match(n.value, value_pattern.at(item.meta["value_kind"]))) << n.value;
          if (n.key == key) asked.push_back(n);
        }
        if (task == "niah_multivalue") {
          ASSERT_EQ(asked.size(), 4u) << item.id;
          std::string expected;
          double nearest = 2;
          for (const Needle& n : asked) {
            expected += (expected.empty() ? "" : ", ") + n.value;
            nearest = std::min(nearest, std::abs(fraction_at(prompt, n.pos) - depth / 1000.0));
          }
          EXPECT_EQ(item.answer, expected) << item.id;
          EXPECT_LE(nearest, 0.03) << item.id;
        } else {
          ASSERT_EQ(asked.size(), 1u) << item.id;
          EXPECT_EQ(keys.size(), task == "niah_multikey" ? 4u : 1u);
          EXPECT_EQ(item.answer, asked[0].value);
          expect_depth(item, asked[0].pos, depth);
        }
      } else if (task == "variable_tracking") {
        // Resolve every variable by following its chain; list those holding the asked value.
        std::map<std::string, std::string> rhs;
        std::vector<std::pair<size_t, std::string>> order;
        for (const auto& [pos, line] : lines) {
          std::smatch m;
          if (!std::regex_match(line, m, var_line)) continue;
          EXPECT_TRUE(rhs.insert({m[1], m[2]}).second) << "assigned twice: " << m[1];
          order.push_back({pos, m[1]});
        }
        ASSERT_EQ(order.size(), 8u) << item.id;
        const std::string value = between(item.messages[1].content, "assigned the value ", " in the text");
        std::string expected;
        std::vector<size_t> positions;
        for (const auto& [pos, name] : order) {
          std::string v = rhs[name];
          for (int hops = 0; v.rfind("VAR ", 0) == 0 && hops < 10; ++hops) v = rhs[v.substr(4)];
          if (v == value) {
            expected += (expected.empty() ? "" : " ") + name;
            positions.push_back(pos);
          }
        }
        EXPECT_EQ(item.answer, expected) << item.id;
        ASSERT_EQ(positions.size(), 4u);
        expect_depth(item, positions.back(), depth);
        expect_depth(item, positions.front(), std::max(0, depth - 500));
      } else {
        ASSERT_EQ(task, "two_hop");
        const std::string person = between(item.messages[1].content, "office where ", " works?");
        ASSERT_EQ(works.count(person), 1u) << person;
        const std::string office = works[person].second;
        ASSERT_EQ(codes.count(office), 1u) << office;
        EXPECT_EQ(item.answer, codes[office].second);
        EXPECT_TRUE(std::regex_match(item.answer, value_pattern.at(item.meta["value_kind"]))) << item.answer;
        EXPECT_EQ(works.size(), 6u);
        expect_depth(item, codes[office].first, depth);
        expect_depth(item, works[person].first, depth >= 500 ? depth - 500 : depth + 500);
      }
      EXPECT_EQ(item.messages.back().content, item.answer);
    }
  }
  EXPECT_EQ(tasks.size(), 5u);
}

TEST(GenerateLong, TablesAnswersRecomputeFromTheTable) {
  std::map<std::string, int> kinds;
  for (const int depth : {0, 300, 600, 1000}) {
    for (const EvalItem& item : make_long("long_tables", 6, {6000, 8000}, depth)) {
      const std::string& prompt = prompt_of(item);
      const Table t = parse_table(prompt);
      ASSERT_EQ(t.header.size(), 7u) << item.id;
      ASSERT_EQ(t.rows.size(), item.meta["rows"].get<size_t>());
      std::set<std::string> ids;
      for (const auto& r : t.rows) {
        EXPECT_TRUE(ids.insert(r[0]).second) << r[0];
        EXPECT_EQ(parse_cents(r[6]), std::stoll(r[4]) * parse_cents(r[5]));
      }
      const std::string kind = item.meta["question"];
      ++kinds[kind];
      auto row_of = [&](const std::string& id) {
        for (size_t r = 0; r < t.rows.size(); ++r)
          if (t.rows[r][0] == id) return r;
        ADD_FAILURE() << id;
        return size_t{0};
      };
      std::string expected;
      size_t evidence_row = 0;
      if (kind == "block_sum") {
        const std::string first = item.meta["first"], last = item.meta["last"], column = item.meta["column"];
        EXPECT_NE(prompt.find("rows from order " + first + " to order " + last), std::string::npos);
        const size_t a = row_of(first), b = row_of(last);
        ASSERT_LE(a, b);
        EXPECT_NE(prompt.find("over the " + std::to_string(b - a + 1) + " consecutive rows"), std::string::npos);
        int64_t sum = 0;
        for (size_t r = a; r <= b; ++r) sum += column == "amount" ? parse_cents(t.rows[r][6]) : std::stoll(t.rows[r][4]);
        expected = column == "amount" ? cents(sum) : std::to_string(sum);
        evidence_row = a;
      } else {
        const std::string key = item.meta["key"];
        evidence_row = row_of(key);
        if (kind == "row") {
          expected = t.raw[evidence_row];
        } else {
          const std::string column = item.meta["column"];
          for (size_t c = 0; c < 7; ++c)
            if (t.header[c] == column) expected = t.rows[evidence_row][c];
        }
      }
      EXPECT_EQ(item.answer, expected) << item.id;
      EXPECT_EQ(item.messages.back().content, expected);
      // A summed block that would run past the last row starts early enough to fit.
      const size_t pos = prompt.find(t.raw[evidence_row] + "\n");
      if (kind == "block_sum" && depth == 1000) EXPECT_EQ(item.meta["last"], t.rows.back()[0]);
      else expect_depth(item, pos, depth);
    }
  }
  EXPECT_EQ(kinds.size(), 3u);
}

TEST(GenerateLong, DiffsAnswersAreTheAddedLinesOfTheAskedFile) {
  const std::regex header(R"(^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$)");
  for (const int depth : {0, 400, 800, 1000}) {
    for (const EvalItem& item : make_long("long_diffs", 4, {6000, 8000}, depth)) {
      const std::string& prompt = prompt_of(item);
      const std::string diff = between(prompt, "```diff\n", "```\n\nQuestion");
      std::map<std::string, std::vector<std::string>> added;
      std::map<std::string, size_t> starts;
      std::string file;
      size_t old_left = 0, new_left = 0;
      for (const auto& [pos, line] : offset_lines(diff)) {
        std::smatch m;
        if (line.rfind("diff --git a/", 0) == 0) {
          EXPECT_EQ(old_left + new_left, 0u) << "the previous hunk is complete";
          file = line.substr(13, line.find(" b/") - 13);
          EXPECT_EQ(line, "diff --git a/" + file + " b/" + file);
          EXPECT_TRUE(starts.insert({file, prompt.find(line + "\n")}).second) << "file listed twice: " << file;
        } else if (std::regex_match(line, m, header)) {
          EXPECT_EQ(old_left + new_left, 0u);
          old_left = m[2].matched ? std::stoul(m[2]) : 1;
          new_left = m[4].matched ? std::stoul(m[4]) : 1;
        } else if (line.rfind("--- a/", 0) == 0 || line.rfind("+++ b/", 0) == 0) {
          EXPECT_EQ(line.substr(6), file);
        } else if (!line.empty()) {
          if (line[0] != '+') --old_left;
          if (line[0] != '-') --new_left;
          if (line[0] == '+') added[file].push_back(line.substr(1));
        }
      }
      EXPECT_EQ(old_left + new_left, 0u);
      EXPECT_GT(starts.size(), 3u);
      const std::string asked = item.meta["file"];
      EXPECT_NE(prompt.find("adds to `" + asked + "`"), std::string::npos);
      std::string expected;
      for (const std::string& l : added[asked]) expected += (expected.empty() ? "" : "\n") + l;
      ASSERT_FALSE(expected.empty());
      EXPECT_EQ(item.answer, expected) << item.id;
      // The last file cannot start at the very end; it starts where the last diff does.
      if (depth == 1000) EXPECT_EQ(starts[asked], std::max_element(starts.begin(), starts.end(), [](auto& a, auto& b) { return a.second < b.second; })->second);
      else expect_depth(item, starts[asked], depth, 0.06);
    }
  }
}

TEST(GenerateLong, PolicyExceptionSitsFarAfterTheRuleItOverrides) {
  const std::regex clause_line(R"(^(\d+\.\d+) (.*)$)");
  const std::regex value(R"(\$[0-9]{1,3}(,[0-9]{3})*|[0-9]+ days|[0-9]+ hours)");
  const std::regex reference(R"(except as provided in (\d+\.\d+))");
  for (const int depth : {0, 300, 700, 1000}) {
    for (const EvalItem& item : make_long("long_policy", 4, {8000, 10000}, depth)) {
      const std::string& prompt = prompt_of(item);
      std::map<std::string, std::pair<size_t, std::string>> clauses;
      for (const auto& [pos, line] : offset_lines(prompt)) {
        std::smatch m;
        if (std::regex_match(line, m, clause_line)) {
          EXPECT_TRUE(clauses.insert({m[1], {pos, m[2]}}).second) << m[1];
        }
      }
      const std::string base_id = item.meta["base_clause"];
      ASSERT_EQ(clauses.count(base_id), 1u);
      std::smatch ref;
      const std::string base_text = clauses[base_id].second;
      ASSERT_TRUE(std::regex_search(base_text, ref, reference)) << base_text;
      const std::string exc_id = ref[1];
      ASSERT_EQ(clauses.count(exc_id), 1u);
      EXPECT_EQ(exc_id, item.meta["exception_clause"]);
      EXPECT_NE(clauses[exc_id].second.find(base_id), std::string::npos) << "the exception names the rule";
      EXPECT_GT(clauses[exc_id].first, clauses[base_id].first) << "the exception comes after the rule";
      const std::string source = clauses[exc_id].second;
      std::vector<std::string> values;
      for (auto it = std::sregex_iterator(source.begin(), source.end(), value); it != std::sregex_iterator(); ++it)
        values.push_back(it->str());
      ASSERT_EQ(values.size(), 1u) << source;
      EXPECT_EQ(item.answer, values[0]) << item.id;
      expect_depth(item, clauses[exc_id].first, depth);
      expect_depth(item, clauses[base_id].first, std::max(0, depth - 500));
    }
  }
}

TEST(GenerateLong, KoreanAnswersAreTheFactsOfTheNamedPerson) {
  const std::map<std::string, std::regex> field_pattern = {
      {"phone", std::regex("010-[0-9]{4}-[0-9]{4}")},
      {"date", std::regex("2024년 [0-9]{1,2}월 [0-9]{1,2}일")},
      {"amount", std::regex("[0-9]{1,3}(,[0-9]{3})*원")},
      {"address", std::regex("(서울특별시|부산광역시|대구광역시|인천광역시|광주광역시|대전광역시|경기도|제주특별자치도) [^ ]+ ([^ ]+구 )?[^ ]+로 [0-9]+")},
  };
  std::map<std::string, int> fields;
  for (const int depth : {0, 500, 900}) {
    for (const EvalItem& item : make_long("long_korean", 8, {6000, 8000}, depth, 42 + depth)) {
      const std::string& prompt = prompt_of(item);
      const std::string person = item.meta["person"], field = item.meta["field"];
      ++fields[field];
      EXPECT_NE(prompt.find("질문: " + person + " 씨의"), std::string::npos);
      std::string paragraph;
      size_t at = 0;
      int count = 0;
      for (const auto& [pos, line] : offset_lines(prompt))
        if (line.rfind("질문:", 0) != 0 && line.find(person + " 씨") != std::string::npos) {
          paragraph = line;
          at = pos;
          ++count;
        }
      ASSERT_EQ(count, 1) << person;
      std::smatch m;
      ASSERT_TRUE(std::regex_search(paragraph, m, field_pattern.at(field))) << paragraph;
      EXPECT_EQ(item.answer, m.str()) << paragraph;
      expect_depth(item, at, depth);
    }
  }
  EXPECT_EQ(fields.size(), 4u);
}

TEST(GenerateLong, AgenticSessionsPassThirtyTwoThousandAndRecallAnEarlierFile) {
  std::map<std::string, int> kinds;
  for (const int depth : {0, 500, 1000}) {
    for (const EvalItem& item : make_long("long_agentic", 2, {34000, 40000}, depth)) {
      EXPECT_GT(estimate_tokens(item), 32768u) << item.id;
      ASSERT_EQ(item.score, ScoreKind::turns);
      ASSERT_EQ((item.messages.size() - 3) % 4, 0u);
      const size_t turns = (item.messages.size() - 3) / 4;
      EXPECT_EQ(scored_targets(item).size(), turns + 1);
      for (size_t i = 0; i < turns; ++i) expect_turn_fact(item, i, kinds);
      // The last turn asks for a key of a file read earlier, with no tool call of its own.
      const std::string& ask = item.messages[item.messages.size() - 2].content;
      const std::string path = between(ask, "in ", ", which");
      const std::string key = between(ask, "what is ", " set to?");
      size_t opened = 0, evidence_message = 0;
      for (size_t i = 0; i < turns; ++i) {
        const auto args = nlohmann::json::parse(item.messages[2 + 4 * i].tool_calls[0]["function"]["arguments"].get<std::string>());
        if (args.value("path", "") == path) ++opened, evidence_message = 3 + 4 * i;
      }
      ASSERT_EQ(opened, 1u) << path;
      const std::string& result = item.messages[evidence_message].content;
      const size_t line_at = result.find("\n  " + key + ": ");
      ASSERT_NE(line_at, std::string::npos) << key;
      const std::string value = result.substr(line_at + key.size() + 5, result.find('\n', line_at + 1) - line_at - key.size() - 5);
      EXPECT_EQ(item.answer, key + " is set to " + value + " in " + path + ".");
      EXPECT_NE(item.messages[evidence_message + 1].content.find(" " + key + " "), 0u) << "the recall asks another key";
      // Where the key's line starts, as a share of the session's estimated tokens.
      size_t before = 0;
      for (size_t i = 0; i < evidence_message; ++i)
        before += 4 + estimate_tokens(item.messages[i].content) + estimate_tokens(tool_calls_text(item.messages[i]));
      before += 4 + estimate_tokens(std::string_view(result).substr(0, line_at + 1));
      EXPECT_NEAR(static_cast<double>(before) / static_cast<double>(estimate_tokens(item)), depth / 1000.0, 0.05) << item.id;
    }
  }
  EXPECT_EQ(kinds.size(), 4u);
}

// Pinned output of the long generators, as for the short ones above.
TEST(GenerateLong, PinnedHashesOfFixedSeedItems) {
  std::map<std::string, std::string> hashes;
  for (const std::string& d : long_generator_domains())
    hashes[d] = hex_u64(xxhash64(canonical_line(generate_item(d, 1, 0, default_token_range(d)))));
  EXPECT_EQ(hashes["retrieval"], "07c620f2adfb8130");
  EXPECT_EQ(hashes["long_tables"], "44cbc18c17c8c113");
  EXPECT_EQ(hashes["long_diffs"], "35958ea2c9034fed");
  EXPECT_EQ(hashes["long_policy"], "29ec7095ab87376a");
  EXPECT_EQ(hashes["long_korean"], "d8c79a464b7985b5");
  EXPECT_EQ(hashes["long_agentic"], "7ec79a78aa2684af");
}

}  // namespace
}  // namespace kvgate::evalsets
