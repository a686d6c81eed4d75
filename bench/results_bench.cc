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
#include "results/store.h"
#include "scoring/depth_effect.h"
#include "scoring/position_buckets.h"
#include "scoring/stats.h"
#include "scoring/token_metrics.h"

namespace {

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
// documents reaching four buckets (long-cpu: 12) — beside the paired bootstrap of as many pairs,
// the gate's per-check cost, in the same run.
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

}  // namespace

BENCHMARK_MAIN();
