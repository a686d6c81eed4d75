// Fused decode paths of every registry format in isolation: Codec::dot_rows (one query against
// every key) and Codec::axpy_rows (every value into one accumulator) over 64 MiB of stored rows
// at head_dim 128, so they stream from DRAM. Throughput is in stored bytes read per CPU second;
// the bound is memcpy of the same 64 MiB in the same run (bytes copied per CPU second). CPU
// time, not wall time, because build machines are shared.
// The page kernels (one page, query rows in registers, data in L1) are compute-bound instead;
// their bound is the FMA ports' peak, `peak/fma512` (and `peak/fma256`): FMA instructions per
// CPU second of twelve independent chains, enough to fill both ports through their latency;
// `floor/dot/q4_0/128/4` and `floor/axpy/q4_0/128/4` time the q4_0 page kernels' instruction
// mix without their bookkeeping (see floor_dot_page).
//   build/bench/fused_rows_bench --benchmark_min_time=0.3
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/kv_format.h"
#include "kernels/simd_avx512_pairs.h"

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

// floor_dot_page, floor_axpy_page: floors for the q4_0 page kernels (page/dot/q4_0/128/4,
// page/axpy/q4_0/128/4). The same instruction mix per page -- the same decodes, FMAs in the
// same chains, the same reduction -- as flat loops over one 32-token page with four query
// rows, without the drivers' bookkeeping (block scales, weight factors, pointers, odd rows and
// tails). Not a result anyone can use: a measure of how far the real kernels are from what
// their arithmetic allows on this CPU.
constexpr int kFloorTokens = 32, kFloorBlocks = kHeadDim / 32, kFloorBlockBytes = 18;

struct FloorPage {
  std::vector<uint8_t> blocks;  // q4_0 rows: [token][block] of (f16 d, 16 bytes of nibbles)
  std::vector<float> d;         // [token][block] the block scales as floats
  std::vector<float> q_pairs;   // two row pairs, interleaved by 8 floats (the pair dot's layout)
  std::vector<float> weights;   // [row][token][block] weight * block scale (the rows axpy's)
  FloorPage() {
    const auto codec = kn::make_codec(*kn::find_format("q4_0"), kHeadDim);
    kvgate::Rng rng(3);
    std::vector<float> x(kHeadDim);
    blocks.resize(static_cast<size_t>(kFloorTokens) * kFloorBlocks * kFloorBlockBytes);
    for (int t = 0; t < kFloorTokens; ++t) {
      for (float& v : x) v = static_cast<float>(rng.normal());
      codec->quantize(x.data(), blocks.data() + static_cast<size_t>(t) * kFloorBlocks * kFloorBlockBytes);
    }
    for (size_t b = 0; b < blocks.size() / kFloorBlockBytes; ++b) {
      const uint8_t* block = blocks.data() + b * kFloorBlockBytes;
      d.push_back(kvgate::f16_to_f32(static_cast<uint16_t>(block[0] | block[1] << 8)));
    }
    for (int i = 0; i < 4 * kHeadDim; ++i) q_pairs.push_back(static_cast<float>(rng.normal()));
    for (int i = 0; i < 4 * kFloorTokens * kFloorBlocks; ++i) weights.push_back(static_cast<float>(1e-3 * rng.normal()));
  }
};

// GCC 12's 512-bit casts and broadcasts start from _mm512_undefined_*, which its uninitialized
// warnings flag wherever they are inlined (as in kernels/simd_avx512_pairs.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
KVGATE_AVX512 void floor_dot_page(const FloorPage& page, float* tile, float* scores) {
  namespace a5 = kn::simd::avx512;
  const __m512 table = a5::table16(a5::kNibblesMinus8);
  constexpr int kStride = kHeadDim + 16;
  for (int t0 = 0; t0 < kFloorTokens; t0 += 4) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
#pragma GCC unroll 4
      for (int b = 0; b < kFloorBlocks; ++b) {
        __m512 v[2];
        a5::lookup_nibbles32(page.blocks.data() + ((t0 + i) * kFloorBlocks + b) * kFloorBlockBytes + 2, table, v);
        _mm512_store_ps(tile + i * kStride + b * 32, v[0]);
        _mm512_store_ps(tile + i * kStride + b * 32 + 16, v[1]);
      }
    __m512 acc[2][4];
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p)
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) acc[p][i] = _mm512_setzero_ps();
    for (int b = 0; b < kFloorBlocks; ++b) {
      __m512 qv[2][4];
#pragma GCC unroll 8
      for (int p = 0; p < 2; ++p)
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) qv[p][k] = _mm512_loadu_ps(page.q_pairs.data() + p * 2 * kHeadDim + 2 * (b * 32 + 8 * k));
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i)
#pragma GCC unroll 2
        for (int p = 0; p < 2; ++p) {
          const float* v = tile + i * kStride + b * 32;
          __m512 sum = _mm512_mul_ps(a5::both(v), qv[p][0]);
#pragma GCC unroll 4
          for (int k = 1; k < 4; ++k) sum = _mm512_fmadd_ps(a5::both(v + 8 * k), qv[p][k], sum);
          acc[p][i] = _mm512_fmadd_ps(sum, _mm512_set1_ps(page.d[(t0 + i) * kFloorBlocks + b]), acc[p][i]);
        }
    }
#pragma GCC unroll 2
    for (int p = 0; p < 2; ++p) {
      __m128 sums[1][2];
      a5::hsum_tiles_pair<1>(acc[p], sums);
      _mm_storeu_ps(scores + (2 * p) * kFloorTokens + t0, sums[0][0]);
      _mm_storeu_ps(scores + (2 * p + 1) * kFloorTokens + t0, sums[0][1]);
    }
  }
}

KVGATE_AVX512 void floor_axpy_page(const FloorPage& page, float* acc) {
  namespace a5 = kn::simd::avx512;
  const __m512 table = a5::table16(a5::kNibblesMinus8);
  for (int b0 = 0; b0 < kFloorBlocks; b0 += 2) {  // two blocks (64 elements) per pass, as kRowsGroup
    __m512 s[4][2][2];
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 2
      for (int j = 0; j < 2; ++j)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) s[r][j][h] = _mm512_loadu_ps(acc + r * kHeadDim + (b0 + j) * 32 + 16 * h);
    for (int t = 0; t < kFloorTokens; ++t)
#pragma GCC unroll 2
      for (int j = 0; j < 2; ++j) {
        __m512 x[2];
        a5::lookup_nibbles32(page.blocks.data() + (t * kFloorBlocks + b0 + j) * kFloorBlockBytes + 2, table, x);
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          const __m512 w = _mm512_set1_ps(page.weights[(r * kFloorTokens + t) * kFloorBlocks + b0 + j]);
          s[r][j][0] = _mm512_fmadd_ps(x[0], w, s[r][j][0]);
          s[r][j][1] = _mm512_fmadd_ps(x[1], w, s[r][j][1]);
        }
      }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 2
      for (int j = 0; j < 2; ++j)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) _mm512_storeu_ps(acc + r * kHeadDim + (b0 + j) * 32 + 16 * h, s[r][j][h]);
  }
}

#pragma GCC diagnostic pop

void BM_floor(benchmark::State& state, bool dot) {
  const FloorPage page;
  alignas(64) static float tile[4 * (kHeadDim + 16)];
  std::vector<float> out(4 * kHeadDim, 0.0f);
  for (auto _ : state) {
    if (dot)
      floor_dot_page(page, tile, out.data());
    else
      floor_axpy_page(page, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 4 * kFloorTokens);
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
  if (kvgate::cpu_features().avx512) benchmark::RegisterBenchmark("peak/fma512", BM_fma512);
  if (kvgate::cpu_has_avx2_fma_f16c()) benchmark::RegisterBenchmark("peak/fma256", BM_fma256);
  if (kvgate::cpu_has_avx512()) {
    benchmark::RegisterBenchmark("floor/dot/q4_0/128/4", BM_floor, true);
    benchmark::RegisterBenchmark("floor/axpy/q4_0/128/4", BM_floor, false);
  }
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
