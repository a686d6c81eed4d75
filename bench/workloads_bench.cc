// Capacity-simulator throughput on the real Mooncake conversation trace (12,031 requests, one
// hour of traffic): the planner must answer in well under a second per KV config.
#include <benchmark/benchmark.h>

#include <fstream>
#include <string>

#include "workloads/presets.h"
#include "workloads/profile.h"
#include "workloads/simulator.h"
#include "workloads/trace.h"

namespace {

namespace wl = kvgate::workloads;

const std::string kMooncake = std::string(KVGATE_SOURCE_DIR) + "/../shared/traces/mooncake_conversation_trace.jsonl";

const wl::Trace* mooncake() {
  static const wl::Trace* trace = [] {
    if (!std::ifstream(kMooncake).good()) return static_cast<wl::Trace*>(nullptr);
    return new wl::Trace(wl::load_trace(kMooncake));
  }();
  return trace;
}

void BM_LoadMooncake(benchmark::State& state) {
  if (!std::ifstream(kMooncake).good()) return state.SkipWithError("trace not found next to the repository");
  for (auto _ : state) benchmark::DoNotOptimize(wl::load_trace(kMooncake));
  state.counters["requests/s"] = benchmark::Counter(12031.0 * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LoadMooncake)->Unit(benchmark::kMillisecond);

void BM_ProfileMooncake(benchmark::State& state) {
  const wl::Trace* t = mooncake();
  if (!t) return state.SkipWithError("trace not found next to the repository");
  for (auto _ : state) benchmark::DoNotOptimize(wl::profile_trace(*t));
  state.counters["requests/s"] =
      benchmark::Counter(static_cast<double>(t->requests.size()) * state.iterations(), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ProfileMooncake)->Unit(benchmark::kMillisecond);

// Arg: KV bytes per KV head per token at head_dim 128 (f16 512, fp8 256, tq4/4 134).
// Arg 2: GPU memory in GB; H200 (141) and a smaller card, which makes the cache evict.
void BM_SimulateMooncake(benchmark::State& state) {
  const wl::Trace* t = mooncake();
  if (!t) return state.SkipWithError("trace not found next to the repository");
  const wl::ModelShape model = wl::find_model_preset("Llama-3.1-8B");
  wl::GpuSpec gpu = wl::find_gpu_preset("H200");
  gpu.mem_bytes = static_cast<double>(state.range(1)) * 1e9;
  const wl::KvCandidate kv{"bench", static_cast<double>(state.range(0)) * model.n_layers * model.n_kv_heads, 0, 1.0};
  uint64_t steps = 0;
  for (auto _ : state) {
    const wl::SimResult r = wl::simulate_capacity(*t, model, gpu, kv, wl::SimOptions{});
    steps = r.steps;
    benchmark::DoNotOptimize(r.hit_rate);
  }
  state.counters["requests/s"] =
      benchmark::Counter(static_cast<double>(t->requests.size()) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["steps"] = static_cast<double>(steps);
}
BENCHMARK(BM_SimulateMooncake)
    ->Args({512, 141})
    ->Args({256, 141})
    ->Args({134, 141})
    ->Args({256, 45})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
