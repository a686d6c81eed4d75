// Bad input found by mutating every input kind (issue 34): each is exit 2 with a message naming
// the file (and the line, byte or key), never "internal error" exit 3, a run on a nonsensical
// value, or a silent pass. Runs on the committed tiny models, so it needs no fetched model.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "runtime/gguf.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

namespace fs = std::filesystem;

std::string tiny(const std::string& name) { return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/tiny_models/" + name; }
std::string policy_file() { return std::string(KVGATE_SOURCE_DIR) + "/ci/gates/default.json"; }

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = scratch_path("inputs", name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

bool mentions(const CliResult& r, const std::string& what) { return r.err.find(what) != std::string::npos; }

// Two text items the tiny models score in well under a second.
const char* kItems =
    "{\"id\":\"t1\",\"domain\":\"tables\",\"text\":\"Hello world, this is a test of the tiny model.\","
    "\"score\":{\"kind\":\"spans\",\"spans\":[[6,11]]}}\n"
    "{\"id\":\"t2\",\"domain\":\"policy\",\"text\":\"Another line of text for scoring here.\","
    "\"score\":{\"kind\":\"spans\",\"spans\":[[8,12]]}}\n";

// The tiny qwen2 model (head_dim 8: fp8 fits, the 32-element block formats do not).
std::string eval_args(const std::string& items, const std::string& db) {
  return "eval --evalset " + items + " --model " + tiny("tiny-qwen2.gguf") + " --kv fp8 --threads 1 --db " + db;
}

// A results database with one complete run, made once per test binary.
const std::string& fixture_db() {
  static const std::string db = [] {
    const std::string items = temp_file("fixture-items.jsonl", kItems);
    const std::string path = scratch_path("inputs", "fixture.db");
    const CliResult r = run_kvgate(eval_args(items, path) + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return path;
  }();
  return db;
}

std::string copy_of(const std::string& from, const std::string& name) {
  const std::string to = scratch_path("inputs", name);
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  return to;
}

// ---- item 4: bad input is exit 2 naming its file ----

TEST(InputsCli, NumberOverflowInItemsNamesFileAndLine) {
  const std::string items = temp_file("overflow.jsonl", std::string(kItems) +
                                                          "{\"id\":\"x\",\"domain\":\"tables\",\"text\":\"abc def\","
                                                          "\"score\":{\"kind\":\"spans\",\"spans\":[[1e400,5]]}}\n");
  const CliResult r = run_kvgate("evalset validate " + items);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, items + ":3:")) << r.err;
  EXPECT_TRUE(mentions(r, "1e400")) << r.err;
}

TEST(InputsCli, NumberOverflowInSuiteNamesFile) {
  const std::string suite = temp_file("overflow-suite.json",
                                      "{\"name\":\"s\",\"evalsets\":[{\"domain\":\"tables\",\"seed\":1e400,\"n\":1}],"
                                      "\"kv\":[\"fp8\"]}");
  const CliResult r = run_kvgate("evalset validate " + suite);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, suite + ": at byte ")) << r.err;
}

TEST(InputsCli, NumberOverflowInPolicyNamesFile) {
  const std::string policy = temp_file("overflow-policy.json",
                                       "{\"kvgate_gate_policy\":1,\"rules\":[{\"domain\":\"*\",\"kv\":\"*\","
                                       "\"absolute\":{\"kld_mean_max\":1e400}}]}");
  const CliResult r = run_kvgate("gate --baseline latest --policy " + policy + " --db " + fixture_db());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, policy + ": at byte ")) << r.err;
}

TEST(InputsCli, NumberOverflowInEndpointsFileNamesFile) {
  const std::string items = temp_file("ep-items.jsonl", kItems);
  const std::string endpoints =
      temp_file("overflow-endpoints.json", "[{\"name\":\"a\",\"url\":\"http://127.0.0.1:1\",\"timeout_s\":1e400}]");
  const std::string db = scratch_path("inputs", "ep.db");
  const CliResult r = run_kvgate("eval --evalset " + items + " --endpoints " + endpoints + " --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, endpoints + ": at byte ")) << r.err;
}

TEST(InputsCli, NumberOverflowInMessagesNamesFile) {
  const std::string messages = temp_file("overflow-messages.json", "[{\"role\":\"user\",\"content\":\"hi\",\"x\":1e400}]");
  const CliResult r = run_kvgate("generate --messages " + messages + " --model " + tiny("tiny-qwen2.gguf") + " -n 1");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, messages + ": at byte ")) << r.err;
}

TEST(InputsCli, DuplicateJsonKeyIsRejectedWithItsPosition) {
  const std::string items = temp_file("dupkey.jsonl",
                                      "{\"id\":\"t1\",\"id\":\"t2\",\"domain\":\"tables\",\"text\":\"Hello world.\","
                                      "\"score\":{\"kind\":\"spans\",\"spans\":[[6,11]]}}\n");
  const CliResult r = run_kvgate("evalset validate " + items);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, items + ":1: duplicate key \"id\"")) << r.err;
  EXPECT_TRUE(mentions(r, "at byte 11 of the line")) << r.err;

  const std::string policy = temp_file("dupkey-policy.json", "{\"kvgate_gate_policy\":1,\"rules\":[],\"rules\":[]}");
  const CliResult p = run_kvgate("gate --baseline latest --policy " + policy + " --db " + fixture_db());
  EXPECT_EQ(p.exit_code, 2) << p.err;
  EXPECT_TRUE(mentions(p, policy + ": at byte 35: duplicate key \"rules\"")) << p.err;
}

// "q8_0" and "q8_0/q8_0" are one config: the suite names it twice. eval and evalset validate
// agree, and both name the suite file.
TEST(InputsCli, SuiteKvSpecsAreCheckedInCanonicalFormNamingTheSuite) {
  const std::string twice = temp_file("twice-suite.json",
                                      "{\"name\":\"s\",\"evalsets\":[{\"domain\":\"tables\",\"seed\":1,\"n\":1}],"
                                      "\"kv\":[\"q8_0\",\"q8_0/q8_0\"]}");
  const CliResult validate = run_kvgate("evalset validate " + twice);
  EXPECT_EQ(validate.exit_code, 2) << validate.out << validate.err;
  EXPECT_TRUE(mentions(validate, twice + ": kv[1]")) << validate.err;
  const std::string db = scratch_path("inputs", "suite.db");
  const CliResult eval = run_kvgate("eval --suite " + twice + " --model " + tiny("tiny-qwen2.gguf") + " --db " + db);
  EXPECT_EQ(eval.exit_code, 2) << eval.err;
  EXPECT_TRUE(mentions(eval, twice + ": kv[1]")) << eval.err;

  const std::string unknown = temp_file("unknown-suite.json",
                                        "{\"name\":\"s\",\"evalsets\":[{\"domain\":\"tables\",\"seed\":1,\"n\":1}],"
                                        "\"kv\":[\"fp8\",\"nosuchformat\"]}");
  const CliResult u = run_kvgate("eval --suite " + unknown + " --model " + tiny("tiny-qwen2.gguf") + " --db " + db);
  EXPECT_EQ(u.exit_code, 2) << u.err;
  EXPECT_TRUE(mentions(u, unknown + ": kv[1]")) << u.err;
  EXPECT_FALSE(fs::exists(db)) << "a rejected suite created " << db;
}

TEST(InputsCli, EndpointsFileKvErrorNamesTheFile) {
  const std::string items = temp_file("epkv-items.jsonl", kItems);
  const std::string endpoints =
      temp_file("badkv-endpoints.json", "[{\"name\":\"a\",\"url\":\"http://127.0.0.1:1\",\"kv\":\"nosuchformat\"}]");
  const CliResult r = run_kvgate("eval --evalset " + items + " --endpoints " + endpoints + " --db " +
                                 scratch_path("inputs", "epkv.db"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, endpoints + ": endpoint 'a': kv 'nosuchformat'")) << r.err;
}

TEST(InputsCli, KvOverheadFileSpecErrorNamesTheFile) {
  const std::string trace = temp_file("ovh-trace.jsonl", "{\"timestamp_ms\": 0, \"input_tokens\": 500, \"output_tokens\": 50}\n");
  const std::string factors = temp_file("ovh.json", "{\"nosuchformat\": 1.5}");
  const CliResult r = run_kvgate("capacity --trace " + trace + " --kv fp8 --kv-overhead-file " + factors);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, factors + ": ")) << r.err;
}

TEST(InputsCli, PerplexityNamesTheFileNotText) {
  const std::string text = temp_file("bad-utf8.txt", "Some text \xff\xfe then more text for the model to read.");
  const CliResult r = run_kvgate("perplexity --file " + text + " --model " + tiny("tiny-qwen2.gguf") + " --kv fp8");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, text + ": at byte 10")) << r.err;
}

TEST(InputsCli, UnwritableOutputsAreExit2Everywhere) {
  const std::string nowhere = scratch_path("inputs", "no-such-dir") + "/out";
  const CliResult gen = run_kvgate("workload generate --out " + nowhere + ".jsonl --sessions 1");
  EXPECT_EQ(gen.exit_code, 2) << gen.err;
  EXPECT_TRUE(mentions(gen, nowhere + ".jsonl: cannot write")) << gen.err;
  const CliResult report = run_kvgate("report --run latest --db " + fixture_db() + " --html " + nowhere + ".html");
  EXPECT_EQ(report.exit_code, 2) << report.err;
  EXPECT_TRUE(mentions(report, nowhere + ".html: cannot write")) << report.err;
  const CliResult gate = run_kvgate("gate --baseline latest --allow-missing-baseline --policy " + policy_file() +
                                    " --db " + fixture_db() + " --junit " + nowhere + ".xml");
  EXPECT_EQ(gate.exit_code, 2) << gate.err;
  EXPECT_TRUE(mentions(gate, nowhere + ".xml: cannot write")) << gate.err;
  const CliResult items = run_kvgate("evalset generate --domain tables --n 1 --out " + nowhere + ".jsonl");
  EXPECT_EQ(items.exit_code, 2) << items.err;
}

TEST(InputsCli, RejectedInputCreatesNoDatabase) {
  const std::string bad = temp_file("bad-items.jsonl", "{\"id\": \"x\"}\n");
  const std::string db = scratch_path("inputs", "never.db");
  const CliResult r = run_kvgate(eval_args(bad, db));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(fs::exists(db)) << r.err;
  const std::string items = temp_file("ok-items.jsonl", kItems);
  const CliResult model = run_kvgate("eval --evalset " + items + " --model " + temp_file("not-a-model.gguf", "GGUF") +
                                     " --kv fp8 --db " + db);
  EXPECT_EQ(model.exit_code, 2) << model.err;
  EXPECT_FALSE(fs::exists(db)) << model.err;
}

// ---- item 5: values that cannot mean anything ----

TEST(InputsCli, NonsenseFlagValuesAreUsageErrorsNamingTheFlag) {
  const std::string items = temp_file("flags-items.jsonl", kItems);
  const std::string db = scratch_path("inputs", "flags.db");
  const std::string base = eval_args(items, db);
  struct Case {
    std::string flags, flag;
  };
  for (const Case& c : std::vector<Case>{{"--limit 0", "--limit"},
                                        {"--limit -1", "--limit"},
                                        {"--resume -1", "--resume"},
                                        {"--max-new-tokens -1", "--max-new-tokens"},
                                        {"--shard ''", "--shard"},
                                        {"--threads 100000", "--threads"},
                                        {"--threads -2", "--threads"}}) {
    const CliResult r = run_kvgate(base + " " + c.flags);
    EXPECT_EQ(r.exit_code, 2) << c.flags << ": " << r.err;
    EXPECT_TRUE(mentions(r, c.flag)) << c.flags << ": " << r.err;
  }
  EXPECT_FALSE(fs::exists(db));
  const CliResult gen = run_kvgate("generate --prompt hi --model " + tiny("tiny-qwen2.gguf") + " --threads 100000");
  EXPECT_EQ(gen.exit_code, 2) << gen.err;
  EXPECT_TRUE(mentions(gen, "--threads")) << gen.err;
}

// A copy of the tiny qwen2 model with one metadata value overwritten in place.
std::string patched_model(const std::string& name, const std::string& key, const void* value, size_t size) {
  std::string bytes = slurp(tiny("tiny-qwen2.gguf"));
  const size_t at = bytes.find(key);
  EXPECT_NE(at, std::string::npos) << key;
  // key bytes, then the u32 value type, then the value
  std::memcpy(bytes.data() + at + key.size() + 4, value, size);
  return temp_file(name, bytes);
}

TEST(InputsCli, GgufHyperParametersAreRangeChecked) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const uint32_t zero = 0, huge = 0xFFFFFFFFu;
  struct Case {
    std::string key;
    const void* value;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{{"qwen2.attention.layer_norm_rms_epsilon", &nan, "is nan; it must be a finite number"},
                                        {"qwen2.feed_forward_length", &zero, "is 0"},
                                        {"qwen2.context_length", &zero, "is 0"},
                                        {"qwen2.block_count", &huge, "is 4294967295, more than"}}) {
    const std::string model = patched_model("patched.gguf", c.key, c.value, 4);
    const CliResult info = run_kvgate("model info --model " + model);
    EXPECT_EQ(info.exit_code, 2) << c.key << ": " << info.out << info.err;
    EXPECT_TRUE(mentions(info, model + ": at byte ")) << c.key << ": " << info.err;
    EXPECT_TRUE(mentions(info, "'" + c.key + "' " + c.expected)) << info.err;
    const CliResult gen = run_kvgate("generate --prompt hi -n 2 --model " + model);
    EXPECT_EQ(gen.exit_code, 2) << c.key << ": " << gen.out << gen.err;
  }
}

// Found by the fuzz corpus: a weight matrix with a dimension of 0 divided by it (SIGFPE).
TEST(InputsCli, WeightWithAZeroDimensionIsBadInput) {
  std::string bytes = slurp(tiny("tiny-qwen2.gguf"));
  const std::string name = "blk.0.attn_q.weight";
  const size_t at = bytes.rfind(name);  // its tensor info: name, u32 n_dims, u64 dims...
  ASSERT_NE(at, std::string::npos);
  const uint64_t zero = 0;
  std::memcpy(bytes.data() + at + name.size() + 4 + 8, &zero, 8);
  const std::string model = temp_file("zero-dim.gguf", bytes);
  const CliResult r = run_kvgate("generate --prompt hi -n 1 --threads 1 --model " + model);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, model + ": at byte ")) << r.err;
  EXPECT_TRUE(mentions(r, "'" + name + "' has a dimension of 0")) << r.err;
}

TEST(InputsCli, NonFiniteLogitsNameModelConfigAndItem) {
  std::string bytes = slurp(tiny("tiny-qwen2.gguf"));
  const runtime::GgufFile file = runtime::GgufFile::open(tiny("tiny-qwen2.gguf"));
  bool patched = false;
  for (const runtime::GgufTensor& t : file.tensors()) {
    if (t.name != "output_norm.weight") continue;
    ASSERT_EQ(t.type, runtime::GgmlType::F32);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (uint64_t i = 0; i < t.n_elements; ++i) std::memcpy(bytes.data() + t.file_offset + i * 4, &nan, 4);
    patched = true;
  }
  ASSERT_TRUE(patched);
  const std::string model = temp_file("nan-weights.gguf", bytes);
  const std::string items = temp_file("nan-items.jsonl", kItems);
  const CliResult r = run_kvgate("eval --evalset " + items + " --model " + model + " --kv fp8 --threads 1 --db " +
                                 scratch_path("inputs", "nan.db"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(mentions(r, "item t1")) << r.err;
  EXPECT_TRUE(mentions(r, "config f16/f16 (reference)")) << r.err;
  EXPECT_TRUE(mentions(r, model)) << r.err;
  EXPECT_TRUE(mentions(r, "non-finite")) << r.err;
}

TEST(InputsCli, PolicyRuleForAnAbsentDomainIsReported) {
  const std::string policy = temp_file("typo-policy.json",
                                       "{\"kvgate_gate_policy\":1,\"rules\":[{\"domain\":\"tabels\",\"kv\":\"*\","
                                       "\"absolute\":{\"kld_mean_max\":0.5}}]}");
  const CliResult r = run_kvgate("gate --baseline latest --allow-missing-baseline --no-store --policy " + policy +
                                 " --db " + fixture_db());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("domain 'tabels' (its domains: policy, tables)"), std::string::npos) << r.out;
}

TEST(InputsCli, BailianParentCyclesAreRejected) {
  auto row = [](int chat, int parent, int t) {
    return "{\"chat_id\":" + std::to_string(chat) + ",\"parent_chat_id\":" + std::to_string(parent) +
           ",\"timestamp\":" + std::to_string(t) + ",\"input_length\":100,\"output_length\":10}\n";
  };
  const std::string self = temp_file("self.jsonl", row(1, -1, 0) + row(2, 2, 1));
  const CliResult s = run_kvgate("profile --trace " + self);
  EXPECT_EQ(s.exit_code, 2) << s.out << s.err;
  EXPECT_TRUE(mentions(s, self + ":2: chat 2 is its own parent")) << s.err;
  const std::string loop = temp_file("loop.jsonl", row(1, 3, 0) + row(2, 1, 1) + row(3, 2, 2));
  const CliResult l = run_kvgate("profile --trace " + loop);
  EXPECT_EQ(l.exit_code, 2) << l.out << l.err;
  EXPECT_TRUE(mentions(l, loop + ":3: parent_chat_id 2 descends from chat 3")) << l.err;
  const std::string tree = temp_file("tree.jsonl", row(1, -1, 0) + row(2, 1, 1) + row(3, 1, 2) + row(4, 3, 3));
  const CliResult t = run_kvgate("profile --trace " + tree);
  EXPECT_EQ(t.exit_code, 0) << t.err;
}

// ---- item 6: damaged and read-only databases ----

TEST(InputsCli, DamagedDatabaseIsRefusedByName) {
  const std::string db = copy_of(fixture_db(), "damaged.db");
  std::string bytes = slurp(db);
  const size_t page = 4096;
  ASSERT_GE(bytes.size(), 4 * page);
  // The last page holds index or table b-tree cells that `runs list` does not read.
  for (size_t i = bytes.size() - page + 8; i < bytes.size(); ++i) bytes[i] = static_cast<char>(0xA5 ^ (i * 7));
  std::ofstream(db, std::ios::binary | std::ios::trunc) << bytes;
  for (const std::string& cmd : {"runs list --db " + db, "runs show latest --db " + db,
                                 "gate --baseline latest --allow-missing-baseline --policy " + policy_file() + " --db " + db}) {
    const CliResult r = run_kvgate(cmd);
    EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.out << r.err;
    EXPECT_TRUE(mentions(r, db + ": damaged results database")) << cmd << ": " << r.err;
  }
}

TEST(InputsCli, NegativeSchemaVersionIsNotAKvgateDatabase) {
  const std::string db = copy_of(fixture_db(), "version.db");
  std::string bytes = slurp(db);
  const uint32_t minus_one = 0xFFFFFFFFu;  // user_version, big-endian at offset 60
  std::memcpy(bytes.data() + 60, &minus_one, 4);
  std::ofstream(db, std::ios::binary | std::ios::trunc) << bytes;
  const CliResult r = run_kvgate("runs list --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(mentions(r, db + ": not a kvgate results database (schema version -1")) << r.err;
}

// Found by the fuzz corpus: a schema format number SQLite does not know was "internal error".
TEST(InputsCli, UnknownSqliteFileFormatIsBadInput) {
  const std::string db = copy_of(fixture_db(), "format.db");
  std::string bytes = slurp(db);
  const char format[4] = {0, 0, 0, 9};  // schema format number, big-endian at offset 44
  std::memcpy(bytes.data() + 44, format, 4);
  std::ofstream(db, std::ios::binary | std::ios::trunc) << bytes;
  const CliResult r = run_kvgate("runs list --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(mentions(r, db + ": not a usable kvgate results database")) << r.err;
}

// The read-only cases need a user the directory's permissions bind: as root, run the binary as
// nobody.
std::string as_unprivileged() { return ::geteuid() == 0 ? "setpriv --reuid=65534 --regid=65534 --clear-groups" : ""; }

TEST(InputsCli, ReadOnlyDatabaseIsListedAndGatedWithoutStoring) {
  if (::geteuid() == 0 && std::system("command -v setpriv >/dev/null 2>&1") != 0) GTEST_SKIP() << "needs setpriv as root";
  const std::string dir = scratch_path("inputs", "ro-dir");
  fs::create_directories(dir);
  const std::string db = dir + "/runs.db";
  fs::copy_file(fixture_db(), db, fs::copy_options::overwrite_existing);
  ::chmod(db.c_str(), 0444);
  ::chmod(dir.c_str(), 0555);
  // The binary runs as another user: every directory above the scratch files must let it in.
  const std::string run_as = as_unprivileged();
  auto run = [&](const std::string& args) {
    const std::string cmd = run_as + " " + kvgate_binary() + " " + args + " 2>&1";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = ::pclose(p);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
  };
  const auto [list_rc, list_out] = run("runs list --db " + db);
  EXPECT_EQ(list_rc, 0) << list_out;
  EXPECT_NE(list_out.find("complete"), std::string::npos) << list_out;
  const std::string gate = "gate --baseline latest --allow-missing-baseline --policy " + policy_file() + " --db " + db;
  const auto [gate_rc, gate_out] = run(gate);
  EXPECT_EQ(gate_rc, 2) << gate_out;
  EXPECT_NE(gate_out.find("--no-store"), std::string::npos) << gate_out;
  const auto [nostore_rc, nostore_out] = run(gate + " --no-store");
  EXPECT_EQ(nostore_rc, 0) << nostore_out;
  EXPECT_FALSE(fs::exists(db + "-wal"));
  ::chmod(dir.c_str(), 0755);
  ::chmod(db.c_str(), 0644);
}

}  // namespace
}  // namespace kvgate::testing
