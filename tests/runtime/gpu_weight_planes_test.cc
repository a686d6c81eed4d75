// The GPU's weight planes (kernels/gpu/weight_planes.h) and its exact tensor-core arithmetic
// (kernels/gpu/split_columns.h), run on the host:
//   - repacked planes decoded by plane_element equal the CPU runtime's ggml decode bit for bit,
//     every element of every weight type (NaN and infinite scales included);
//   - the decode GEMV's units (Units<T>) cover each element of a block exactly once, and their
//     factored dot products agree with the f64 product of the decoded weights to f32 rounding;
//   - x split into 16-bit pieces that ride as extra GEMM columns (f16 pair after a per-token
//     power-of-two scale; three bf16 pieces) and combined after: within f32 rounding of the f32
//     product, where plain f16 or bf16 inputs are not, and without overflow for |x| past f16's range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/gpu/split_columns.h"
#include "kernels/gpu/weight_dispatch.h"
#include "kernels/gpu/weight_planes.h"
#include "runtime/gguf.h"
#include "runtime/weights.h"

namespace kvgate::runtime {
namespace {

namespace gpu = kernels::gpu;

struct TypePair {
  GgmlType cpu;
  gpu::WeightType gpu;
};
constexpr TypePair kTypes[] = {
    {GgmlType::F32, gpu::WeightType::f32},   {GgmlType::F16, gpu::WeightType::f16},
    {GgmlType::BF16, gpu::WeightType::bf16}, {GgmlType::Q4_0, gpu::WeightType::q4_0},
    {GgmlType::Q4_1, gpu::WeightType::q4_1}, {GgmlType::Q5_0, gpu::WeightType::q5_0},
    {GgmlType::Q5_1, gpu::WeightType::q5_1}, {GgmlType::Q8_0, gpu::WeightType::q8_0},
    {GgmlType::Q4_K, gpu::WeightType::q4_k}, {GgmlType::Q6_K, gpu::WeightType::q6_k},
};

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// Random ggml rows of type p; with finite_scales, every block's f16 scales (and minima) are
// small normal values, so the decoded weights are finite.
std::vector<uint8_t> random_rows(const TypePair& p, int64_t rows, int64_t cols, bool finite_scales, Rng& rng) {
  const int elems = gpu::weight_block_elems(p.gpu), block_bytes = gpu::weight_block_bytes(p.gpu);
  const size_t row_bytes = static_cast<size_t>(cols / elems) * static_cast<size_t>(block_bytes);
  std::vector<uint8_t> data(row_bytes * rows);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng.below(256));
  const auto put_half = [](uint8_t* at, float v) {
    const uint16_t s = f32_to_f16(v);
    at[0] = static_cast<uint8_t>(s);
    at[1] = static_cast<uint8_t>(s >> 8);
  };
  if (p.gpu == gpu::WeightType::f32 || p.gpu == gpu::WeightType::f16 || p.gpu == gpu::WeightType::bf16) {
    if (!finite_scales) return data;
    for (size_t i = 0; i < data.size() / block_bytes; ++i) {
      const float v = static_cast<float>(rng.normal() * 0.05);
      uint8_t* at = data.data() + i * block_bytes;
      if (p.gpu == gpu::WeightType::f32) std::memcpy(at, &v, 4);
      else if (p.gpu == gpu::WeightType::f16) put_half(at, v);
      else {
        const uint16_t b = f32_to_bf16(v);
        at[0] = static_cast<uint8_t>(b);
        at[1] = static_cast<uint8_t>(b >> 8);
      }
    }
    return data;
  }
  const size_t scale_at = p.gpu == gpu::WeightType::q6_k ? 208 : 0;
  const int halves = p.gpu == gpu::WeightType::q4_1 || p.gpu == gpu::WeightType::q5_1 || p.gpu == gpu::WeightType::q4_k ? 2 : 1;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / elems; ++b) {
      // Without finite_scales, only odd rows get finite scales: even ones keep random bits
      // (NaN, infinities, subnormals), which must decode alike too.
      if (!finite_scales && r % 2 == 0) continue;
      for (int h = 0; h < halves; ++h)
        put_half(data.data() + r * row_bytes + b * block_bytes + scale_at + 2 * h, static_cast<float>(rng.normal() * 0.01));
    }
  return data;
}

struct Planes {
  std::vector<uint8_t> quants, meta;
  size_t quant_row = 0, meta_row = 0;
};
Planes repack(gpu::WeightType t, const std::vector<uint8_t>& data, int64_t rows, int64_t cols) {
  Planes p;
  p.quant_row = gpu::quant_row_bytes(t, cols);
  p.meta_row = gpu::meta_row_bytes(t, cols);
  p.quants.assign(p.quant_row * rows, 0xAA);
  p.meta.assign(std::max<size_t>(p.meta_row * rows, 1), 0xAA);
  gpu::repack_planes(t, data.data(), rows, cols, data.size() / rows, p.quants.data(), p.meta.data());
  return p;
}

WeightMatrix matrix(const TypePair& p, const std::vector<uint8_t>& data, int64_t rows, int64_t cols) {
  WeightMatrix w;
  w.name = "probe";
  w.type = p.cpu;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = data.size() / rows;
  w.data = data.data();
  return w;
}

TEST(GpuWeightPlanes, QuantPlanesAreWhole16ByteUnits) {
  for (const TypePair& p : kTypes) {
    const gpu::PlaneLayout L = gpu::plane_layout(p.gpu);
    EXPECT_EQ(L.quant_bytes + L.meta_bytes, gpu::weight_block_bytes(p.gpu)) << ggml_type_name(p.cpu);
    if (gpu::weight_block_elems(p.gpu) > 1) {
      EXPECT_EQ(L.quant_bytes % 16, 0) << ggml_type_name(p.cpu);
    }
  }
}

TEST(GpuWeightPlanes, RepackedPlanesDecodeToTheCpuWeightsBitForBit) {
  Rng rng(20261206);
  for (const TypePair& p : kTypes) {
    const int64_t rows = 6, cols = 512;
    const std::vector<uint8_t> data = random_rows(p, rows, cols, false, rng);
    const Planes planes = repack(p.gpu, data, rows, cols);
    const WeightMatrix w = matrix(p, data, rows, cols);
    std::vector<float> want(cols);
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_weight_row(w, r, want.data());
      for (int64_t i = 0; i < cols; ++i) {
        const float got = gpu::plane_element(p.gpu, planes.quants.data() + r * planes.quant_row,
                                             planes.meta.data() + r * planes.meta_row, i);
        // NaNs compare by being NaN (the decoders may carry different payloads).
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got)) << ggml_type_name(p.cpu) << " row " << r << " element " << i;
        } else {
          ASSERT_EQ(bits(got), bits(want[i])) << ggml_type_name(p.cpu) << " row " << r << " element " << i << ": " << got
                                              << " vs " << want[i];
        }
      }
    }
  }
}

// The GEMV's walk over one row (gpu_gemv.cu gemv_planes_kernel, one thread): every unit in order,
// words read from the quant plane, x gathered by x_index. Also counts how often each element is
// visited.
template <gpu::WeightType T>
float units_dot(const uint8_t* q, const uint8_t* m, const float* x, int64_t cols, std::vector<int>* visits) {
  using U = gpu::Units<T>;
  const int units = static_cast<int>(cols / U::kBlockElems * U::kUnitsPerBlock);
  const int meta_bytes = gpu::plane_layout(T).meta_bytes;
  float acc = 0.0f;
  for (int u = 0; u < units; ++u) {
    const int block = u / U::kUnitsPerBlock, k = u % U::kUnitsPerBlock;
    uint32_t w[U::kUnitBytes / 4];
    std::memcpy(w, q + static_cast<size_t>(u) * U::kUnitBytes, sizeof w);
    const typename U::Scales s = U::scales(m + static_cast<size_t>(block) * meta_bytes, k);
    float xs[U::kUnitElems];
    for (int e = 0; e < U::kUnitElems; ++e) {
      const int64_t at = static_cast<int64_t>(block) * U::kBlockElems + U::x_index(k, e);
      xs[e] = x[at];
      ++(*visits)[static_cast<size_t>(at)];
    }
    acc = U::dot(acc, s, w, xs, U::sums(xs));
  }
  return acc;
}

TEST(GpuWeightPlanes, GemvUnitsCoverEveryElementOnceAndMatchTheProductToF32Rounding) {
  Rng rng(45);
  for (const TypePair& p : kTypes) {
    const int64_t rows = 5, cols = 1024;
    const std::vector<uint8_t> data = random_rows(p, rows, cols, true, rng);
    const Planes planes = repack(p.gpu, data, rows, cols);
    const WeightMatrix w = matrix(p, data, rows, cols);
    std::vector<float> x(cols), dense(cols);
    for (float& v : x) v = static_cast<float>(rng.normal());
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_weight_row(w, r, dense.data());
      double want = 0, magnitude = 0;
      for (int64_t i = 0; i < cols; ++i) {
        want += static_cast<double>(dense[i]) * x[i];
        magnitude += std::fabs(static_cast<double>(dense[i]) * x[i]);
      }
      std::vector<int> visits(cols, 0);
      float got = 0.0f;
      gpu::with_weight_type(p.gpu, [&](auto type) {
        got = units_dot<decltype(type)::value>(planes.quants.data() + r * planes.quant_row,
                                               planes.meta.data() + r * planes.meta_row, x.data(), cols, &visits);
      });
      for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(visits[i], 1) << ggml_type_name(p.cpu) << " element " << i;
      // A sum of `cols` f32 roundings at most, plus one per factored scale: 2^-24 each.
      EXPECT_LE(std::fabs(got - want), (cols + 64) * std::ldexp(1.0, -24) * magnitude + 1e-30)
          << ggml_type_name(p.cpu) << " row " << r << ": " << got << " vs " << want;
    }
  }
}

// The emulated GEMM: 16-bit operands multiplied exactly, summed in f64 and rounded to f32 once
// (a tensor core's f32 sums lose at most cols x 2^-24 more, covered by the bounds below).
float gemm_column(const std::vector<float>& w, const std::vector<float>& piece) {
  double s = 0;
  for (size_t i = 0; i < w.size(); ++i) s += static_cast<double>(w[i]) * piece[i];
  return static_cast<float>(s);
}

struct Product {
  double want = 0, magnitude = 0;
};
Product product(const std::vector<float>& w, const std::vector<float>& x) {
  Product p;
  for (size_t i = 0; i < w.size(); ++i) {
    p.want += static_cast<double>(w[i]) * x[i];
    p.magnitude += std::fabs(static_cast<double>(w[i]) * x[i]);
  }
  return p;
}

TEST(GpuExactColumns, F16PairColumnsMatchTheF32ProductWherePlainF16DoesNot) {
  Rng rng(11);
  const int cols = 4096;
  // Ordinary activations, ones far past f16's range, and tiny ones (the per-token scale).
  for (const double magnitude : {1.0, 3.0e5, 1.0e-9}) {
    std::vector<float> w(cols), x(cols);
    for (float& v : w) v = f16_to_f32(f32_to_f16(static_cast<float>(rng.normal() * 0.02)));
    for (float& v : x) v = static_cast<float>(rng.normal() * magnitude);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const int e = gpu::token_scale_exponent(amax);
    std::vector<float> hi(cols), lo(cols), plain(cols);
    for (int i = 0; i < cols; ++i) {
      const gpu::F16Pair p = gpu::split_f16_pair(x[i] * gpu::pow2(e));
      ASSERT_TRUE(std::isfinite(f16_to_f32(p.hi)) && std::isfinite(f16_to_f32(p.lo))) << x[i];
      hi[i] = f16_to_f32(p.hi);
      lo[i] = f16_to_f32(p.lo);
      plain[i] = f16_to_f32(f32_to_f16(x[i]));
    }
    const float got = gpu::combine_f16_pair(gemm_column(w, hi), gemm_column(w, lo), gpu::pow2(-e));
    const Product p = product(w, x);
    const double bound = std::ldexp(1.0, -21) * p.magnitude;
    EXPECT_LE(std::fabs(got - p.want), bound) << "magnitude " << magnitude;
    if (magnitude == 1.0) {
      // The same bound is one plain f16 input cannot meet: the test can tell the two apart.
      EXPECT_GT(std::fabs(gemm_column(w, plain) - p.want), bound);
    }
  }
}

TEST(GpuExactColumns, Bf16TripleColumnsMatchTheF32ProductWherePlainBf16DoesNot) {
  Rng rng(12);
  const int cols = 4096;
  std::vector<float> w(cols), x(cols);
  for (float& v : w) v = bf16_to_f32(f32_to_bf16(static_cast<float>(rng.normal() * 0.02)));
  for (float& v : x) v = static_cast<float>(rng.normal() * 1e6);
  std::vector<float> p0(cols), p1(cols), p2(cols), plain(cols);
  for (int i = 0; i < cols; ++i) {
    const gpu::Bf16Triple t = gpu::split_bf16_triple(x[i]);
    p0[i] = bf16_to_f32(t.p0);
    p1[i] = bf16_to_f32(t.p1);
    p2[i] = bf16_to_f32(t.p2);
    plain[i] = p0[i];
    EXPECT_EQ(static_cast<double>(p0[i]) + p1[i] + p2[i], static_cast<double>(x[i])) << "pieces do not sum to x";
  }
  const float got = gpu::combine_bf16_triple(gemm_column(w, p0), gemm_column(w, p1), gemm_column(w, p2));
  const Product p = product(w, x);
  const double bound = std::ldexp(1.0, -21) * p.magnitude;
  EXPECT_LE(std::fabs(got - p.want), bound);
  EXPECT_GT(std::fabs(gemm_column(w, plain) - p.want), bound);
}

}  // namespace
}  // namespace kvgate::runtime
