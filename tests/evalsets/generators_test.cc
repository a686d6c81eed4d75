// Every generator's answers are recomputed here from the item's own text, with parsers written
// independently of the generators (re-sum the table, re-apply the diff, follow the policy's
// cross-reference, re-read the tool results).
#include <gtest/gtest.h>

#include <map>
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
    for (size_t i = 0; i < turns; ++i) {
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
  }
  EXPECT_EQ(kinds.size(), 4u);
}

}  // namespace
}  // namespace kvgate::evalsets
