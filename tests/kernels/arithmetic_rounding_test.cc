// The engine roundings shared by the CPU and GPU engine attention (kernels/arithmetic_rounding.h),
// compiled for the host, against the CPU engine's arithmetic bit for bit. The references below
// restate kernels/attention_arithmetic.cc's own code from before it called the shared functions
// (its query rounding, round_weight, one_row_step and per-page tile step), so a change to a
// shared function that moves the CPU's numbers fails here; and the shared functions are called
// the way gpu_attention_arithmetic.cu calls them (a block of the query per lane, a span of
// head_dim per lane), so the device's decomposition is checked too. The device runs this very
// code; tests/gpu/gpu_arithmetic_test.cc compares whole attention calls on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/attention_arithmetic.h"
#include "kernels/arithmetic_rounding.h"
#include "kernels/ggml_blocks.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/kv_config.h"
#include "kernels/kv_format.h"
#include "kernels/softmax_state.h"
#include "tests/kernels/gpu_row_cases.h"

namespace kvgate::kernels {
namespace {

using gpu::testing::probe_rows;

bool same_bits(float a, float b) { return f32_bits(a) == f32_bits(b); }

constexpr QueryRounding kQueryRoundings[] = {QueryRounding::none, QueryRounding::f16,  QueryRounding::bf16,
                                             QueryRounding::q8_0, QueryRounding::q8_1, QueryRounding::q8_1_cuda,
                                             QueryRounding::fp8_e4m3};
constexpr WeightRounding kWeightRoundings[] = {WeightRounding::none, WeightRounding::f16, WeightRounding::fp8_e4m3_256};

bool is_ggml(QueryRounding q) {
  return q == QueryRounding::q8_0 || q == QueryRounding::q8_1 || q == QueryRounding::q8_1_cuda;
}

// attention_arithmetic.cc's round_query before the shared functions, restated.
void reference_round_query(QueryRounding q, float scale, const float* x, float* y, int n) {
  uint8_t block[64];
  for (int i = 0; i < n; ++i) y[i] = x[i];
  switch (q) {
    case QueryRounding::unsupported:
    case QueryRounding::none: return;
    case QueryRounding::f16:
      for (int i = 0; i < n; ++i) y[i] = f16_to_f32(f32_to_f16(x[i]));
      return;
    case QueryRounding::bf16:
      for (int i = 0; i < n; ++i) y[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    case QueryRounding::q8_0:
      for (int i = 0; i < n; i += ggml::kBlock) {
        ggml::Q8_0::quantize_x86(x + i, block);
        ggml::Q8_0::dequantize(block, y + i);
      }
      return;
    case QueryRounding::q8_1:
      for (int i = 0; i < n; i += ggml::kBlock) {
        ggml::Q8_1::quantize_x86(x + i, block);
        ggml::Q8_1::dequantize(block, y + i);
      }
      return;
    case QueryRounding::q8_1_cuda:
      for (int i = 0; i < n; i += ggml::kBlock) ggml::q8_1_cuda_fattn_values(x + i, y + i);
      return;
    case QueryRounding::fp8_e4m3:
      for (int i = 0; i < n; ++i)
        y[i] = fp8_to_f32(f32_to_fp8(x[i] / scale, Fp8Kind::e4m3fn), Fp8Kind::e4m3fn) * scale;
      return;
  }
}

// attention_arithmetic.cc's round_weight before the shared functions, restated.
float reference_round_weight(WeightRounding r, float w) {
  switch (r) {
    case WeightRounding::none: return w;
    case WeightRounding::f16: return f16_to_f32(f32_to_f16(w));
    case WeightRounding::fp8_e4m3_256:
      return fp8_to_f32(f32_to_fp8(w * 256.0f, Fp8Kind::e4m3fn), Fp8Kind::e4m3fn) * (1.0f / 256.0f);
  }
  return w;
}

// attention_arithmetic.cc's one_row_step before the shared functions, restated.
void reference_one_row_step(float s, const float* v, int d, bool f16_acc, float& max, float& sum, float* acc,
                            uint16_t* acc16) {
  float ms = 1.0f, vs = 1.0f;
  if (s > max) {
    ms = std::exp(max - s);
    max = s;
    if (f16_acc)
      for (int i = 0; i < d; ++i) acc16[i] = f32_to_f16(f16_to_f32(acc16[i]) * ms);
    else
      for (int i = 0; i < d; ++i) acc[i] *= ms;
  } else {
    vs = std::exp(s - max);
  }
  if (f16_acc)
    for (int i = 0; i < d; ++i) acc16[i] = f32_to_f16(std::fma(v[i], vs, f16_to_f32(acc16[i])));
  else
    for (int i = 0; i < d; ++i) acc[i] = std::fma(v[i], vs, acc[i]);
  sum = sum * ms + vs;
}

// Every query rounding over the probe rows (zeros, NaN, infinities, subnormals, ties, magnitudes
// from 2^-20 to 2^10): the CPU engine's round_query and the GPU's block-per-lane calls of
// round_query_block both equal the reference, at a head_dim of whole blocks and, for the
// element-wise roundings, at one ending in a partial block.
TEST(ArithmeticRounding, QueryRoundingsEqualTheCpuEngineBitForBit) {
  for (QueryRounding q : kQueryRoundings) {
    for (int d : {128, 80}) {
      if (is_ggml(q) && d % ggml::kBlock != 0) continue;
      for (float scale : {1.0f, 0.25f, 3.7f}) {
        if (q != QueryRounding::fp8_e4m3 && scale != 1.0f) continue;
        const int rows = 12;
        const std::vector<float> x = probe_rows(d, rows, 91 + d);
        for (int r = 0; r < rows; ++r) {
          const float* row = x.data() + static_cast<size_t>(r) * d;
          std::vector<float> want(d), cpu(d), lanes(row, row + d);
          reference_round_query(q, scale, row, want.data(), d);
          AttentionArithmetic a;
          a.query = q;
          a.query_scale = scale;
          round_query(a, row, cpu.data(), d);
          for (int b = 0; b < d; b += ggml::kBlock)  // in place, one block per lane
            round_query_block(q, scale, lanes.data() + b, lanes.data() + b, std::min(ggml::kBlock, d - b));
          for (int i = 0; i < d; ++i) {
            ASSERT_TRUE(same_bits(cpu[i], want[i])) << query_rounding_name(q) << " d " << d << " scale " << scale
                                                    << " row " << r << " element " << i << ": " << cpu[i] << " vs "
                                                    << want[i];
            ASSERT_TRUE(same_bits(lanes[i], want[i])) << query_rounding_name(q) << " (lanes) d " << d << " row " << r
                                                      << " element " << i;
          }
        }
      }
    }
  }
}

// P roundings over weights in [0, 1] (what the softmax gives) and the values next to E4M3's and
// f16's rounding boundaries and below their smallest steps.
TEST(ArithmeticRounding, WeightRoundingsEqualTheCpuEngineBitForBit) {
  std::vector<float> w = {0.0f, 1.0f, 0.5f, 1e-30f, 1e-8f, std::ldexp(1.0f, -17), std::ldexp(1.0f, -26), NAN};
  for (int e = -20; e <= 0; ++e)
    for (int m = 0; m < 32; ++m) {
      const float base = std::ldexp(1.0f + static_cast<float>(m) / 32.0f, e);  // E4M3 midpoints at odd m / 16
      w.push_back(base);
      w.push_back(std::nextafter(base, 0.0f));
      w.push_back(std::nextafter(base, 2.0f));
    }
  Rng rng(5);
  for (int i = 0; i < 4000; ++i) w.push_back(static_cast<float>(rng.uniform()));
  for (WeightRounding r : kWeightRoundings)
    for (float x : w)
      ASSERT_TRUE(same_bits(round_weight(r, x), reference_round_weight(r, x)) ||
                  (std::isnan(x) && std::isnan(round_weight(r, x))))
          << static_cast<int>(r) << " weight " << x;
}

// A score sequence with new maxima (the first key, rises, an exact repeat, a fall far below):
// the shared step applied per element over GPU-style lane spans equals the CPU's row step in
// the accumulator, the max and the sum, for f32 and f16 accumulators alike; then the output.
TEST(ArithmeticRounding, OneRowStepEqualsTheCpuEngineBitForBit) {
  constexpr int kD = 128, kLaneSpan = 4;
  Rng rng(17);
  std::vector<float> scores;
  for (int t = 0; t < 400; ++t) scores.push_back(static_cast<float>(rng.normal() * 3.0 + 0.01 * t));
  scores[7] = scores[6];
  scores[20] = 40.0f;
  scores[21] = -60.0f;
  for (bool f16_acc : {false, true}) {
    std::vector<float> acc_ref(kD, 0.0f), acc(kD, 0.0f);
    std::vector<uint16_t> acc16_ref(kD, 0), acc16(kD, 0);
    float max_ref = -INFINITY, sum_ref = 0.0f, max = -INFINITY, sum = 0.0f;
    for (size_t t = 0; t < scores.size(); ++t) {
      std::vector<float> v(kD);
      for (float& e : v) e = static_cast<float>(rng.normal());
      reference_one_row_step(scores[t], v.data(), kD, f16_acc, max_ref, sum_ref, acc_ref.data(), acc16_ref.data());
      const OneRowStep step = one_row_step(scores[t], max, sum);
      for (int own = 0; own < kD; own += kLaneSpan)
        for (int e = own; e < own + kLaneSpan; ++e) {
          if (f16_acc) acc16[e] = one_row_accumulate_f16(step, acc16[e], v[e]);
          else acc[e] = one_row_accumulate(step, acc[e], v[e]);
        }
      ASSERT_TRUE(same_bits(max, max_ref) && same_bits(sum, sum_ref)) << "key " << t;
      for (int i = 0; i < kD; ++i) {
        ASSERT_TRUE(f16_acc ? acc16[i] == acc16_ref[i] : same_bits(acc[i], acc_ref[i]))
            << (f16_acc ? "f16" : "f32") << " accumulator, key " << t << " element " << i;
      }
    }
    const float inv_ref = sum_ref == 0.0f ? 0.0f : 1.0f / sum_ref;
    EXPECT_TRUE(same_bits(softmax_normalizer(sum), inv_ref));
  }
  EXPECT_EQ(softmax_normalizer(0.0f), 0.0f);  // a row that saw no key
}

// The tile kernels' page step (CUDA MMA, FA3): pages of 16 scores, the page max first, weights
// rounded for P·V and summed unrounded, for every weight rounding.
TEST(ArithmeticRounding, TileStepEqualsTheCpuEngineBitForBit) {
  constexpr int kD = 64, kPage = 16, kPages = 12;
  for (WeightRounding r : kWeightRoundings) {
    Rng rng(23);
    SoftmaxState st_ref, st;
    std::vector<float> acc_ref(kD, 0.0f), acc(kD, 0.0f);
    for (int page = 0; page < kPages; ++page) {
      std::vector<float> s(kPage), v(static_cast<size_t>(kPage) * kD);
      for (float& e : s) e = static_cast<float>(rng.normal() * 4.0 + (page == 5 ? 30.0 : 0.0));
      for (float& e : v) e = static_cast<float>(rng.normal());
      const float scale = 0.125f;
      // The CPU engine's page, as it was written.
      float chunk_max = -INFINITY;
      for (int t = 0; t < kPage; ++t) chunk_max = std::max(chunk_max, s[t] * scale);
      const float rescale_ref = st_ref.raise_max(chunk_max);
      if (rescale_ref != 1.0f)
        for (float& e : acc_ref) e *= rescale_ref;
      float weight_sum_ref = 0.0f;
      for (int t = 0; t < kPage; ++t) {
        const float w = st_ref.weight(s[t] * scale);
        weight_sum_ref += w;
        const float wr = reference_round_weight(r, w);
        for (int i = 0; i < kD; ++i) acc_ref[i] = std::fma(wr, v[static_cast<size_t>(t) * kD + i], acc_ref[i]);
      }
      st_ref.add(weight_sum_ref);
      // The shared functions, as the GPU lanes call them.
      float page_max = -INFINITY;
      for (int t = 0; t < kPage; ++t) page_max = tile_max(page_max, rn_mul(s[t], scale));
      const float rescale = st.raise_max(page_max);
      if (rescale != 1.0f)
        for (float& e : acc) e = rn_mul(e, rescale);
      float weight_sum = 0.0f;
      for (int t = 0; t < kPage; ++t) {
        const float w = st.weight(rn_mul(s[t], scale));
        weight_sum = rn_add(weight_sum, w);
        const float wr = round_weight(r, w);
        for (int i = 0; i < kD; ++i) acc[i] = tile_accumulate(acc[i], wr, v[static_cast<size_t>(t) * kD + i]);
      }
      st.add(weight_sum);
      ASSERT_TRUE(same_bits(st.max, st_ref.max) && same_bits(st.denom, st_ref.denom)) << "page " << page;
      for (int i = 0; i < kD; ++i)
        ASSERT_TRUE(same_bits(acc[i], acc_ref[i])) << static_cast<int>(r) << " page " << page << " element " << i;
    }
  }
  EXPECT_EQ(tile_max(-INFINITY, NAN), -INFINITY);  // std::max's order: NaN never becomes the max
  EXPECT_EQ(tile_max(2.0f, NAN), 2.0f);
}

// The GPU cache resolves its engine exactly as the CPU attention does (kernels/attention.cc):
// the same registry entries, the key's scale as q_scale, for decode steps and prefill chunks.
TEST(ArithmeticRounding, GpuCacheResolvesTheArithmeticAsTheCpu) {
  for (const char* spec : {"q8_0@engine=llama.cpp", "q4_1/f16@engine=llama.cpp", "f16@engine=llama.cpp",
                           "q4_0@engine=llama.cpp-cuda", "iq4_nl@engine=llama.cpp-cuda", "f16@engine=llama.cpp-cuda",
                           "fp8:scale=0.5@engine=vllm-fa3", "f16@engine=vllm-fa3", "q8_0"}) {
    const KvConfig c = parse_kv_config(spec);
    for (int head_dim : {64, 96}) {
      gpu::PagedKvShape shape;
      shape.head_dim = head_dim;
      shape.key.format = c.key.format->id;
      shape.key.scale = c.key.options.scale;
      shape.value.format = c.value.format->id;
      shape.value.scale = c.value.options.scale;
      shape.arithmetic = c.arithmetic;
      for (int n : {1, 2, 3, 63, 64, 512}) {
        const AttentionArithmetic want =
            resolve_arithmetic(c.arithmetic, *c.key.format, *c.value.format, n, head_dim, c.key.options.scale);
        const AttentionArithmetic got = gpu::kv_arithmetic(shape, n);
        EXPECT_EQ(got.describe(), want.describe()) << spec << " n " << n;
        EXPECT_EQ(got.query_scale, want.query_scale) << spec;
        EXPECT_EQ(got.exact(), want.exact()) << spec << " n " << n;
      }
    }
  }
}

}  // namespace
}  // namespace kvgate::kernels
