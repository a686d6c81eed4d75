// Costs of the scoring and results layers that an eval run pays per scored position and per
// item: comparing two next-token distributions (with a memcpy of the same logits as the
// bound), the paired bootstrap a gate runs, and one item's transaction in the store.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "results/store.h"
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

void BM_ComparePosition(benchmark::State& state) {
  const auto ref = random_logits(1), q = random_logits(2);
  for (auto _ : state) benchmark::DoNotOptimize(kvgate::scoring::compare_position(ref, q, 17));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 2 * kVocab * sizeof(float)));
}
BENCHMARK(BM_ComparePosition);

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
      writer.commit();
    }
    state.SetItemsProcessed(state.iterations());
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
}
BENCHMARK(BM_WriteItem)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
