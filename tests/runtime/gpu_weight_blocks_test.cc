// The GPU's weight element decode (kernels/gpu/weight_blocks.h), run on the host, against the
// CPU runtime's dequantize_weight_row: every element of every supported type, bit for bit, so
// the device multiplies by exactly the weights the CPU does (checked here on any machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/ggml_blocks.h"
#include "kernels/gpu/weight_blocks.h"
#include "runtime/gguf.h"
#include "runtime/weights.h"

namespace kvgate::runtime {
namespace {

namespace gpu = kernels::gpu;
namespace ggml = kernels::ggml;

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

TEST(GpuWeightBlocks, EveryCpuWeightTypeHasAGpuDecode) {
  int supported = 0;
  for (const GgmlTypeTraits& t : ggml_type_table()) supported += weight_type_supported(t.type) ? 1 : 0;
  EXPECT_EQ(supported, static_cast<int>(std::size(kTypes)));
  for (const TypePair& p : kTypes) EXPECT_TRUE(weight_type_supported(p.cpu)) << ggml_type_name(p.cpu);
}

// Random bytes make every code, scale and sign appear (NaN and infinite scales included, whose
// results must match too); plain scales of moderate size are mixed in so most values are finite.
TEST(GpuWeightBlocks, ElementsEqualTheCpuDecodeBitForBit) {
  Rng rng(20261202);
  for (const TypePair& p : kTypes) {
    const int elems = gpu::weight_block_elems(p.gpu), block_bytes = gpu::weight_block_bytes(p.gpu);
    const int64_t cols = 512;
    const int64_t rows = 24;
    const size_t row_bytes = static_cast<size_t>(cols / elems) * static_cast<size_t>(block_bytes);
    std::vector<uint8_t> data(row_bytes * rows);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng.below(256));
    if (elems > 1) {
      // Odd rows get finite f16 scales/mins in each block's leading halves (and Q6_K's trailing d).
      const size_t scale_at = p.gpu == gpu::WeightType::q6_k ? 208 : 0;
      const int halves = p.gpu == gpu::WeightType::q4_1 || p.gpu == gpu::WeightType::q5_1 || p.gpu == gpu::WeightType::q4_k ? 2 : 1;
      for (int64_t r = 1; r < rows; r += 2)
        for (int64_t b = 0; b < cols / elems; ++b)
          for (int h = 0; h < halves; ++h) {
            const uint16_t s = f32_to_f16(static_cast<float>(rng.normal() * 0.01));
            uint8_t* at = data.data() + r * row_bytes + b * block_bytes + scale_at + 2 * h;
            at[0] = static_cast<uint8_t>(s);
            at[1] = static_cast<uint8_t>(s >> 8);
          }
    }
    WeightMatrix w;
    w.name = "probe";
    w.type = p.cpu;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = row_bytes;
    w.data = data.data();
    std::vector<float> want(static_cast<size_t>(cols));
    int finite = 0;
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_weight_row(w, r, want.data());
      for (int64_t i = 0; i < cols; ++i) {
        const float got = gpu::weight_element(p.gpu, w.row(r), i);
        ASSERT_EQ(bits(got), bits(want[static_cast<size_t>(i)]))
            << ggml_type_name(p.cpu) << " row " << r << " element " << i << ": " << got << " vs " << want[i];
        finite += std::isfinite(got) ? 1 : 0;
      }
    }
    EXPECT_GT(finite, rows * cols / 2) << ggml_type_name(p.cpu);
  }
}

// ggml's quantize_row_q8_K_ref as runtime/weights.cc wrote it before the CPU and GPU shared
// ggml_blocks.h's round_dot_input, restated: the k-quants' input rounding must not move.
void reference_round_q8_k(float* x) {
  float max = 0.0f, amax = 0.0f;
  for (int j = 0; j < 256; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  if (amax == 0.0f) {
    std::fill_n(x, 256, 0.0f);
    return;
  }
  const float iscale = -127.0f / max;
  const float d = 1.0f / iscale;
  for (int j = 0; j < 256; ++j) x[j] = std::min(127.0f, std::nearbyint(iscale * x[j])) * d;
}

// @engine=llama.cpp's matmul input rounding: the GPU's mapping of its weight types and its
// block-per-thread calls (kernels/gpu/gpu_ops.cu) against the CPU runtime's
// round_input_like_llama_cpp, bit for bit, for every weight type; the q8_K rounding also
// against its earlier CPU code. Rows hold a zero block, exact ties and a NaN.
TEST(GpuWeightBlocks, LlamaCppInputRoundingEqualsTheCpuRuntime) {
  Rng rng(44);
  const int n = 3, cols = 512;
  std::vector<float> x(static_cast<size_t>(n) * cols);
  for (float& v : x) v = static_cast<float>(rng.normal() * 2.0);
  std::fill_n(x.begin() + 256, 256, 0.0f);  // a zero q8 block and a zero q8_K super-block
  x[600] = 127.0f;                          // with id = 1, ties 2.5 and -4.5 in its block
  x[601] = 2.5f;
  x[602] = -4.5f;
  x[1100] = NAN;
  for (const TypePair& p : kTypes) {
    std::vector<float> cpu = x, lanes = x;
    round_input_like_llama_cpp(p.cpu, cpu.data(), n, cols);
    const ggml::DotInput dot = gpu::llama_cpp_dot_input(p.gpu);
    const int block = ggml::dot_input_block(dot);
    ASSERT_EQ(cols % block, 0);
    for (size_t i = 0; i < lanes.size(); i += static_cast<size_t>(block)) ggml::round_dot_input(dot, lanes.data() + i);
    for (size_t i = 0; i < cpu.size(); ++i)
      ASSERT_TRUE(bits(lanes[i]) == bits(cpu[i]) || (std::isnan(lanes[i]) && std::isnan(cpu[i])))
          << ggml_type_name(p.cpu) << " element " << i << ": " << lanes[i] << " vs " << cpu[i];
    if (dot == ggml::DotInput::q8_k) {
      std::vector<float> want = x;
      for (size_t i = 0; i < want.size(); i += 256) reference_round_q8_k(want.data() + i);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_TRUE(bits(want[i]) == bits(cpu[i]) || (std::isnan(want[i]) && std::isnan(cpu[i])))
            << ggml_type_name(p.cpu) << " q8_K element " << i;
    }
    if (dot == ggml::DotInput::f32) {
      EXPECT_EQ(std::memcmp(cpu.data(), x.data(), x.size() * sizeof(float)), 0);
    }
  }
}

}  // namespace
}  // namespace kvgate::runtime
