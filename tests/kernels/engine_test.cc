// Engine arithmetic (kernels/arithmetic.h): the spec's @engine=, which kernel each engine runs for a
// key/value pair and batch, the query roundings against ggml's quantizers, and the engine
// attention path against a float64 reference that applies the same roundings.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/attention_arithmetic.h"
#include "kernels/ggml_blocks.h"
#include "kernels/kv_config.h"
#include "kernels/paged_kv_cache.h"

namespace kvgate::kernels {
namespace {

constexpr int kHeads = 9, kKvHeads = 3, kHeadDim = 64, kPageTokens = 32;

std::vector<float> gaussian(size_t n, uint64_t seed, double sigma = 1.0) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(rng.normal() * sigma);
  return x;
}

std::string engine_error(const std::string& spec) {
  try {
    parse_kv_config(spec);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << spec << " parsed";
  return {};
}

AttentionArithmetic arithmetic_of(const std::string& spec, int64_t n_queries, int head_dim = 64) {
  const KvConfig c = parse_kv_config(spec);
  return resolve_arithmetic(c.arithmetic, *c.key.format, *c.value.format, n_queries, head_dim, c.key.options.scale);
}

TEST(EngineSpec, NamesAndRefusals) {
  EXPECT_EQ(parse_kv_config("q8_0@engine=llama.cpp").arithmetic, Engine::llama_cpp);
  EXPECT_EQ(parse_kv_config("q4_1@engine=llama.cpp-cuda").arithmetic, Engine::llama_cpp_cuda);
  EXPECT_EQ(parse_kv_config("fp8@engine=vllm-fa3@keep=2").arithmetic, Engine::vllm_fa3);
  EXPECT_EQ(parse_kv_config("q8_0@engine=exact"), parse_kv_config("q8_0"));
  EXPECT_NE(engine_error("q8_0@engine=vllm").find("engines: exact, llama.cpp, llama.cpp-cuda, vllm-fa3"),
            std::string::npos);
  EXPECT_NE(engine_error("q8_0@engine=llama.cpp@engine=exact").find("engine= given twice"), std::string::npos);
  EXPECT_NE(engine_error("mxfp4@engine=llama.cpp").find("llama.cpp has no cache type mxfp4"), std::string::npos);
  EXPECT_NE(engine_error("q8_0@0=fp8@engine=llama.cpp").find("no cache type fp8_e4m3"), std::string::npos);
  EXPECT_NE(engine_error("q4_0@engine=vllm-fa3").find("not q4_0"), std::string::npos);
  EXPECT_NE(engine_error("fp8/f16@engine=vllm-fa3").find("one --kv-cache-dtype"), std::string::npos);
}

TEST(EngineArithmetic, LlamaCppCpuFollowsGgmlsKernelChoice) {
  // One-row kernel: Q to K's vec_dot_type, unscaled; max and sum key by key; f16 V in f16.
  const AttentionArithmetic q8 = arithmetic_of("q8_0@engine=llama.cpp", 256);
  EXPECT_EQ(q8.query, QueryRounding::q8_0);
  EXPECT_FALSE(q8.query_prescaled);
  EXPECT_TRUE(q8.per_key_softmax);
  EXPECT_FALSE(q8.f16_accumulator);
  for (const char* s : {"q4_0", "q5_0", "iq4_nl"}) EXPECT_EQ(arithmetic_of(std::string(s) + "@engine=llama.cpp", 1).query, QueryRounding::q8_0) << s;
  for (const char* s : {"q4_1", "q5_1"}) EXPECT_EQ(arithmetic_of(std::string(s) + "@engine=llama.cpp", 1).query, QueryRounding::q8_1) << s;
  EXPECT_TRUE(arithmetic_of("q8_0/f16@engine=llama.cpp", 256).f16_accumulator);
  // f16/f16: the tiled kernel (f32 throughout) from 64 query rows, the one-row kernel below.
  EXPECT_TRUE(arithmetic_of("f16@engine=llama.cpp", 64).exact());
  const AttentionArithmetic decode = arithmetic_of("f16@engine=llama.cpp", 1);
  EXPECT_EQ(decode.query, QueryRounding::f16);
  EXPECT_TRUE(decode.f16_accumulator);
  EXPECT_FALSE(arithmetic_of("f16@engine=llama.cpp", 63).exact());
}

TEST(EngineArithmetic, LlamaCppCudaVectorKernelForDecodeMmaOtherwise) {
  const AttentionArithmetic vec = arithmetic_of("q4_0@engine=llama.cpp-cuda", 2);
  EXPECT_EQ(vec.query, QueryRounding::q8_1_cuda);  // q8_1 for every quantized key, q8_0 ones too
  EXPECT_TRUE(vec.query_prescaled);
  EXPECT_EQ(vec.weights, WeightRounding::none);
  const AttentionArithmetic mma = arithmetic_of("q4_0@engine=llama.cpp-cuda", 3);
  EXPECT_EQ(mma.query, QueryRounding::f16);
  EXPECT_TRUE(mma.key_to_f16 && mma.value_to_f16);
  EXPECT_EQ(mma.weights, WeightRounding::f16);
  EXPECT_EQ(arithmetic_of("iq4_nl@engine=llama.cpp-cuda", 1).query, QueryRounding::f16);  // no vector instance
  EXPECT_EQ(arithmetic_of("q8_0@engine=llama.cpp-cuda", 1, 96).query, QueryRounding::f16);  // head_dim % 64
  EXPECT_EQ(arithmetic_of("f16@engine=llama.cpp-cuda", 2).query, QueryRounding::f16);  // f16 pairs: 1 row only
  EXPECT_EQ(arithmetic_of("f16@engine=llama.cpp-cuda", 1).query, QueryRounding::none);
}

TEST(EngineArithmetic, VllmFa3QuantizesTheQueryOfFp8CachesOnly) {
  const AttentionArithmetic a = arithmetic_of("fp8:scale=0.5@engine=vllm-fa3", 7);
  EXPECT_EQ(a.query, QueryRounding::fp8_e4m3);
  EXPECT_EQ(a.query_scale, 0.5f);  // q_scale falls back to k_scale
  EXPECT_EQ(a.weights, WeightRounding::fp8_e4m3_256);
  EXPECT_TRUE(arithmetic_of("f16@engine=vllm-fa3", 7).exact());
  EXPECT_TRUE(arithmetic_of("q8_0", 7).exact());
}

TEST(QueryRounding, UsesGgmlsX86Quantizers) {
  AttentionArithmetic a;
  a.query = QueryRounding::q8_0;
  // amax 127 makes id = 1: x86 rounds the ties 2.5 and -4.5 to even, ggml's reference away from 0.
  std::vector<float> x(32, 0.0f), y(32);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -4.5f;
  x[3] = 0.75f;
  round_query(a, x.data(), y.data(), 32);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[2], -4.0f);
  EXPECT_EQ(y[3], 1.0f);
  uint8_t ref[ggml::Q8_0::kBytes];
  ggml::Q8_0::quantize(x.data(), ref);
  EXPECT_EQ(ggml::Q8_0::element(ref, 1), 3.0f);
  // Gaussian queries: exactly the dequantized x86 blocks, for q8_0 and q8_1 alike.
  const std::vector<float> q = gaussian(128, 7);
  std::vector<float> got(128), want(128);
  for (QueryRounding r : {QueryRounding::q8_0, QueryRounding::q8_1}) {
    a.query = r;
    round_query(a, q.data(), got.data(), 128);
    for (int b = 0; b < 4; ++b) {
      uint8_t block[ggml::Q8_1::kBytes];
      ggml::Q8_0::quantize_x86(q.data() + 32 * b, block);
      ggml::Q8_0::dequantize(block, want.data() + 32 * b);
    }
    EXPECT_EQ(got, want);
  }
  uint8_t b1[ggml::Q8_1::kBytes];
  ggml::Q8_1::quantize_x86(q.data(), b1);
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += static_cast<int8_t>(b1[4 + j]);
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(q[static_cast<size_t>(j)]));
  EXPECT_EQ(ggml::Q8_1::sum(b1), f16_to_f32(f32_to_f16(amax / 127.0f * static_cast<float>(sum))));
  // CUDA's q8_1 keeps an f32 scale: values are integers times amax / 127 exactly as f32.
  a.query = QueryRounding::q8_1_cuda;
  round_query(a, q.data(), got.data(), 32);
  for (int j = 0; j < 32; ++j) {
    const float d = amax / 127.0f;
    EXPECT_EQ(got[static_cast<size_t>(j)], std::round(q[static_cast<size_t>(j)] / d) * d) << j;
  }
  // FP8: e4m3 of q / q_scale, saturating at 448.
  a.query = QueryRounding::fp8_e4m3;
  a.query_scale = 0.25f;
  const float big[4] = {1000.0f, 0.3f, -0.013f, 0.0f};
  float r[4];
  round_query(a, big, r, 4);
  EXPECT_EQ(r[0], 448.0f * 0.25f);
  EXPECT_EQ(r[1], fp8_to_f32(f32_to_fp8(0.3f / 0.25f, Fp8Kind::e4m3fn), Fp8Kind::e4m3fn) * 0.25f);
  EXPECT_EQ(r[3], 0.0f);
}

// One layer's cache filled with `len` tokens of Gaussian K/V, queries for the last n positions.
struct Fixture {
  PagedKvCache cache;
  SeqId seq;
  std::vector<float> k, v, q;
  Fixture(const std::string& spec, int64_t len, int64_t n)
      : cache(parse_kv_config(spec), 1, {kKvHeads, kHeadDim, kPageTokens, (len + kPageTokens - 1) / kPageTokens + 1}),
        seq(cache.create_sequence()),
        k(gaussian(static_cast<size_t>(len) * kKvHeads * kHeadDim, 11, 1.0)),
        v(gaussian(static_cast<size_t>(len) * kKvHeads * kHeadDim, 12)),
        q(gaussian(static_cast<size_t>(n) * kHeads * kHeadDim, 13, 1.0)) {
    cache.append(seq, 0, k.data(), v.data(), len);
  }
  std::vector<float> attend(int64_t n, ThreadPool* pool = nullptr) {
    std::vector<float> out(static_cast<size_t>(n) * kHeads * kHeadDim);
    paged_attention(cache, seq, 0, {kHeads}, q.data(), n, out.data(), pool);
    return out;
  }
};

// Float64 attention over the cache as stored, with the query rounded per `a` in the key codec's
// basis (the engines dot rotated queries with rotated keys) and f32-exact otherwise.
std::vector<double> rounded_reference(const PagedKvCache& cache, SeqId seq, const std::vector<float>& q, int64_t n,
                                      const AttentionArithmetic& a) {
  const KvLayerView view = cache.view(seq, 0);
  const Codec& kc = *view.key.codec;
  const Codec& vc = *view.value.codec;
  const int D = kHeadDim, group = kHeads / kKvHeads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<double> out(static_cast<size_t>(n) * kHeads * D, 0.0);
  std::vector<float> qr(static_cast<size_t>(D)), row(static_cast<size_t>(D));
  for (int64_t qi = 0; qi < n; ++qi)
    for (int head = 0; head < kHeads; ++head) {
      const int kvh = head / group;
      kc.prepare_query(&q[(static_cast<size_t>(qi) * kHeads + head) * D], qr.data());
      round_query(a, qr.data(), qr.data(), D);
      const int64_t pos = view.length - n + qi;
      std::vector<double> p(static_cast<size_t>(pos + 1));
      double mx = -INFINITY, denom = 0.0;
      for (int64_t t = 0; t <= pos; ++t) {
        kc.dequantize_stored_ref(view.key.group_at(kvh, t, kPageTokens), row.data());
        double s = 0.0;
        for (int i = 0; i < D; ++i) s += static_cast<double>(qr[static_cast<size_t>(i)]) * row[static_cast<size_t>(i)];
        p[static_cast<size_t>(t)] = s * scale;
        mx = std::max(mx, p[static_cast<size_t>(t)]);
      }
      for (double& x : p) denom += (x = std::exp(x - mx));
      double* o = &out[(static_cast<size_t>(qi) * kHeads + head) * D];
      for (int64_t t = 0; t <= pos; ++t) {
        vc.dequantize_ref(view.value.group_at(kvh, t, kPageTokens), row.data());
        for (int i = 0; i < D; ++i) o[i] += p[static_cast<size_t>(t)] / denom * row[static_cast<size_t>(i)];
      }
    }
  return out;
}

double rms_diff(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0.0, r = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    e += (got[i] - want[i]) * (got[i] - want[i]);
    r += want[i] * want[i];
  }
  return std::sqrt(e / r);
}

TEST(EngineAttention, LlamaCppRoundsTheQueryAsItsCpuKernelDoes) {
  ThreadPool pool(2);
  for (const char* spec : {"q8_0@engine=llama.cpp", "q4_1:rot=none@engine=llama.cpp", "q4_0@engine=llama.cpp"}) {
    SCOPED_TRACE(spec);
    const int64_t len = 150, n = 40;
    Fixture fx(spec, len, n);
    const std::vector<float> got = fx.attend(n, &pool);
    const KvConfig c = parse_kv_config(spec);
    const AttentionArithmetic a = resolve_arithmetic(c.arithmetic, *c.key.format, *c.value.format, n, kHeadDim);
    AttentionArithmetic exact;
    const double to_rounded = rms_diff(got, rounded_reference(fx.cache, fx.seq, fx.q, n, a));
    const double to_exact = rms_diff(got, rounded_reference(fx.cache, fx.seq, fx.q, n, exact));
    EXPECT_LT(to_rounded, 2e-6);                // the same arithmetic up to f32 sums
    EXPECT_GT(to_exact, 20 * to_rounded);       // and visibly not the f32 query's
    EXPECT_EQ(got, fx.attend(n, nullptr));      // deterministic across thread counts
  }
}

TEST(EngineAttention, F16ValuesAccumulateInF16UnderLlamaCpp) {
  const int64_t len = 300, n = 1;
  Fixture rounded("q8_0/f16@engine=llama.cpp", len, n);
  Fixture plain("q8_0/f16", len, n);
  const KvConfig c = parse_kv_config("q8_0/f16@engine=llama.cpp");
  AttentionArithmetic query_only = resolve_arithmetic(c.arithmetic, *c.key.format, *c.value.format, n, kHeadDim);
  const std::vector<double> ref = rounded_reference(rounded.cache, rounded.seq, rounded.q, n, query_only);
  const std::vector<float> got = rounded.attend(n);
  // The f16 accumulator costs more than f32 rounding but stays within a few f16 ulps.
  const double err = rms_diff(got, ref);
  EXPECT_GT(err, 1e-5);
  EXPECT_LT(err, 3e-3);
  EXPECT_NE(got, plain.attend(n));
}

TEST(EngineAttention, TiledLlamaCppAndExactEnginesTakeTheFastPathBitForBit) {
  Fixture tiled("f16@engine=llama.cpp", 200, 64), plain("f16", 200, 64);
  EXPECT_EQ(tiled.attend(64), plain.attend(64));
  Fixture fa3_f16("f16@engine=vllm-fa3", 90, 5), f16("f16", 90, 5);
  EXPECT_EQ(fa3_f16.attend(5), f16.attend(5));
}

TEST(EngineAttention, CudaAndFa3RoundingsStayCloseToExact) {
  for (const char* spec : {"q4_0@engine=llama.cpp-cuda", "iq4_nl:rot=none@engine=llama.cpp-cuda", "fp8@engine=vllm-fa3"}) {
    for (int64_t n : {1, 20}) {
      SCOPED_TRACE(std::string(spec) + " n " + std::to_string(n));
      Fixture fx(spec, 130, n);
      const std::vector<float> got = fx.attend(n);
      AttentionArithmetic exact;
      const double err = rms_diff(got, rounded_reference(fx.cache, fx.seq, fx.q, n, exact));
      EXPECT_GT(err, 1e-6);  // something was rounded
      EXPECT_LT(err, 0.05);
    }
  }
}

}  // namespace
}  // namespace kvgate::kernels
