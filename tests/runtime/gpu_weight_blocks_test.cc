// The GPU's weight element decode (kernels/gpu/weight_blocks.h), run on the host, against the
// CPU runtime's dequantize_weight_row: every element of every supported type, bit for bit, so
// the device multiplies by exactly the weights the CPU does (checked here on any machine).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/gpu/weight_blocks.h"
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

}  // namespace
}  // namespace kvgate::runtime
