// Decode-time key scoring for the TurboQuant and KIVI formats: Codec::dot_rows over a 4096-token
// head, reported as compressed bytes read per second, next to a memcpy of the same bytes (the
// bound a bandwidth-limited kernel can approach) and to f16 keys.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/kv_format.h"

namespace {

using kvgate::kernels::Codec;
using kvgate::kernels::make_codec;

constexpr int kHeadDim = 128;
constexpr int kTokens = 4096;

struct Encoded {
  std::unique_ptr<Codec> codec;
  std::vector<uint8_t> keys;
  std::vector<float> query;
};

Encoded encode(const std::string& name) {
  Encoded e{make_codec(name, kHeadDim), {}, std::vector<float>(kHeadDim)};
  kvgate::Rng rng(1);
  std::vector<float> x(static_cast<size_t>(kTokens) * kHeadDim);
  for (float& v : x) v = static_cast<float>(rng.normal());
  const int g = e.codec->token_group();
  e.keys.resize(static_cast<size_t>(kTokens / g) * e.codec->group_bytes());
  for (int t = 0; t < kTokens / g; ++t)
    e.codec->quantize(x.data() + static_cast<size_t>(t) * g * kHeadDim, e.keys.data() + t * e.codec->group_bytes());
  std::vector<float> q(kHeadDim);
  for (float& v : q) v = static_cast<float>(rng.normal());
  e.codec->prepare_query(q.data(), e.query.data());
  return e;
}

void BM_DotRows(benchmark::State& state, std::string name) {
  const Encoded e = encode(name);
  std::vector<float> scores(kTokens);
  for (auto _ : state) {
    e.codec->dot_rows(e.query.data(), 1, e.keys.data(), kTokens, scores.data());
    benchmark::DoNotOptimize(scores.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * e.keys.size());
  state.counters["bits/elem"] = e.codec->bits_per_element();
}

void BM_CopyBound(benchmark::State& state, std::string name) {
  const Encoded e = encode(name);
  std::vector<uint8_t> dst(e.keys.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), e.keys.data(), e.keys.size());
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * e.keys.size());
}

void BM_Quantize(benchmark::State& state, std::string name) {
  auto codec = make_codec(name, kHeadDim);
  const int g = codec->token_group();
  kvgate::Rng rng(2);
  std::vector<float> x(static_cast<size_t>(g) * kHeadDim);
  for (float& v : x) v = static_cast<float>(rng.normal());
  std::vector<uint8_t> dst(codec->group_bytes());
  for (auto _ : state) {
    codec->quantize(x.data(), dst.data());
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * x.size() * sizeof(float));
}

}  // namespace

BENCHMARK_CAPTURE(BM_DotRows, f16, std::string("f16"));
BENCHMARK_CAPTURE(BM_DotRows, tq4, std::string("tq4"));
BENCHMARK_CAPTURE(BM_DotRows, tq3, std::string("tq3"));
BENCHMARK_CAPTURE(BM_DotRows, tq2, std::string("tq2"));
BENCHMARK_CAPTURE(BM_DotRows, tqprod3, std::string("tqprod3"));
BENCHMARK_CAPTURE(BM_DotRows, kivi2_k, std::string("kivi2_k"));
BENCHMARK_CAPTURE(BM_CopyBound, tq4, std::string("tq4"));
BENCHMARK_CAPTURE(BM_Quantize, tq4, std::string("tq4"));
BENCHMARK_CAPTURE(BM_Quantize, tqprod3, std::string("tqprod3"));
BENCHMARK_CAPTURE(BM_Quantize, kivi2_k, std::string("kivi2_k"));
BENCHMARK_CAPTURE(BM_Quantize, kivi2_v, std::string("kivi2_v"));

BENCHMARK_MAIN();
