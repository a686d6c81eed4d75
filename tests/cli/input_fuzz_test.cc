// The mutated-input corpus (tests/cli/input_corpus.h, regenerated from its seed on every run)
// through the real CLI: every run must end by itself within its time limit (no hang), by exit
// (no signal: no crash), with 0, 2 (bad input or usage, the message naming the mutated file) or,
// for `gate`, 1 — never 3, which would call bad input an internal or environment error; and
// `eval --resume` refuses every damaged database `runs show` refuses. The targeted cases of issue
// 40 (finding_cases) must each give exactly the exit code and message the README promises.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "results/sqlite.h"
#include "runtime/gguf.h"
#include "tests/cli/input_corpus.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kCorpusSeed = 20261204;
constexpr size_t kPerKind = 40;
// Seconds one run may take before it counts as a hang (the slowest, a tiny-model forward pass
// over a mutated header, takes well under one).
constexpr int kRunTimeoutS = 30;

std::string tiny(const std::string& name) { return std::string(KVGATE_SOURCE_DIR) + "/tests/golden/tiny_models/" + name; }

struct Command {
  Command(std::string a, bool g = false, std::vector<std::string> al = {}) : args(std::move(a)), gate(g), also(std::move(al)) {}
  std::string args;
  bool gate = false;  // may exit 1 (a check failed)
  // Besides the file's own name, what an exit-2 message may name instead (a usage error the
  // command reaches once the file is accepted).
  std::vector<std::string> also;
};

class InputFuzz : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(scratch_path("fuzz", "corpus"));
    fs::create_directories(*dir_);
    items_ = new std::string(*dir_ + "/seed-items.jsonl");
    std::ofstream(*items_) << text_seeds().front().second;
    db_ = new std::string(*dir_ + "/seed.db");
    // The tiny models have no chat template: the database's run scores the text item only.
    const std::string text_items = *dir_ + "/seed-text-items.jsonl";
    const std::string seed = text_seeds().front().second;
    std::ofstream(text_items) << seed.substr(0, seed.find('\n') + 1);
    const CliResult r = run_kvgate("eval --evalset " + text_items + " --model " + tiny("tiny-qwen2.gguf") +
                                   " --kv fp8 --threads 1 --max-new-tokens 4 --json --db " + *db_);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // A run `eval --resume` can continue: the first of two text items.
    const std::string two_items = *dir_ + "/seed-two-items.jsonl";
    std::ofstream(two_items) << seed.substr(0, seed.find('\n') + 1)
                             << "{\"id\":\"t2\",\"domain\":\"tables\",\"text\":\"Another line for the tiny model.\","
                                "\"score\":{\"kind\":\"spans\",\"spans\":[[8,12]]}}\n";
    resumable_db_ = new std::string(*dir_ + "/seed-resumable.db");
    const CliResult partial = run_kvgate("eval --evalset " + two_items + " --model " + tiny("tiny-qwen2.gguf") +
                                         " --kv fp8 --threads 1 --max-new-tokens 4 --limit 1 --json --db " + *resumable_db_);
    ASSERT_EQ(partial.exit_code, 0) << partial.err;
    trace_ = new std::string(*dir_ + "/seed-trace.jsonl");
    std::ofstream(*trace_) << "{\"timestamp_ms\": 0, \"input_tokens\": 500, \"output_tokens\": 50}\n";
  }
  static void TearDownTestSuite() {
    std::error_code ignored;
    fs::remove_all(*dir_, ignored);
  }

  std::vector<Command> commands_for(const std::string& kind, const std::string& file, size_t index) const {
    const std::string tiny_model = tiny("tiny-qwen2.gguf");
    const std::string db = scratch_path("fuzz", "run.db");
    if (kind == "items") return {{"evalset validate " + file}};
    if (kind == "suite") return {{"evalset validate " + file}};
    if (kind == "policy")
      return {{"gate --baseline latest --allow-missing-baseline --no-store --policy " + file + " --db " + *db_, true}};
    if (kind == "endpoints")
      return {{"eval --evalset " + *items_ + " --endpoints " + file + " --top-k 0 --db " + db, false, {"--top-k"}}};
    if (kind == "messages")
      return {{"generate -n 1 --threads 1 --messages " + file + " --model " + tiny_model, false,
               {tiny_model + ": tokenizer.chat_template: missing"}}};
    if (kind == "overhead") return {{"capacity --trace " + *trace_ + " --kv fp8 --kv-overhead-file " + file}};
    if (kind == "trace") return {{"profile --trace " + file}};
    if (kind == "gguf") {
      std::vector<Command> c = {{"model info --model " + file}};
      if (index % 4 == 0) c.push_back({"generate --prompt hi -n 2 --threads 1 --model " + file});
      return c;
    }
    if (kind == "resume-db")
      return {{"runs show latest --db " + file}, {"eval --resume 1 --threads 1 --max-new-tokens 4 --db " + file}};
    if (kind == "db")
      return {{"runs list --db " + file},
              {"runs show latest --db " + file},
              {"gate --baseline latest --allow-missing-baseline --no-store --policy " + std::string(KVGATE_SOURCE_DIR) +
                   "/ci/gates/default.json --db " + file,
               true},
              {"report --run latest --db " + file + " --md " + scratch_path("fuzz", "report.md")}};
    ADD_FAILURE() << "no command for kind " << kind;
    return {};
  }

  static std::string* dir_;
  static std::string* items_;
  static std::string* db_;
  static std::string* resumable_db_;
  static std::string* trace_;
};

std::string* InputFuzz::dir_ = nullptr;
std::string* InputFuzz::items_ = nullptr;
std::string* InputFuzz::db_ = nullptr;
std::string* InputFuzz::resumable_db_ = nullptr;
std::string* InputFuzz::trace_ = nullptr;

TEST_F(InputFuzz, EveryMutantIsExit0Or2NamingItsFile) {
  CorpusSeeds seeds;
  seeds.gguf = slurp(tiny("tiny-qwen2.gguf"));
  seeds.db = slurp(*db_);
  seeds.resumable_db = slurp(*resumable_db_);
  const runtime::GgufFile model = runtime::GgufFile::open(tiny("tiny-qwen2.gguf"));
  // KVGATE_INPUT_FUZZ_SEED / KVGATE_INPUT_FUZZ_PER_KIND explore beyond the CI corpus by hand.
  const char* seed_env = std::getenv("KVGATE_INPUT_FUZZ_SEED");
  const char* per_kind_env = std::getenv("KVGATE_INPUT_FUZZ_PER_KIND");
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : kCorpusSeed;
  const size_t per_kind = per_kind_env ? std::strtoull(per_kind_env, nullptr, 10) : kPerKind;
  const std::vector<CorpusFile> corpus = make_input_corpus(seed, seeds, model.data_section_offset(), per_kind);

  std::map<std::string, std::map<int, int>> exits;  // kind -> exit code -> runs
  size_t runs = 0, bad = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const CorpusFile& f = corpus[i];
    const std::string path = *dir_ + "/" + f.name;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << f.bytes;
    int read_exit = -1;  // resume-db: what `runs show` answered
    for (const Command& c : commands_for(f.kind, path, i)) {
      // coreutils timeout: 124 when the limit ends the run; a signal death shows as 128+N.
      const CliResult r = run_kvgate(c.args, "timeout -k 5 " + std::to_string(kRunTimeoutS));
      // Issue 40: `eval --resume` wrote into databases every read command refused.
      if (f.kind == "resume-db" && read_exit < 0) read_exit = r.exit_code;
      else if (f.kind == "resume-db" && read_exit == 2 && r.exit_code != 2) {
        ++bad;
        ADD_FAILURE() << "eval --resume exited " << r.exit_code << " on a database runs show refuses (" << f.name << ")\n"
                      << r.err.substr(0, 600);
      }
      ++runs;
      ++exits[f.kind][r.exit_code];
      std::string problem;
      if (r.exit_code == 124) problem = "hang (no exit within " + std::to_string(kRunTimeoutS) + " s)";
      else if (r.exit_code >= 128) problem = "killed by signal " + std::to_string(r.exit_code - 128);
      else if (r.exit_code == 3) problem = "exit 3 for bad input";
      else if (r.exit_code == 1 && !c.gate) problem = "exit 1";
      else if (r.exit_code != 0 && r.exit_code != 1 && r.exit_code != 2) problem = "exit " + std::to_string(r.exit_code);
      else if (r.exit_code == 2) {
        bool named = r.err.find(path) != std::string::npos;
        for (const std::string& a : c.also) named = named || r.err.find(a) != std::string::npos;
        if (!named) problem = "exit 2 without naming the file";
      }
      if (!problem.empty()) {
        ++bad;
        // build/tests/cli/make_input_corpus DIR writes the same mutants, to rerun this one by hand.
        ADD_FAILURE() << problem << " (" << f.name << "): kvgate " << c.args << "\n" << r.err.substr(0, 600);
      }
    }
    fs::remove(path);
  }
  for (const auto& [kind, codes] : exits) {
    std::string line = kind + ":";
    for (const auto& [code, n] : codes) line += " exit " + std::to_string(code) + " x" + std::to_string(n);
    std::printf("%s\n", line.c_str());
  }
  std::printf("%zu files, %zu runs, %zu problems\n", corpus.size(), runs, bad);
  EXPECT_EQ(bad, 0u);
}

// The targeted cases of issue 40 (input_corpus.h, finding_cases): each finding's input through the
// command that reached it, answered as the README promises.
TEST_F(InputFuzz, EveryFindingOfIssue40IsAnsweredAsPromised) {
  CorpusSeeds seeds;
  seeds.gguf = slurp(tiny("tiny-qwen2.gguf"));
  const std::vector<CorpusCase> cases = finding_cases(seeds);
  std::set<int> findings;
  for (const CorpusCase& c : cases) {
    findings.insert(c.finding);
    const std::string file = *dir_ + "/" + c.name;
    if (!c.bytes.empty()) std::ofstream(file, std::ios::binary | std::ios::trunc) << c.bytes;
    const std::string db = *dir_ + "/case-" + c.name + ".db";
    const std::string resumable = *dir_ + "/case-resumable-" + c.name + ".db";
    const std::string scratch = *dir_ + "/case-never-" + c.name + ".db";
    fs::copy_file(*db_, db, fs::copy_options::overwrite_existing);
    fs::copy_file(*resumable_db_, resumable, fs::copy_options::overwrite_existing);
    if (c.fresh_db) fs::remove(db);
    if (!c.sql.empty()) {
      results::Connection connection(c.args.find("{resumable}") != std::string::npos ? resumable : db, c.fresh_db);
      connection.execute_script(c.sql);
    }
    std::string args = c.args;
    const std::pair<std::string, std::string> fill[] = {{"{file}", file},
                                                       {"{db}", db},
                                                       {"{resumable}", resumable},
                                                       {"{items}", *dir_ + "/seed-text-items.jsonl"},
                                                       {"{model}", tiny("tiny-qwen2.gguf")},
                                                       {"{trace}", *trace_},
                                                       {"{scratch}", scratch}};
    for (const auto& [key, value] : fill)
      for (size_t at = args.find(key); at != std::string::npos; at = args.find(key, at + value.size()))
        args.replace(at, key.size(), value);
    const CliResult r = run_kvgate(args, "timeout -k 5 " + std::to_string(kRunTimeoutS));
    EXPECT_EQ(r.exit_code, c.exit_code) << "finding " << c.finding << " (" << c.name << "): kvgate " << args << "\n"
                                        << r.out.substr(0, 300) << r.err.substr(0, 600);
    if (!c.says.empty()) EXPECT_NE(r.err.find(c.says), std::string::npos) << c.name << ": " << r.err.substr(0, 600);
    if (!c.never_prints.empty()) EXPECT_EQ(r.out.find(c.never_prints), std::string::npos) << c.name << ": " << r.out;
    EXPECT_FALSE(fs::exists(scratch)) << c.name << ": " << args;
  }
  EXPECT_EQ(findings.size(), 9u) << "a case per finding";
}

}  // namespace
}  // namespace kvgate::testing
