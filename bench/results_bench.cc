// Costs of the scoring and results layers that an eval run pays per scored position and per
// item: comparing two next-token distributions (with a memcpy of the same logits as the
// bound), the paired bootstrap a gate runs, and one item's transaction in the store.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <span>
#include <utility>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "results/row_digest.h"
#include "results/store.h"
#include "results/stored_run.h"
#include "scoring/depth_effect.h"
#include "scoring/position_buckets.h"
#include "scoring/stats.h"
#include "scoring/token_metrics.h"

namespace {

// The smoke suite's run (ci/suites/smoke.json, default model, 5 configs), counted from a stored run of
// it: 25 items, of which 2 agentic sessions of 5 scored turns (165 turn rows), 2,441 latency
// samples (about 15 per turn's answer), 280 token-class rows (about 2 per item and config), one
// position row per turn: 3,201 item rows.
constexpr int kSmokeItems = 25, kSmokeSessions = 2, kSmokeSessionTurns = 5, kSmokeAnswerTokens = 15;

// SmolLM2's vocabulary: the size every scored position pays for.
constexpr size_t kVocab = 49152;

std::vector<float> random_logits(uint64_t seed) {
  kvgate::Rng rng(seed);
  std::vector<float> v(kVocab);
  for (float& x : v) x = static_cast<float>(3.0 * rng.normal());
  return v;
}

// The implementation compare_position had before it was vectorized (two std::exp per entry,
// three passes), kept here so one run measures the speedup on the same machine.
kvgate::scoring::PositionComparison compare_position_before(std::span<const float> ref, std::span<const float> q,
                                                            uint32_t correct) {
  auto normalize = [](std::span<const float> logits, std::vector<double>* shifted) {
    double m = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < logits.size(); ++i) {
      const double v = logits[i];
      if (std::isnan(v) || v == std::numeric_limits<double>::infinity()) std::abort();
      if (v > m) m = v;
    }
    double sum = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
      const double e = std::exp(static_cast<double>(logits[i]) - m);
      if (shifted) (*shifted)[i] = e;
      sum += e;
    }
    return std::pair<double, double>(sum, m + std::log(sum));
  };
  auto argmax = [](std::span<const float> v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[best]) best = i;
    return static_cast<uint32_t>(best);
  };
  std::vector<double> ref_exp(ref.size());
  const auto [ref_sum, lr] = normalize(ref, &ref_exp);
  const double lq = normalize(q, nullptr).second;
  double kld = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (ref_exp[i] == 0.0) continue;
    kld += ref_exp[i] / ref_sum * ((static_cast<double>(ref[i]) - lr) - (static_cast<double>(q[i]) - lq));
  }
  kvgate::scoring::PositionComparison c;
  c.kld = kld;
  c.nll_ref = lr - static_cast<double>(ref[correct]);
  c.nll_q = lq - static_cast<double>(q[correct]);
  c.p_ref = std::exp(-c.nll_ref);
  c.p_q = std::exp(-c.nll_q);
  c.delta_p = c.p_q - c.p_ref;
  c.top1_ref = argmax(ref);
  c.top1_q = argmax(q);
  c.same_top1 = c.top1_ref == c.top1_q;
  return c;
}

void BM_ComparePositionBefore(benchmark::State& state) {
  const auto ref = random_logits(1), q = random_logits(2);
  for (auto _ : state) benchmark::DoNotOptimize(compare_position_before(ref, q, 17));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * kVocab * sizeof(float)));
}
BENCHMARK(BM_ComparePositionBefore);

void BM_ComparePosition(benchmark::State& state) {
  const auto ref = random_logits(1), q = random_logits(2);
  for (auto _ : state) benchmark::DoNotOptimize(kvgate::scoring::compare_position(ref, q, 17));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * kVocab * sizeof(float)));
}
BENCHMARK(BM_ComparePosition);

// What quality by position adds to each scored token (issue 32: at most 3 % of a run): its
// bucket and four sums, beside the comparison above that every token costs anyway.
void BM_PositionBookkeeping(benchmark::State& state) {
  std::array<kvgate::scoring::PositionSums, kvgate::scoring::kPositionBuckets> buckets{};
  int64_t position = 3000;
  for (auto _ : state) {
    buckets[static_cast<size_t>(kvgate::scoring::position_bucket(position))].add(0.01, -0.001, true);
    position = position < 40000 ? position + 7 : 0;
    benchmark::DoNotOptimize(buckets);
  }
}
BENCHMARK(BM_PositionBookkeeping);

// The bound: reading both logit vectors once.
void BM_CopyLogitsBound(benchmark::State& state) {
  const auto ref = random_logits(1), q = random_logits(2);
  std::vector<float> dst(2 * kVocab);
  for (auto _ : state) {
    std::memcpy(dst.data(), ref.data(), kVocab * sizeof(float));
    std::memcpy(dst.data() + kVocab, q.data(), kVocab * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * kVocab * sizeof(float)));
}
BENCHMARK(BM_CopyLogitsBound);

void BM_PairedBootstrap(benchmark::State& state) {
  const size_t pairs = static_cast<size_t>(state.range(0));
  kvgate::Rng rng(3);
  std::vector<double> base(pairs), cand(pairs);
  for (size_t i = 0; i < pairs; ++i) {
    base[i] = rng.uniform();
    cand[i] = base[i] + 0.01 * rng.normal();
  }
  for (auto _ : state) benchmark::DoNotOptimize(kvgate::scoring::paired_bootstrap_ci(base, cand, 2000, 0.95, 7));
}
BENCHMARK(BM_PairedBootstrap)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

// A config's depth view as `runs show` and the report compute it (issue 42): per bucket a
// bootstrap over documents and each bucket against the shallowest, B = 2000, for `docs`
// documents reaching four buckets (12 and 100; long-cpu has 6) — beside the paired bootstrap
// of as many pairs, the gate's per-check cost, in the same run.
void BM_DepthCurve(benchmark::State& state) {
  const size_t docs = static_cast<size_t>(state.range(0));
  kvgate::Rng rng(5);
  std::vector<kvgate::scoring::PositionRow> rows;
  for (size_t d = 0; d < docs; ++d)
    for (int b = 0; b < 4; ++b) {
      kvgate::scoring::PositionSums s;
      for (int t = 0; t < 8; ++t) s.add(0.01 * (1 + b) * rng.uniform(), 0.0, rng.uniform() < 0.9);
      rows.push_back({"doc-" + std::to_string(d), "q4_0", b, s});
    }
  const kvgate::scoring::ConfigDocuments documents = kvgate::scoring::config_documents(rows, "q4_0");
  for (auto _ : state) benchmark::DoNotOptimize(kvgate::scoring::depth_curve(documents, "q4_0", {2000, 0.95, 7}));
}
BENCHMARK(BM_DepthCurve)->Arg(12)->Arg(100)->Unit(benchmark::kMillisecond);

// One item as an eval run writes it: its metrics row, four token classes and 64 latency
// samples, in one transaction, WAL, synchronous = NORMAL.
void BM_WriteItem(benchmark::State& state) {
  const std::string path = "/tmp/kvgate_results_bench_" + std::to_string(::getpid()) + ".db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  {
    auto store = kvgate::results::Store::open(path);
    const int64_t run = store.begin_run({});
    const int64_t config = store.add_config({"q4_0/q4_0", "bench", 4.5});
    std::vector<double> times(64);
    for (size_t i = 0; i < times.size(); ++i) times[i] = 100.0 + 15.0 * static_cast<double>(i);
    int64_t n = 0;
    for (auto _ : state) {
      auto writer = store.begin_item(run, {"item-" + std::to_string(n++), "tables", "e", "h"});
      kvgate::results::ItemMetrics m;
      m.config_id = config;
      m.scored_tokens = 256;
      writer.add_metrics(m);
      for (const char* cls : {"digits", "hangul", "code_punct", "other"})
        writer.add_token_class({config, cls, 64, 1.0, 0.0, 60});
      writer.add_latency({config, 0, times});
      // A turn's scored tokens in two position buckets (schema v7).
      if (state.range(0) > 0)
        for (int64_t b = 0; b < 2; ++b) writer.add_position({config, 0, 2048 * (b + 1), 2048 * (b + 2), 128, 1.0, 0.0, 120});
      writer.commit();
    }
    state.SetItemsProcessed(state.iterations());
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
}
BENCHMARK(BM_WriteItem)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The peer of BM_WriteItem/1 in the same run: the same rows written as 403acac wrote them, by plain
// INSERTs with no row digests and no run seal (issue 40), so the ratio is what the digests cost.
void BM_WriteItemWithoutDigests(benchmark::State& state) {
  using kvgate::results::Statement;
  const std::string path = "/tmp/kvgate_results_bench_plain_" + std::to_string(::getpid()) + ".db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  {
    auto store = kvgate::results::Store::open(path);
    const int64_t run = store.begin_run({});
    const int64_t config = store.add_config({"q4_0/q4_0", "bench", 4.5});
    kvgate::results::Connection c(path, false);
    int64_t n = 0;
    for (auto _ : state) {
      kvgate::results::Transaction tx(c);
      Statement item(c, "INSERT INTO items (run_id, item_key, domain, evalset_hash, item_hash) VALUES (?1, ?2, 'tables', 'e', 'h') "
                        "RETURNING id");
      item.bind(1, run).bind(2, "item-" + std::to_string(n++));
      item.step();
      const int64_t id = item.column_int(0);
      item.reset();
      Statement metrics(c, "INSERT INTO item_metrics (item_id, config_id, scored_tokens, kld_mean, kld_max, kld_p99, "
                           "delta_p_mean, delta_p_rms, same_top1, nll_mean, nll_ref_mean) "
                           "VALUES (?1, ?2, 256, 0, 0, 0, 0, 0, 0, 0, 0)");
      metrics.bind(1, id).bind(2, config).run();
      Statement cls(c, "INSERT INTO token_class_metrics (item_id, config_id, token_class, scored_tokens, kld_sum, delta_p_sum, "
                       "same_top1) VALUES (?1, ?2, ?3, 64, 1.0, 0.0, 60)");
      for (const char* name : {"digits", "hangul", "code_punct", "other"}) {
        cls.reset();
        cls.bind(1, id).bind(2, config).bind(3, name).run();
      }
      Statement lat(c, "INSERT INTO latency_samples (item_id, config_id, turn_index, token_index, t_ms) VALUES (?1, ?2, 0, ?3, ?4)");
      for (int64_t i = 0; i < 64; ++i) {
        lat.reset();
        lat.bind(1, id).bind(2, config).bind(3, i).bind(4, 100.0 + 15.0 * static_cast<double>(i)).run();
      }
      Statement pos(c, "INSERT INTO position_metrics (item_id, config_id, turn_index, position_from, position_to, scored_tokens, "
                       "kld_sum, delta_p_sum, same_top1) VALUES (?1, ?2, 0, ?3, ?4, 128, 1.0, 0.0, 120)");
      for (int64_t b = 0; b < 2; ++b) {
        pos.reset();
        pos.bind(1, id).bind(2, config).bind(3, 2048 * (b + 1)).bind(4, 2048 * (b + 2)).run();
      }
      tx.commit();
    }
    state.SetItemsProcessed(state.iterations());
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
}
BENCHMARK(BM_WriteItemWithoutDigests)->Unit(benchmark::kMicrosecond);

// A run shaped as `kvgate eval --suite smoke` stores one (measured on a run of it: 25 items, the
// reference and 4 candidates; per item and config the turn rows, the latency samples of each
// turn's greedy answer, the token classes and the position rows it wrote), for the readers.
std::string smoke_shaped_db(int64_t* run_id) {
  static const std::string path = "/tmp/kvgate_results_bench_smoke_" + std::to_string(::getpid()) + ".db";
  static int64_t run = 0;
  if (run == 0) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
    auto store = kvgate::results::Store::open(path);
    run = store.begin_run({});
    std::vector<int64_t> configs;
    for (const char* spec : {"f16/f16", "fp8_e4m3/fp8_e4m3", "q8_0:rot=wht/q8_0:rot=wht", "q4_0:rot=wht/q4_0:rot=wht", "tq3/4"})
      configs.push_back(store.add_config({spec, spec, 8.0}));
    kvgate::Rng rng(5);
    for (int item = 0; item < kSmokeItems; ++item) {
      auto writer = store.begin_item(run, {"item-" + std::to_string(item), "tables", "e", "h", "gold"});
      const int turns = item < kSmokeSessions ? kSmokeSessionTurns : 1;
      for (const int64_t config : configs) {
        kvgate::results::ItemMetrics m;
        m.config_id = config;
        m.scored_tokens = 40;
        m.kld_mean = rng.uniform();
        m.generated_tokens = kSmokeAnswerTokens;
        writer.add_metrics(m);
        for (int t = 0; t < turns; ++t) {
          kvgate::results::TurnMetrics turn;
          turn.config_id = config;
          turn.turn_index = t;
          turn.scored_tokens = 8;
          turn.kld_mean = rng.uniform();
          turn.answer = "an answer of a few words";
          turn.answer_tokens = kSmokeAnswerTokens;
          writer.add_turn(turn);
          std::vector<double> times(kSmokeAnswerTokens);
          for (double& x : times) x = rng.uniform() * 100;
          writer.add_latency({config, t, times});
          writer.add_position({config, t, 0, 1024, 8, rng.uniform(), 0.0, 7});
        }
        for (const char* cls : {"digits", "other"}) writer.add_token_class({config, cls, 10, 1.0, 0.0, 9});
      }
      writer.commit();
    }
    store.finish_run(run, kvgate::results::RunStatus::complete);
  }
  *run_id = run;
  return path;
}

// What every reader of a stored run pays once: every row of the run checked against its digest and
// the run's seal (results::check_run_rows), beside its peer, the same run read (StoredRun::load, as
// `runs show`, `report` and `gate` read it) with the check already done.
void BM_CheckSmokeRun(benchmark::State& state) {
  int64_t run = 0;
  const std::string path = smoke_shaped_db(&run);
  kvgate::results::Connection c(path, false);
  for (auto _ : state) kvgate::results::check_run_rows(c, run);
}
BENCHMARK(BM_CheckSmokeRun)->Unit(benchmark::kMillisecond);

void BM_LoadSmokeRun(benchmark::State& state) {
  int64_t run = 0;
  const std::string path = smoke_shaped_db(&run);
  auto store = kvgate::results::Store::open(path, kvgate::results::Store::Mode::existing);
  const kvgate::results::RunRecord record = *store.find_run(run);
  store.check_run(run);
  for (auto _ : state) benchmark::DoNotOptimize(kvgate::results::StoredRun::load(store, record));
}
BENCHMARK(BM_LoadSmokeRun)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
