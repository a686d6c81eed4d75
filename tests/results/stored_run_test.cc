// results::StoredRun, the one bound read of a stored run: its configs carry the KV config they
// ran read as stored, their labels, roles and endpoints, and loading it reads each stored table
// of the run once.
#include "results/stored_run.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "kernels/kv_config.h"
#include "tests/results/scratch_db.h"

namespace kvgate::results {
namespace {

class StoredRunTest : public testing::ScratchDbTest {
 protected:
  StoredRunTest() : ScratchDbTest("kvgate_stored_run_") {}
};

RunInfo run_info() {
  RunInfo r;
  r.command = "kvgate eval";
  r.model_path = "m.gguf";
  r.suite_name = "suite:smoke";
  r.suite_hash = "00000000deadbeef";
  r.threads = 2;
  return r;
}

// A run as an older kvgate wrote it: `q4_0/q4_0` is the canonical string it gave unrotated q4_0,
// before a bare llama.cpp type meant rotated; beside it a weights config, an endpoint's and a
// spec this build cannot read.
int64_t legacy_run(Store& store) {
  const int64_t run = store.begin_run(run_info());
  int64_t n = 0;
  auto attach = [&](const std::string& spec, ConfigRole role, const std::string& label) {
    const int64_t id = store.add_config({spec, "h" + std::to_string(++n), 4.5});
    store.attach_config(run, id, role, 100);
    if (!label.empty()) store.set_config_label(run, id, label);
    return id;
  };
  const int64_t ref = attach("f16/f16", ConfigRole::reference, "");
  const int64_t legacy = attach("q4_0/q4_0", ConfigRole::candidate, "");
  attach("Q8_0+q4_0/q4_0", ConfigRole::candidate, "Q8_0+q4_0");
  const int64_t served = attach("endpoint:vllm=fp8_e4m3/fp8_e4m3", ConfigRole::candidate, "endpoint:vllm");
  attach("nosuchformat/nosuchformat", ConfigRole::candidate, "");
  store.add_config_endpoint(run, {served, "vllm", "http://host:8000", "vllm", "0.9", "m", "fp8_e4m3/fp8_e4m3", "stated", "", "{}"});
  ItemWriter w = store.begin_item(run, {"t1", "tables", "e", "i"});
  for (const int64_t id : {ref, legacy}) {
    ItemMetrics m;
    m.config_id = id;
    m.scored_tokens = 3;
    w.add_metrics(m);
    TurnMetrics t;
    t.config_id = id;
    w.add_turn(t);
  }
  w.commit();
  store.finish_run(run, RunStatus::complete);
  return run;
}

TEST_F(StoredRunTest, StoredSpecsAreReadAsStored) {
  Store store = Store::open(path_);
  const int64_t run = legacy_run(store);
  const StoredRun s = StoredRun::load(store, *store.find_run(run));
  ASSERT_EQ(s.configs.size(), 5u);
  const StoredConfig* legacy = nullptr;
  for (const StoredConfig& c : s.configs)
    if (c.spec == "q4_0/q4_0") legacy = &c;
  ASSERT_NE(legacy, nullptr);
  ASSERT_TRUE(legacy->kv.has_value()) << legacy->kv_problem;
  // What it meant when stored, not what `q4_0` means today.
  EXPECT_EQ(*legacy->kv, kernels::parse_kv_config("q4_0:rot=none"));
  EXPECT_NE(*legacy->kv, kernels::parse_kv_config("q4_0"));
  EXPECT_EQ(legacy->label, "q4_0/q4_0");
  EXPECT_FALSE(legacy->served_by_endpoint());
  for (const StoredConfig& c : s.configs) {
    if (c.spec == "Q8_0+q4_0/q4_0") {
      // A weights config's KV part, read as stored too.
      ASSERT_TRUE(c.kv.has_value());
      EXPECT_EQ(*c.kv, kernels::parse_kv_config("q4_0:rot=none"));
      EXPECT_EQ(c.label, "Q8_0+q4_0");
    } else if (c.spec == "endpoint:vllm=fp8_e4m3/fp8_e4m3") {
      EXPECT_TRUE(c.served_by_endpoint());
      ASSERT_TRUE(c.endpoint.has_value());
      EXPECT_EQ(c.endpoint->name, "vllm");
      ASSERT_TRUE(c.kv.has_value());
      EXPECT_EQ(*c.kv, kernels::parse_kv_config("fp8"));
    } else if (c.spec == "nosuchformat/nosuchformat") {
      // Kept under its stored name, with why it cannot be read, never guessed.
      EXPECT_FALSE(c.kv.has_value());
      EXPECT_NE(c.kv_problem.find("nosuchformat"), std::string::npos) << c.kv_problem;
    } else if (c.spec == "f16/f16") {
      EXPECT_EQ(c.role, ConfigRole::reference);
      EXPECT_EQ(s.reference(), &c);
    }
  }
}

TEST_F(StoredRunTest, LoadReadsEachTableOfTheRunOnce) {
  Store store = Store::open(path_);
  const int64_t run = legacy_run(store);
  const auto before = Store::run_table_reads();
  const StoredRun s = StoredRun::load(store, *store.find_run(run));
  EXPECT_EQ(s.items.size(), 2u);
  EXPECT_EQ(s.turns.size(), 2u);
  EXPECT_EQ(s.endpoints.size(), 1u);
  const auto after = Store::run_table_reads();
  for (const char* table : {"run_configs", "items", "item_metrics", "turn_metrics", "position_metrics", "config_endpoints",
                            "item_failures", "load_replays"}) {
    const auto b = before.find({table, run});
    const auto a = after.find({table, run});
    ASSERT_NE(a, after.end()) << table << " was not read";
    EXPECT_EQ(a->second - (b == before.end() ? 0 : b->second), 1) << table;
  }
  // A run without a load replay has no requests or predictions to read. (The counts are the
  // process's, so compare with before: other tests in one process read run 1 too.)
  for (const char* table : {"load_requests", "capacity_predictions"}) {
    const auto b = before.find({table, run});
    const auto a = after.find({table, run});
    EXPECT_EQ(a == after.end() ? 0 : a->second, b == before.end() ? 0 : b->second) << table;
  }
}

}  // namespace
}  // namespace kvgate::results
