#pragma once
// The seeded generator of the mutated-input corpus (issue 34): from one valid seed of every input
// kind kvgate reads — items JSONL, suites, gate policies, endpoints files, chat messages, KV
// overhead factors, traces (Mooncake, Bailian, kvgate), GGUF headers, results databases — it
// derives `per_kind` mutants each, the same bytes for the same seed on every machine (core/rng.h,
// no standard-library distributions). tests/cli/input_fuzz_test.cc runs the real CLI on every
// mutant; tests/cli/make_input_corpus writes them to a directory to reproduce one by hand.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"

namespace kvgate::testing {

struct CorpusFile {
  std::string kind;  // "items", "suite", "policy", "endpoints", "messages", "overhead", "trace", "gguf", "db", "resume-db"
  std::string name;  // a file name unique in the corpus, e.g. "policy-017.json"
  std::string bytes;
};

// The valid inputs every mutant starts from. The binary seeds (a GGUF model, a results database
// holding a complete run, and one holding a run stopped by --limit that `eval --resume` can
// continue) are the caller's: the test makes them from committed files.
struct CorpusSeeds {
  std::string gguf;
  std::string db;
  std::string resumable_db;
};

namespace corpus_detail {

inline uint64_t below(Rng& rng, uint64_t n) { return n == 0 ? 0 : rng.next_u64() % n; }

template <typename T>
const T& pick(Rng& rng, const std::vector<T>& v) {
  return v[below(rng, v.size())];
}

// Values that have broken parsers before: overflow, negative and huge counts, wrong types,
// empty and NUL-bearing strings.
inline const std::vector<std::string>& json_values() {
  static const std::vector<std::string> v = {
      "1e400", "-1e400", "-1", "0", "99999999999999999999999", "4294967295", "-9223372036854775809", "1.5", "0.0",
      "null", "true", "\"\"", "\"x\"", "[]", "{}", "[[]]", "\"\\u0000\"", "\"\\ud800\"", "1e-400", "-0"};
  return v;
}

inline const std::vector<std::string>& json_fragments() {
  static const std::vector<std::string> v = {"{", "}", "[", "]", ",", ":", "\"", "\\", "\xff", "\xc3", "\n", "\t",
                                             "1e400", "NaN", "Infinity", "/*", "\xef\xbb\xbf"};
  return v;
}

// Positions of JSON scalars (numbers, literals, strings) after a ':' or '[' or ',' — the values a
// mutation swaps.
inline std::vector<std::pair<size_t, size_t>> value_spans(const std::string& s) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != ':' && s[i] != '[' && s[i] != ',') continue;
    size_t b = i + 1;
    while (b < s.size() && s[b] == ' ') ++b;
    if (b >= s.size()) break;
    size_t e = b;
    if (s[b] == '"') {
      e = b + 1;
      while (e < s.size() && s[e] != '"') e += s[e] == '\\' ? 2 : 1;
      e = std::min(e + 1, s.size());
    } else if (std::strchr("-0123456789tfn", s[b])) {
      while (e < s.size() && !std::strchr(",]}\n ", s[e])) ++e;
    } else {
      continue;
    }
    if (e > b) out.push_back({b, e});
  }
  return out;
}

inline void mutate_json_text(Rng& rng, std::string& s) {
  switch (below(rng, 9)) {
    case 0:
    case 1:
    case 2: {  // a value replaced by a troublesome one
      const auto spans = value_spans(s);
      if (spans.empty()) break;
      const auto [b, e] = pick(rng, spans);
      s.replace(b, e - b, pick(rng, json_values()));
      break;
    }
    case 3: {  // a key repeated in its object
      std::vector<size_t> keys;
      for (size_t i = 0; i + 1 < s.size(); ++i)
        if ((s[i] == '{' || s[i] == ',') && s[i + 1] == '"') keys.push_back(i + 1);
      if (keys.empty()) break;
      const size_t k = pick(rng, keys);
      const size_t colon = s.find("\":", k + 1);
      if (colon == std::string::npos) break;
      s.insert(k, s.substr(k, colon + 2 - k) + pick(rng, json_values()) + ",");
      break;
    }
    case 4:  // a fragment inserted
      s.insert(below(rng, s.size() + 1), pick(rng, json_fragments()));
      break;
    case 5:  // a byte range deleted
      if (!s.empty()) {
        const size_t at = below(rng, s.size());
        s.erase(at, 1 + below(rng, 16));
      }
      break;
    case 6:  // a byte flipped
      if (!s.empty()) s[below(rng, s.size())] ^= static_cast<char>(1u << below(rng, 8));
      break;
    case 7:  // truncated
      s.resize(below(rng, s.size() + 1));
      break;
    case 8: {  // a string value made long
      const auto spans = value_spans(s);
      if (spans.empty()) break;
      const auto [b, e] = pick(rng, spans);
      // Built by append: GCC 12 warns falsely (-Wrestrict) on `"\"" + std::string(n, 'a')`.
      std::string long_value(1, '"');
      long_value.append(4096 + below(rng, 8192), 'a').push_back('"');
      s.replace(b, e - b, long_value);
      break;
    }
  }
}

inline void put_u32(std::string& s, size_t at, uint32_t v) {
  if (at + 4 <= s.size()) std::memcpy(s.data() + at, &v, 4);
}

// GGUF: the header and metadata (not the tensor data, which only the forward reads): counts,
// lengths and types overwritten, the values of the hyper-parameter keys replaced, truncation.
inline void mutate_gguf(Rng& rng, std::string& s, size_t metadata_end) {
  static const std::vector<uint32_t> words = {0, 1, 2, 0xFFFFFFFFu, 0x7FFFFFFFu, 0x80000000u, 0x7FC00000u /* NaN */,
                                              0xFF800000u /* -inf */, 0x00000001u, 13, 4096, 0x10000};
  const size_t end = std::min(metadata_end, s.size());
  switch (below(rng, 5)) {
    case 0: {  // a hyper-parameter's value
      std::vector<size_t> values;
      for (size_t at = s.find("qwen2."); at != std::string::npos && at < end; at = s.find("qwen2.", at + 1)) {
        size_t k = at;
        while (k < end && s[k] >= 0x20 && s[k] < 0x7f) ++k;
        values.push_back(k + 4);  // the key, then its u32 type, then its value
      }
      if (!values.empty()) put_u32(s, pick(rng, values), pick(rng, words));
      break;
    }
    case 1:  // an aligned word in the header and metadata
      put_u32(s, below(rng, end / 4) * 4, pick(rng, words));
      break;
    case 2:  // an unaligned word (lengths and types sit at any offset)
      put_u32(s, below(rng, end), pick(rng, words));
      break;
    case 3:  // a few bytes flipped
      for (uint64_t i = 0, n = 1 + below(rng, 4); i < n && end > 0; ++i)
        s[below(rng, end)] ^= static_cast<char>(1u << below(rng, 8));
      break;
    case 4:  // truncated
      s.resize(below(rng, s.size() + 1));
      break;
  }
}

// SQLite: header fields (page size, page count, versions, user_version), whole pages damaged or
// zeroed, truncation to a page boundary.
inline void mutate_db(Rng& rng, std::string& s) {
  const size_t page = 4096, pages = s.size() / page;
  switch (below(rng, 6)) {
    case 0: {  // user_version (big-endian at 60)
      static const std::vector<uint32_t> versions = {0xFFFFFFFFu, 0, 99, 0x80000000u, 1, 3};
      const uint32_t v = pick(rng, versions);
      const unsigned char be[4] = {static_cast<unsigned char>(v >> 24), static_cast<unsigned char>(v >> 16),
                                   static_cast<unsigned char>(v >> 8), static_cast<unsigned char>(v)};
      std::memcpy(s.data() + 60, be, 4);
      break;
    }
    case 1:  // another header byte
      s[16 + below(rng, 84)] = static_cast<char>(below(rng, 256));
      break;
    case 2:  // bytes of one page (not its header, so b-tree checks must find it)
      if (pages > 1) {
        const size_t p = 1 + below(rng, pages - 1);
        for (uint64_t i = 0, n = 1 + below(rng, 64); i < n; ++i)
          s[p * page + 8 + below(rng, page - 8)] = static_cast<char>(below(rng, 256));
      }
      break;
    case 3:  // a page's b-tree header
      if (pages > 1) s[(1 + below(rng, pages - 1)) * page + below(rng, 12)] = static_cast<char>(below(rng, 256));
      break;
    case 4:  // a page zeroed
      if (pages > 1) std::fill_n(s.data() + (1 + below(rng, pages - 1)) * page, page, '\0');
      break;
    case 5:  // truncated to whole pages
      s.resize(below(rng, pages + 1) * page);
      break;
  }
}

}  // namespace corpus_detail

// Valid seeds of the text kinds, each small enough that a mutant fails fast or runs in well under
// a second on the tiny models.
inline std::vector<std::pair<std::string, std::string>> text_seeds() {
  return {
      {"items",
       "{\"id\":\"t1\",\"domain\":\"tables\",\"text\":\"Hello world, this is a test of the tiny model.\","
       "\"score\":{\"kind\":\"spans\",\"spans\":[[6,11]]}}\n"
       "{\"id\":\"m1\",\"domain\":\"policy\",\"messages\":[{\"role\":\"user\",\"content\":\"Say yes.\"},"
       "{\"role\":\"assistant\",\"content\":\"yes\"}],\"score\":{\"kind\":\"answer\"},\"answer\":\"yes\"}\n"},
      {"suite",
       "{\"name\":\"fz\",\"description\":\"d\",\"evalsets\":[{\"domain\":\"tables\",\"seed\":1,\"n\":1,\"tokens_min\":64,"
       "\"tokens_max\":120},{\"domain\":\"korean\",\"seed\":2,\"n\":1}],\"kv\":[\"fp8\",\"q8_0\"],\"ref\":\"f16\"}"},
      {"policy",
       "{\"kvgate_gate_policy\":1,\"description\":\"d\",\"bootstrap\":{\"resamples\":200,\"confidence\":0.9,\"seed\":7},"
       "\"rules\":[{\"domain\":\"*\",\"kv\":\"*\",\"absolute\":{\"kld_mean_max\":1.0,\"same_top1_min\":0.5},"
       "\"regression\":{\"kld_mean\":0.002}},{\"domain\":\"tables\",\"kv\":\"fp8\",\"absolute\":{\"kld_p99_max\":10}}],"
       "\"latency\":{\"tpot_p50_ratio_max\":3}}"},
      {"endpoints",
       "{\"endpoints\":[{\"name\":\"a\",\"url\":\"http://127.0.0.1:9/v1\",\"kv\":\"fp8\",\"timeout_s\":5,"
       "\"headers\":{\"X-A\":\"b\"}},{\"name\":\"b\",\"url\":\"http://127.0.0.1:9\",\"engine\":\"vllm\"}]}"},
      {"messages", "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi there\"}]"},
      {"overhead", "{\"fp8\": 1.1, \"q8_0\": 1.25}"},
      {"trace",
       "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 20, \"hash_ids\": [1, 2]}\n"
       "{\"timestamp\": 500, \"input_length\": 1100, \"output_length\": 30, \"hash_ids\": [1, 2, 3]}\n"},
      {"trace",
       "{\"chat_id\": 1, \"parent_chat_id\": -1, \"timestamp\": 0.5, \"input_length\": 40, \"output_length\": 5, "
       "\"turn\": 1, \"hash_ids\": [7, 8, 9]}\n"
       "{\"chat_id\": 2, \"parent_chat_id\": 1, \"timestamp\": 2.0, \"input_length\": 60, \"output_length\": 5, "
       "\"turn\": 2, \"hash_ids\": [7, 8, 9, 10]}\n"},
      {"trace",
       "{\"timestamp_ms\": 0, \"input_tokens\": 500, \"output_tokens\": 50, \"session\": \"s1\"}\n"
       "{\"timestamp_ms\": 100, \"input_tokens\": 900, \"output_tokens\": 40, \"session\": \"s1\"}\n"},
  };
}

inline const char* corpus_extension(const std::string& kind) {
  if (kind == "items" || kind == "trace") return ".jsonl";
  if (kind == "gguf") return ".gguf";
  if (kind == "db" || kind == "resume-db") return ".db";
  return ".json";
}

// Targeted cases (issue 40): one or more per hole the attack on 403acac found, each the command
// that reached it and what kvgate must answer. In `args`: {file} is this case's bytes written to
// `name`; {db} a copy of the seed database ({resumable} of the resumable one; an empty file with
// `fresh_db`) with `sql` applied first; {items} the seed items that need no chat template (the
// tiny models have none); {model} the tiny qwen2 model;
// {trace} a small shape trace; {scratch} a database path that must still not exist afterwards.
struct CorpusCase {
  int finding = 0;
  std::string name;
  std::string bytes;
  std::string sql;
  bool fresh_db = false;
  std::string args;
  int exit_code = 2;
  std::string says;          // in stderr
  std::string never_prints;  // never in stdout
};

inline std::vector<CorpusCase> finding_cases(const CorpusSeeds& seeds) {
  std::vector<CorpusCase> out;
  auto add = [&](CorpusCase c) { out.push_back(std::move(c)); };
  // 1: a policy rule that names no config of the run (the seed run has f16 and fp8).
  add({1, "f1-policy.json",
       "{\"kvgate_gate_policy\":1,\"rules\":[{\"kv\":\"*\",\"absolute\":{\"kld_mean_max\":1}},"
       "{\"kv\":\"q4_0/q4_0\",\"absolute\":{\"kld_mean_max\":0.001}}]}",
       "", false, "gate --baseline latest --allow-missing-baseline --no-store --policy {file} --db {db}", 2,
       "rules[1] (kv 'q4_0/q4_0') names no config of run 1", ""});
  // 2: stored values changed outside kvgate.
  const std::string one_metric = "UPDATE item_metrics SET kld_mean = kld_mean + 1e-12 WHERE rowid = "
                                 "(SELECT MAX(rowid) FROM item_metrics)";
  add({2, "f2-value.db", "", one_metric, false, "runs show latest --db {db}", 2, "table item_metrics, row item_id", ""});
  add({2, "f2-gate.db", "", one_metric, false,
       "gate --baseline latest --allow-missing-baseline --no-store --policy " KVGATE_SOURCE_DIR "/ci/gates/default.json --db {db}",
       2, "do not match its row digest", ""});
  add({2, "f2-deleted.db", "", "DELETE FROM turn_metrics WHERE rowid = (SELECT MIN(rowid) FROM turn_metrics)", false,
       "runs show latest --db {db}", 2, "its items hold", ""});
  // 3: GGUF metadata its tensors contradict (2 layers relabelled as 7).
  if (!seeds.gguf.empty()) {
    std::string gguf = seeds.gguf;
    const std::string key = "qwen2.block_count";
    const size_t at = gguf.find(key);
    if (at != std::string::npos) corpus_detail::put_u32(gguf, at + key.size() + 4, 7);
    add({3, "f3-layers.gguf", gguf, "", false, "model info --model {file}", 2, "missing tensor 'blk.2.", ""});
    add({3, "f3-capacity.gguf", gguf, "", false, "capacity --trace {trace} --kv f16 --model-arch {file}", 2,
         "missing tensor 'blk.2.", ""});
  }
  // 4: JSON nested 60,000 levels.
  std::string deep;
  for (int i = 0; i < 60000; ++i) deep += "{\"a\":";
  deep += "1" + std::string(60000, '}');
  add({4, "f4-deep.jsonl",
       "{\"id\":\"d\",\"domain\":\"tables\",\"text\":\"abc def\",\"score\":{\"kind\":\"spans\",\"spans\":[[0,3]]},"
       "\"meta\":" + deep + "}\n",
       "", false, "evalset validate {file}", 2, "nested deeper than 256 levels", ""});
  // 5: a device given as an input file.
  add({5, "f5-items", "", "", false, "evalset validate /dev/zero", 2, "/dev/zero: not a regular file", ""});
  add({5, "f5-endpoints", "", "", false, "eval --evalset {items} --endpoints /dev/zero --db {scratch}", 2,
       "/dev/zero: not a regular file", ""});
  add({5, "f5-messages", "", "", false, "generate -n 1 --messages /dev/zero --model {model}", 2,
       "/dev/zero: not a regular file", ""});
  add({5, "f5-suite.json", "{\"name\":\"z\",\"evalsets\":[{\"path\":\"/dev/zero\"}],\"kv\":[\"fp8\"]}", "", false,
       "evalset validate {file}", 2, "/dev/zero: not a regular file", ""});
  // 6: rejected before a run (or a database) exists.
  add({6, "f6-resume", "", "", false, "eval --resume 1 --db {scratch}", 2, "no such results database", ""});
  add({6, "f6-head-dim", "", "", false, "eval --evalset {items} --model {model} --kv q4_0 --threads 1 --db {scratch}", 2,
       "needs head_dim to be a multiple of 32", ""});
  add({6, "f6-max-new", "", "", false,
       "eval --evalset {items} --model {model} --kv fp8 --max-new-tokens 0 --db {scratch}", 2, "--max-new-tokens", ""});
  // 7: --resume checks what the read commands check before it writes.
  add({7, "f7-resume.db", "", "UPDATE turn_metrics SET ttft_ms = 1", false,
       "eval --resume 1 --threads 1 --max-new-tokens 4 --db {resumable}", 2, "table turn_metrics", ""});
  // 8: values that cannot mean anything.
  add({8, "f8-feb30.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-30 18:15:50.1,396,109\n", "", false,
       "profile --trace {file}", 2, "has no day 30", ""});
  add({8, "f8-header.csv", "Timestamp,Request tokens,Response tokens,Request tokens\n1,2,3,4\n", "", false,
       "profile --trace {file}", 2, "names column \"Request tokens\" twice", ""});
  add({8, "f8-instant.jsonl",
       "{\"timestamp_ms\": 7, \"input_tokens\": 50, \"output_tokens\": 4}\n"
       "{\"timestamp_ms\": 7, \"input_tokens\": 60, \"output_tokens\": 4}\n",
       "", false, "profile --trace {file}", 0, "", "0.00 requests/s"});
  add({8, "f8-seed", "", "", false, "evalset generate --domain tables --n 1 --seed -1", 2, "--seed", ""});
  add({8, "f8-seed-64", "", "", false, "evalset generate --domain tables --n 1 --seed 18446744073709551616", 2, "--seed", ""});
  add({8, "f8-bandwidth", "", "", false, "capacity --trace {trace} --kv f16 --gpu-bw-gbs 0", 2, "positive number", ""});
  add({8, "f8-tflops", "", "", false, "capacity --trace {trace} --kv f16 --gpu-tflops nan", 2, "positive number", ""});
  // 9: exit 2 where 2 is promised.
  add({9, "f9-dropped.db", "", "DROP TABLE token_class_metrics", false, "runs show latest --db {db}", 2, "is missing", ""});
  add({9, "f9-renamed.db", "", "ALTER TABLE items RENAME COLUMN domain TO area", false, "runs list --db {db}", 2,
       "has no column domain", ""});
  add({9, "f9-foreign.db", "", "CREATE TABLE notes (body TEXT); PRAGMA user_version = 8", true, "runs list --db {db}", 2,
       "", ""});
  add({9, "f9-port.json", "{\"endpoints\":[{\"name\":\"a\",\"url\":\"http://127.0.0.1:99999\",\"kv\":\"fp8\"}]}", "",
       false, "eval --evalset {items} --endpoints {file} --db {scratch}", 2, "not a number from 1 to 65535", ""});
  add({9, "f9-dev-null", "", "", false, "runs list --db /dev/null", 2, "/dev/null: not a regular file", ""});
  return out;
}

// `per_kind` mutants of every seed, 1-3 mutations each. `gguf_metadata_end` bounds the GGUF
// mutations to the header and metadata.
inline std::vector<CorpusFile> make_input_corpus(uint64_t seed, const CorpusSeeds& seeds, size_t gguf_metadata_end,
                                                 size_t per_kind) {
  using namespace corpus_detail;
  std::vector<CorpusFile> out;
  Rng rng(seed);
  auto add = [&](const std::string& kind, const std::string& bytes, size_t index) {
    char number[16];
    std::snprintf(number, sizeof number, "-%03zu", index);
    out.push_back({kind, kind + number + corpus_extension(kind), bytes});
  };
  size_t trace_index = 0;
  for (const auto& [kind, text] : text_seeds()) {
    for (size_t i = 0; i < per_kind; ++i) {
      std::string s = text;
      for (uint64_t m = 0, n = 1 + below(rng, 3); m < n; ++m) mutate_json_text(rng, s);
      add(kind, s, kind == "trace" ? trace_index++ : i);
    }
  }
  if (!seeds.gguf.empty())
    for (size_t i = 0; i < 2 * per_kind; ++i) {
      std::string s = seeds.gguf;
      for (uint64_t m = 0, n = 1 + below(rng, 2); m < n; ++m) mutate_gguf(rng, s, gguf_metadata_end);
      add("gguf", s, i);
    }
  if (!seeds.db.empty())
    for (size_t i = 0; i < per_kind; ++i) {
      std::string s = seeds.db;
      for (uint64_t m = 0, n = 1 + below(rng, 2); m < n; ++m) mutate_db(rng, s);
      add("db", s, i);
    }
  // Damaged copies of a run `eval --resume` could continue (issue 40, finding 7): the test checks
  // that resume refuses every one a read command refuses.
  if (!seeds.resumable_db.empty())
    for (size_t i = 0; i < per_kind / 2; ++i) {
      std::string s = seeds.resumable_db;
      for (uint64_t m = 0, n = 1 + below(rng, 2); m < n; ++m) mutate_db(rng, s);
      add("resume-db", s, i);
    }
  return out;
}

}  // namespace kvgate::testing
