// The GPU's engine attention (kernels/gpu/gpu_attention_arithmetic.cu) against the CPU's
// (kernels/attention_arithmetic.cc, through kernels::paged_attention) on the same cache contents,
// per engine and KV format, for decode steps, the CUDA vector kernel's two rows and a prefill
// chunk. Both round with kernels/arithmetic_rounding.h (checked bit for bit on the host by
// tests/kernels/arithmetic_rounding_test.cc), so they must agree to float rounding: far closer to
// each other than the engine's arithmetic is to exact attention. Skips without a device; the
// shape checks at the end run without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/gpu/gpu_convert.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/tq_params.h"
#include "kernels/kv_config.h"
#include "kernels/kv_format.h"
#include "kernels/paged_kv_cache.h"

namespace kvgate::kernels::gpu {
namespace {

constexpr int kKvHeads = 2, kGroup = 3, kHeads = kKvHeads * kGroup, kHeadDim = 64, kTokens = 301;
// Not the model's 32: the tile kernels' softmax works per page, so both backends must use the
// cache's own page size.
constexpr int kPageTokens = 16;

// The GPU side of a config side, as runtime/gpu_model.cc builds it: the format, its scale, and
// the rotation of a rotated ggml format (none where llama.cpp's rot=wht skips the head_dim).
KvSideFormat side_of(const FormatSpec& spec, int head_dim) {
  KvSideFormat side{spec.format->id, spec.options.scale, std::nullopt};
  if (spec.options.rotation != Rotation::none) side.rotation = make_rotation_params(head_dim, spec.options);
  return side;
}

PagedKvShape shape_of(const KvConfig& config) {
  PagedKvShape shape;
  shape.head_dim = kHeadDim;
  shape.n_kv_heads = kKvHeads;
  shape.page_tokens = kPageTokens;
  shape.key = side_of(config.key, kHeadDim);
  shape.value = side_of(config.value, kHeadDim);
  shape.arithmetic = config.arithmetic;
  return shape;
}

std::vector<float> gaussian(size_t n, uint64_t seed, double sigma) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.normal() * sigma);
  return x;
}

// The CPU attention of the last n positions over a cache of `config` holding k, v.
std::vector<float> cpu_attention(const KvConfig& config, const std::vector<float>& k, const std::vector<float>& v,
                                 const std::vector<float>& q, int n) {
  PagedKvCache cache(config, 1, {kKvHeads, kHeadDim, kPageTokens, kTokens / kPageTokens + 2});
  const SeqId seq = cache.create_sequence();
  cache.append(seq, 0, k.data(), v.data(), kTokens);
  ThreadPool pool(2);
  std::vector<float> out(static_cast<size_t>(n) * kHeads * kHeadDim);
  paged_attention(cache, seq, 0, {kHeads}, q.data(), n, out.data(), &pool);
  return out;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0.0, r = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    e += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    r += static_cast<double>(want[i]) * want[i];
  }
  return e / r;
}

class GpuEngine : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no " << vendor() << " device present; GPU checks need one";
  }
};

TEST_P(GpuEngine, AttentionMatchesTheCpuEngineArithmetic) {
  const KvConfig config = parse_kv_config(GetParam());
  KvConfig exact_config = config;
  exact_config.arithmetic = Engine::exact;
  const size_t per_token = static_cast<size_t>(kKvHeads) * kHeadDim;
  const std::vector<float> k = gaussian(per_token * kTokens, 51, 1.0), v = gaussian(per_token * kTokens, 52, 1.0);
  const PagedKvShape shape = shape_of(config);
  DevicePagedKv cache(shape, kTokens);
  for (int t = 0; t < kTokens;) {  // chunks of odd sizes, as a prefill would append them
    const int n = std::min(kTokens - t, 1 + (t * 7) % 41);
    cache.append(k.data() + t * per_token, v.data() + t * per_token, n);
    t += n;
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (int n : {1, 2, 37, 64}) {
    SCOPED_TRACE(std::string(GetParam()) + ", " + std::to_string(n) + " queries");
    const std::vector<float> q = gaussian(static_cast<size_t>(n) * kHeads * kHeadDim, 60 + n, 2.0);
    const std::vector<float> want = cpu_attention(config, k, v, q, n);
    const std::vector<float> exact = cpu_attention(exact_config, k, v, q, n);
    std::vector<float> got(want.size(), NAN), again(want.size(), NAN);  // poisoned
    cache.attention(kHeads, q.data(), n, scale, got.data());
    cache.attention(kHeads, q.data(), n, scale, again.data());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(got[i])) << "element " << i;
    EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << "not deterministic";
    const double err = nmse(got, want), engine_vs_exact = nmse(exact, want);
    const AttentionArithmetic arithmetic = kv_arithmetic(shape, n);
    // Float rounding apart (each key's dot product summed in another order, the device's expf),
    // both backends compute the same thing. Such a difference can flip a later rounding: an f16
    // accumulator (a few f16 steps of its row), P in f16 (one f16 step of a weight), P in E4M3
    // (rarely, but then by up to an eighth of that weight). Rows are checked one by one so a
    // rare flip cannot hide a systematic error.
    const bool f16_steps = arithmetic.f16_accumulator || arithmetic.weights == WeightRounding::f16;
    const bool fp8_steps = arithmetic.weights == WeightRounding::fp8_e4m3_256;
    const double row_tolerance = f16_steps || fp8_steps ? 2e-3 : 2e-5;
    const int rows = n * kHeads;
    int outliers = 0;
    double worst = 0.0;
    for (int r = 0; r < rows; ++r) {
      double e = 0.0, w = 0.0;
      for (int i = 0; i < kHeadDim; ++i) {
        const double g = got[static_cast<size_t>(r) * kHeadDim + i], x = want[static_cast<size_t>(r) * kHeadDim + i];
        e += (g - x) * (g - x);
        w += x * x;
      }
      const double relative = std::sqrt(e / w);
      worst = std::max(worst, relative);
      outliers += relative > row_tolerance ? 1 : 0;
    }
    std::printf("%s, %d queries (%s): NMSE to the CPU engine %.3g (worst row %.3g), CPU engine to exact %.3g\n",
                GetParam(), n, arithmetic.exact() ? "exact path" : "engine path", err, worst, engine_vs_exact);
    EXPECT_LE(outliers, fp8_steps ? std::max(2, rows / 50) : 0) << "rows off by more than " << row_tolerance;
    EXPECT_LT(worst, 0.25);
    // And far closer to the engine's arithmetic than to exact attention, where the two differ.
    if (!arithmetic.exact() && engine_vs_exact > 1e-9) {
      EXPECT_LT(err, 0.1 * engine_vs_exact) << "closer to exact attention than to the engine's";
    }
  }
}

std::string test_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

// Every engine over the formats it has: llama.cpp's one-row kernel (q8_0/q8_1 queries, an f16
// accumulator for f16 values, the tiled exact kernel for f16/f16 from 64 rows), the CUDA vector
// kernel (q8_1 queries, 1-2 rows) and MMA kernel (f16 everything; always for iq4_nl), and FA3's
// FP8 query and P; rotated (the default rot=wht) and unrotated ggml blocks.
INSTANTIATE_TEST_SUITE_P(Engines, GpuEngine,
                         ::testing::Values("q8_0@engine=llama.cpp", "q4_0@engine=llama.cpp", "q4_1@engine=llama.cpp",
                                           "f16@engine=llama.cpp", "q8_0/f16@engine=llama.cpp", "bf16@engine=llama.cpp",
                                           "q5_1:rot=none/q4_0@engine=llama.cpp", "q8_0@engine=llama.cpp-cuda",
                                           "q4_0@engine=llama.cpp-cuda", "q4_1:rot=none@engine=llama.cpp-cuda",
                                           "f16@engine=llama.cpp-cuda", "iq4_nl@engine=llama.cpp-cuda",
                                           "fp8@engine=vllm-fa3", "fp8:scale=0.5@engine=vllm-fa3",
                                           "f16@engine=vllm-fa3"),
                         test_name);

// Runs without a device: a cache whose engine lacks one of its formats, or reads them otherwise
// than as per-token rows, is a usage error before any driver call.
TEST(GpuEngineShape, FormatsTheEngineLacksAreUsageErrors) {
  auto usage_error = [](const PagedKvShape& shape) {
    try {
      DevicePagedKv cache(shape, 32);
    } catch (const Error& e) {
      return e.exit_code() == 2 && std::string(e.what()).find("@engine=") != std::string::npos;
    }
    return false;
  };
  PagedKvShape shape;
  shape.head_dim = 64;
  shape.n_kv_heads = 2;
  shape.key.format = FormatId::mxfp4;
  shape.value.format = FormatId::q8_0;
  shape.arithmetic = Engine::llama_cpp;
  EXPECT_TRUE(usage_error(shape));  // llama.cpp has no mxfp4 cache
  shape.key.format = FormatId::q4_0;
  shape.value.format = FormatId::f16;
  shape.arithmetic = Engine::vllm_fa3;
  EXPECT_TRUE(usage_error(shape));  // FA3 reads fp8 and 16-bit caches only
  shape.key = KvSideFormat{FormatId::fp8_e4m3, 1.0f, std::nullopt};
  shape.value = KvSideFormat{FormatId::f16, 1.0f, std::nullopt};
  EXPECT_TRUE(usage_error(shape));  // one --kv-cache-dtype for keys and values
  // The exact engine takes any GPU format (the refusal is the engine's, not the cache's).
  shape.arithmetic = Engine::exact;
  shape.key.format = FormatId::mxfp4;
  EXPECT_FALSE(usage_error(shape));
}

}  // namespace
}  // namespace kvgate::kernels::gpu
