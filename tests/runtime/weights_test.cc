// The runtime's weight decoders against gguf-py's (see tests/golden/make_weight_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/ggml_blocks.h"
#include "runtime/weights.h"

namespace kvgate::runtime {
namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

nlohmann::json golden() {
  std::ifstream in(std::string(KVGATE_SOURCE_DIR) + "/tests/golden/weight_blocks.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

GgmlType type_named(const std::string& name) {
  for (const GgmlTypeTraits& t : ggml_type_table())
    if (name == t.name) return t.type;
  ADD_FAILURE() << "unknown type " << name;
  return GgmlType::F32;
}

TEST(Weights, BlockDecodersMatchGgufPy) {
  const nlohmann::json g = golden();
  ASSERT_EQ(g.size(), 7u);
  for (auto it = g.begin(); it != g.end(); ++it) {
    const std::vector<uint8_t> bytes = from_hex(it.value()["bytes_hex"].get<std::string>());
    const std::vector<float> want = it.value()["values"].get<std::vector<float>>();
    WeightMatrix w;
    w.type = type_named(it.key());
    w.rows = 1;
    w.cols = static_cast<int64_t>(want.size());
    w.row_bytes = bytes.size();
    w.data = bytes.data();
    std::vector<float> got(want.size());
    dequantize_weight_row(w, 0, got.data());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << it.key() << " element " << i;

    // The blockwise dot equals the dot with the decoded row up to float summation order.
    std::vector<float> x(want.size());
    double exact = 0.0, magnitude = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
      exact += static_cast<double>(x[i]) * want[i];
      magnitude += std::fabs(static_cast<double>(x[i]) * want[i]);
    }
    EXPECT_NEAR(dot_weight_row(w, 0, x.data()), exact, 1e-5 * magnitude + 1e-6) << it.key();
  }
}

TEST(Weights, FastMatvecAgreesWithBlockwiseDot) {
  const nlohmann::json g = golden();
  ThreadPool pool(2);
  for (auto it = g.begin(); it != g.end(); ++it) {
    const std::vector<uint8_t> bytes = from_hex(it.value()["bytes_hex"].get<std::string>());
    const size_t n_values = it.value()["values"].size();
    const int64_t block_elems = n_values == 3 * 256 ? 256 : 32;
    // Reinterpret the three blocks as a 3-row matrix, one block per row.
    WeightMatrix w;
    w.type = type_named(it.key());
    w.rows = 3;
    w.cols = block_elems;
    w.row_bytes = bytes.size() / 3;
    w.data = bytes.data();
    std::vector<float> x(static_cast<size_t>(block_elems)), y(3);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.3f * static_cast<float>(i)) - 0.2f;
    matvec(pool, w, x.data(), y.data());
    for (int r = 0; r < 3; ++r) {
      const float want = dot_weight_row(w, r, x.data());
      EXPECT_NEAR(y[static_cast<size_t>(r)], want, 1e-5f * (1.0f + std::fabs(want))) << it.key() << " row " << r;
    }
  }
}

TEST(Weights, MatmulPrefillAgreesWithDecodePath) {
  const nlohmann::json g = golden();
  const std::vector<uint8_t> bytes = from_hex(g["Q4_1"]["bytes_hex"].get<std::string>());
  // Three Q4_1 blocks as a 3 x 32 matrix.
  WeightMatrix w;
  w.type = GgmlType::Q4_1;
  w.rows = 3;
  w.cols = 32;
  w.row_bytes = 20;
  w.data = bytes.data();
  const int n = 5;
  std::vector<float> x(n * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i));
  ThreadPool pool(2);
  std::vector<float> y(n * 3), y1(3);
  matmul(pool, w, x.data(), n, y.data());
  for (int i = 0; i < n; ++i) {
    matmul(pool, w, x.data() + i * 32, 1, y1.data());
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(y[i * 3 + r], y1[r], 1e-5f);
  }
}

// A matrix of random blocks with moderate f16 scales, like a model's.
std::vector<uint8_t> random_blocks(GgmlType type, int64_t rows, int64_t cols, uint64_t seed) {
  const int block_bytes = type == GgmlType::Q4_0 ? 18 : type == GgmlType::Q4_1 ? 20 : 34;
  const int scales = type == GgmlType::Q4_1 ? 2 : 1;
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / 32 * block_bytes));
  Rng rng(seed);
  for (size_t b = 0; b < bytes.size(); b += static_cast<size_t>(block_bytes)) {
    for (int i = 0; i < block_bytes; ++i) bytes[b + i] = static_cast<uint8_t>(rng.below(256));
    for (int s = 0; s < scales; ++s) {
      const uint16_t h = f32_to_f16(static_cast<float>(rng.normal()) * 0.02f);
      std::memcpy(&bytes[b + 2 * s], &h, 2);
    }
  }
  return bytes;
}

// `rows` x `cols` weights of `type` held in `bytes`.
WeightMatrix view_of(GgmlType type, int64_t rows, int64_t cols, const std::vector<uint8_t>& bytes) {
  WeightMatrix w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = bytes.size() / static_cast<size_t>(rows);
  w.data = bytes.data();
  return w;
}

// What the AVX2 row dots compute, written out lane by lane: eight lanes, lane l taking elements
// l, 8 + l, 16 + l, 24 + l of each block (a multiply, then three fused multiply-adds), the
// block scale fused into the lane's accumulator, lanes summed pairwise (l with l + 4, then with
// l + 2, then the last two), Q4_1's minimum terms (scale x block sum of x, fused) added last. Pinning this order keeps decode
// logits, and so every stored metric, unchanged when the kernels are rewritten.
float lane_model_dot(const WeightMatrix& w, int64_t r, const float* x) {
  const uint8_t* p = w.row(r);
  float acc[8] = {}, min_term = 0.0f;
  std::vector<float> block(32);
  const int block_bytes = static_cast<int>(w.row_bytes / static_cast<size_t>(w.cols / 32));
  for (int64_t b = 0; b < w.cols / 32; ++b, p += block_bytes, x += 32) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const float d = f16_to_f32(h);
    for (int j = 0; j < 32; ++j) {
      if (w.type == GgmlType::Q8_0) {
        block[j] = static_cast<float>(static_cast<int8_t>(p[2 + j]));
      } else {
        const uint8_t* qs = p + (w.type == GgmlType::Q4_1 ? 4 : 2);
        const int q = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
        block[j] = w.type == GgmlType::Q4_0 ? static_cast<float>(q) - 8.0f : static_cast<float>(q);
      }
    }
    for (int l = 0; l < 8; ++l) {
      float t = block[l] * x[l];
      for (int k = 1; k < 4; ++k) t = std::fma(block[8 * k + l], x[8 * k + l], t);
      acc[l] = std::fma(d, t, acc[l]);
    }
    if (w.type == GgmlType::Q4_1) {
      std::memcpy(&h, p + 2, 2);
      float sum = 0.0f;
      for (int j = 0; j < 32; ++j) sum += x[j];
      min_term = std::fma(f16_to_f32(h), sum, min_term);  // the compiler contracts the kernel's
    }
  }
  float s4[4], s2[2];
  for (int l = 0; l < 4; ++l) s4[l] = acc[l] + acc[l + 4];
  for (int l = 0; l < 2; ++l) s2[l] = s4[l] + s4[l + 2];
  return (s2[0] + s2[1]) + min_term;
}

TEST(Weights, AvxRowDotsFollowTheLaneModelBitForBit) {
  if (!kvgate::cpu_has_avx2_fma_f16c()) GTEST_SKIP() << "no AVX2/FMA/F16C";
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
    const int64_t rows = 300, cols = 576;  // rows span more than the kernels' prefetch distance
    const std::vector<uint8_t> bytes = random_blocks(type, rows, cols, 11);
    const WeightMatrix w = view_of(type, rows, cols, bytes);
    std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows));
    Rng rng(5);
    for (float& v : x) v = static_cast<float>(rng.normal());
    matvec(pool, w, x.data(), y.data());
    for (int64_t r = 0; r < rows; ++r)
      ASSERT_EQ(y[static_cast<size_t>(r)], lane_model_dot(w, r, x.data())) << ggml_type_name(type) << " row " << r;
  }
}

// Prefill's tiles are decoded by the AVX2 expansion where the CPU has it: the scalar block
// decode's bits, over codes of every value and scales from tiny to large.
TEST(Weights, AvxRowDecodeEqualsTheScalarDecodeBitForBit) {
  if (!kvgate::cpu_has_avx2_fma_f16c()) GTEST_SKIP() << "no AVX2/FMA/F16C";
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0}) {
    const int64_t rows = 8, cols = 4096;
    std::vector<uint8_t> bytes = random_blocks(type, rows, cols, 23);
    const size_t block_bytes = bytes.size() / static_cast<size_t>(rows * cols / 32);
    Rng rng(29);
    for (size_t b = 0; b < bytes.size(); b += block_bytes)  // scales over f16's whole finite range
      for (int s = 0; s < (type == GgmlType::Q4_1 ? 2 : 1); ++s) {
        const uint16_t h = static_cast<uint16_t>(rng.below(0x7c00) | (rng.below(2) << 15));
        std::memcpy(&bytes[b + 2 * static_cast<size_t>(s)], &h, 2);
      }
    const WeightMatrix w = view_of(type, rows, cols, bytes);
    std::vector<float> got(static_cast<size_t>(cols)), want(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_weight_row(w, r, got.data());
      const uint8_t* p = w.row(r);
      for (int64_t b = 0; b < cols / 32; ++b, p += block_bytes) {
        float* y = want.data() + 32 * b;
        if (type == GgmlType::Q4_0) kernels::ggml::Q4_0::dequantize(p, y);
        if (type == GgmlType::Q4_1) kernels::ggml::Q4_1::dequantize(p, y);
        if (type == GgmlType::Q8_0) kernels::ggml::Q8_0::dequantize(p, y);
      }
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << ggml_type_name(type) << " row " << r;
    }
  }
}

TEST(Weights, Bf16MatvecAgreesWithTheDecodedRow) {
  // Hugging Face checkpoints are BF16: the AVX2 row dot (a 16-bit shift per lane) and the scalar
  // decoder read the same floats; a wrong shift or byte order would be off by orders of magnitude.
  ThreadPool pool(2);
  const int64_t rows = 70, cols = 600;  // not a multiple of 8: the tail loop runs too
  std::vector<uint16_t> bits(static_cast<size_t>(rows * cols));
  Rng rng(7);
  for (uint16_t& b : bits) b = f32_to_bf16(static_cast<float>(rng.normal()) * 0.05f);
  WeightMatrix w;
  w.type = GgmlType::BF16;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = static_cast<size_t>(cols) * 2;
  w.data = reinterpret_cast<const uint8_t*>(bits.data());
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(rows)), row(static_cast<size_t>(cols));
  for (float& v : x) v = static_cast<float>(rng.normal());
  matvec(pool, w, x.data(), y.data());
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_weight_row(w, r, row.data());
    double exact = 0.0, magnitude = 0.0;
    for (int64_t i = 0; i < cols; ++i) {
      EXPECT_EQ(row[static_cast<size_t>(i)], bf16_to_f32(bits[static_cast<size_t>(r * cols + i)]));
      exact += static_cast<double>(row[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
      magnitude += std::fabs(static_cast<double>(row[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)]);
    }
    ASSERT_NEAR(y[static_cast<size_t>(r)], exact, 1e-5 * magnitude) << "row " << r;
  }
}

TEST(Weights, MatmulManyEqualsOneMatrixAtATimeBitForBit) {
  const int64_t cols = 96;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<WeightMatrix> ws;
  const GgmlType types[] = {GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_0};
  const int64_t rows[] = {70, 5, 131};
  for (int m = 0; m < 3; ++m) {
    storage.push_back(random_blocks(types[m], rows[m], cols, 20 + m));
    WeightMatrix w;
    w.type = types[m];
    w.rows = rows[m];
    w.cols = cols;
    w.row_bytes = storage.back().size() / static_cast<size_t>(rows[m]);
    w.data = storage.back().data();
    ws.push_back(w);
  }
  for (int n : {1, 7}) {
    std::vector<float> x(static_cast<size_t>(n * cols));
    Rng rng(3);
    for (float& v : x) v = static_cast<float>(rng.normal());
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      std::vector<std::vector<float>> one(3), many(3);
      for (int m = 0; m < 3; ++m) {
        one[m].resize(static_cast<size_t>(n * rows[m]));
        many[m].resize(one[m].size());
        matmul(pool, ws[m], x.data(), n, one[m].data());
      }
      const WeightMatrix* wp[] = {&ws[0], &ws[1], &ws[2]};
      float* yp[] = {many[0].data(), many[1].data(), many[2].data()};
      matmul_many(pool, wp, x.data(), n, yp);
      for (int m = 0; m < 3; ++m)
        for (size_t i = 0; i < one[m].size(); ++i)
          ASSERT_EQ(std::memcmp(&one[m][i], &many[m][i], sizeof(float)), 0)
              << "n=" << n << " threads=" << threads << " matrix " << m << " element " << i;
    }
  }
}

// llama.cpp's input rounding: q8_1/q8_0 blocks of 32 (scale amax/127 in f16, codes ties to
// even), q8_K blocks of 256, f16; f32 untouched.
TEST(Weights, LlamaCppInputRoundingFollowsTheDotType) {
  std::vector<float> x(512);
  Rng rng(3);
  for (float& v : x) v = static_cast<float>(rng.normal());
  x[5] = 40.0f;  // one large entry: its block's step is 40/127, the other blocks keep fine steps
  std::vector<float> q8 = x;
  round_input_like_llama_cpp(GgmlType::Q4_1, q8.data(), 2, 256);
  const float d = f16_to_f32(f32_to_f16(40.0f / 127.0f));
  EXPECT_EQ(q8[5], 127.0f * d);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(q8[j], std::nearbyint(x[j] * (127.0f / 40.0f)) * d) << j;
  double block0 = 0, block1 = 0;
  for (int j = 0; j < 32; ++j) block0 = std::max(block0, std::fabs(double(q8[j]) - x[j]));
  for (int j = 32; j < 64; ++j) block1 = std::max(block1, std::fabs(double(q8[j]) - x[j]));
  EXPECT_LE(block0, d / 2 + 1e-6);
  EXPECT_LT(block1, block0);
  std::vector<float> q8_0 = x;
  round_input_like_llama_cpp(GgmlType::Q8_0, q8_0.data(), 1, 512);
  EXPECT_EQ(q8_0, q8);  // q8_0 and q8_1 share the codes and the scale
  std::vector<float> k = x;
  round_input_like_llama_cpp(GgmlType::Q6_K, k.data(), 2, 256);
  EXPECT_NEAR(k[5], 40.0f, 1e-5);  // the block's largest entry: -127 * (1 / (-127 / 40))
  EXPECT_NE(k[6], x[6]);
  std::vector<float> f16 = x, f32 = x;
  round_input_like_llama_cpp(GgmlType::F16, f16.data(), 1, 512);
  round_input_like_llama_cpp(GgmlType::F32, f32.data(), 1, 512);
  EXPECT_EQ(f16[7], f16_to_f32(f32_to_f16(x[7])));
  EXPECT_EQ(f32, x);
}

}  // namespace
}  // namespace kvgate::runtime
