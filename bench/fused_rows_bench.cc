// Fused decode paths of every registry format in isolation: Codec::dot_rows (one query against
// every key) and Codec::axpy_rows (every value into one accumulator) over 64 MiB of stored rows
// at head_dim 128, so they stream from DRAM. Throughput is in stored bytes read per CPU second;
// the bound is memcpy of the same 64 MiB in the same run (bytes copied per CPU second). CPU
// time, not wall time, because build machines are shared.
// The page kernels (one page, query rows in registers, data in L1) are compute-bound instead;
// their bound is the FMA ports' peak, `peak/fma512` (and `peak/fma256`): FMA instructions per
// CPU second of twelve independent chains, enough to fill both ports through their latency.
//   build/bench/fused_rows_bench --benchmark_min_time=0.3
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu_features.h"
#include "kernels/kv_format.h"

namespace {

namespace kn = kvgate::kernels;

constexpr size_t kBytes = size_t{64} << 20;
constexpr int kHeadDim = 128;

void BM_copy(benchmark::State& state) {
  std::vector<uint8_t> src(kBytes, 1), dst(kBytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kBytes);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

// Twelve chains of dependent FMAs, each iteration sixteen FMAs per chain; the chains' values are
// kept observable so none of the arithmetic can be dropped. A macro rather than a template:
// vector types in a template's signature outside a target attribute change the ABI (-Wpsabi).
#define KVGATE_FMA_CHAINS(SET1, FMA)                                                   \
  constexpr int kChains = 12, kUnroll = 16;                                            \
  decltype(SET1(0.0f)) a[kChains];                                                     \
  for (int i = 0; i < kChains; ++i) a[i] = SET1(1.0f + 1e-3f * static_cast<float>(i)); \
  const auto m = SET1(0.999999f), c = SET1(1e-7f);                                     \
  for (auto _ : state) {                                                               \
    _Pragma("GCC unroll 16") for (int u = 0; u < kUnroll; ++u)                         \
        _Pragma("GCC unroll 12") for (int i = 0; i < kChains; ++i) a[i] = FMA(a[i], m, c); \
  }                                                                                    \
  for (int i = 0; i < kChains; ++i) benchmark::DoNotOptimize(a[i]);                    \
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * kChains * kUnroll)

__attribute__((target("avx512f"))) void BM_fma512(benchmark::State& state) {
  KVGATE_FMA_CHAINS(_mm512_set1_ps, _mm512_fmadd_ps);
}
__attribute__((target("avx2,fma"))) void BM_fma256(benchmark::State& state) {
  KVGATE_FMA_CHAINS(_mm256_set1_ps, _mm256_fmadd_ps);
}

struct Rows {
  std::unique_ptr<kn::Codec> codec;
  int tokens = 0;
  std::vector<uint8_t> bytes;
};

// 1024 distinct quantized groups tiled over 64 MiB: the data is realistic and the setup stays
// fast even for formats whose quantize costs microseconds per token.
Rows make_rows(const kn::FormatInfo& f) {
  constexpr int kDistinct = 1024;
  Rows r;
  r.codec = kn::make_codec(f, kHeadDim);
  const int g = r.codec->token_group();
  const size_t gb = r.codec->group_bytes();
  const int groups = static_cast<int>(kBytes / gb);
  r.tokens = groups * g;
  r.bytes.resize(static_cast<size_t>(groups) * gb);
  kvgate::Rng rng(1);
  std::vector<float> x(static_cast<size_t>(g) * kHeadDim);
  for (int i = 0; i < kDistinct && i < groups; ++i) {
    for (float& v : x) v = static_cast<float>(rng.normal());
    r.codec->quantize(x.data(), r.bytes.data() + static_cast<size_t>(i) * gb);
  }
  for (int i = kDistinct; i < groups; ++i)
    std::memcpy(r.bytes.data() + static_cast<size_t>(i) * gb, r.bytes.data() + static_cast<size_t>(i % kDistinct) * gb, gb);
  return r;
}

void BM_dot_rows(benchmark::State& state, const kn::FormatInfo* f) {
  const Rows r = make_rows(*f);
  std::vector<float> q(kHeadDim, 0.5f), qp(kHeadDim), scores(r.tokens);
  r.codec->prepare_query(q.data(), qp.data());
  for (auto _ : state) {
    r.codec->dot_rows(qp.data(), 1, r.bytes.data(), r.tokens, scores.data());
    benchmark::DoNotOptimize(scores.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * r.bytes.size()));
}

void BM_axpy_rows(benchmark::State& state, const kn::FormatInfo* f) {
  const Rows r = make_rows(*f);
  std::vector<float> w(r.tokens, 1e-3f), acc(kHeadDim, 0.0f);
  for (auto _ : state) {
    r.codec->axpy_rows(w.data(), 1, r.bytes.data(), r.tokens, acc.data());
    benchmark::DoNotOptimize(acc.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * r.bytes.size()));
}

// One 32-token page, head_dim from the benchmark's argument, n_q query rows per call.
void BM_page(benchmark::State& state, const kn::FormatInfo* f, bool dot) {
  const int head_dim = static_cast<int>(state.range(0)), n_q = static_cast<int>(state.range(1)), tokens = 32;
  const auto codec = kn::make_codec(*f, head_dim);
  const int g = codec->token_group();
  const int groups = (tokens + g - 1) / g;
  std::vector<uint8_t> bytes(static_cast<size_t>(groups) * codec->group_bytes());
  kvgate::Rng rng(2);
  std::vector<float> x(static_cast<size_t>(g) * head_dim);
  for (int i = 0; i < groups; ++i) {
    for (float& v : x) v = static_cast<float>(rng.normal());
    codec->quantize(x.data(), bytes.data() + static_cast<size_t>(i) * codec->group_bytes());
  }
  std::vector<float> q(static_cast<size_t>(n_q) * head_dim), qp(q.size()), weights(static_cast<size_t>(n_q) * tokens, 1e-3f);
  for (float& v : q) v = static_cast<float>(rng.normal());
  for (int i = 0; i < n_q; ++i) codec->prepare_query(q.data() + i * head_dim, qp.data() + i * head_dim);
  std::vector<float> out(static_cast<size_t>(n_q) * std::max(tokens, head_dim), 0.0f);
  for (auto _ : state) {
    if (dot)
      codec->dot_rows(qp.data(), n_q, bytes.data(), tokens, out.data());
    else
      codec->axpy_rows(weights.data(), n_q, bytes.data(), tokens, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * n_q * tokens);
}

// KIVI-style formats keep a residual window the fused row paths do not see; they are measured
// by kernels_bench's attention benchmarks instead.
const int registered = [] {
  benchmark::RegisterBenchmark("copy", BM_copy);
  if (kn::cpu_features().avx512) benchmark::RegisterBenchmark("peak/fma512", BM_fma512);
  if (kn::cpu_has_avx2_fma_f16c()) benchmark::RegisterBenchmark("peak/fma256", BM_fma256);
  for (const kn::FormatInfo* f : kn::all_formats()) {
    if (kn::make_codec(*f, kHeadDim)->residual_tokens() > 0) continue;
    if (f->for_keys) benchmark::RegisterBenchmark(("dot_rows/" + std::string(f->name)).c_str(), BM_dot_rows, f);
    if (f->for_values) benchmark::RegisterBenchmark(("axpy_rows/" + std::string(f->name)).c_str(), BM_axpy_rows, f);
  }
  for (const kn::FormatInfo* f : kn::all_formats()) {
    if (kn::make_codec(*f, kHeadDim)->residual_tokens() > 0) continue;
    for (bool dot : {true, false}) {
      if (dot ? !f->for_keys : !f->for_values) continue;
      benchmark::RegisterBenchmark(((dot ? "page/dot/" : "page/axpy/") + std::string(f->name)).c_str(), BM_page, f, dot)
          ->ArgsProduct({{64, 128}, {4, 48}});
    }
  }
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
