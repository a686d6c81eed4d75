#pragma once
// Test data shared by the host test of the GPU row arithmetic (tests/kernels/gpu_rows_test.cc)
// and the device tests (tests/gpu): shapes, scales and the probe rows that stress every format.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/gpu/kv_rows.h"
#include "kernels/kv_format.h"

namespace kvgate::kernels::gpu::testing {

inline const FormatInfo& entry(FormatId f) { return *find_format(f); }

// Odd sizes where the format allows them, so no kernel can lean on a power-of-two shape: the
// smallest of these the registry entry's head_dim rule takes.
inline int head_dim_for(FormatId f) {
  const FormatInfo& e = entry(f);
  if (e.gpu == GpuStorage::turboquant || e.gpu == GpuStorage::windowed) return 64;  // Hadamard: a power of two
  for (int d : {67, 70, 68, 72, 80, 96})
    if (d % e.head_dim_multiple == 0) return d;
  return 256;
}

// A per-tensor scale that moves the test data across the fp8 exponents; for nvfp4 a global
// scale that is not a power of two, so the block scale's product with it rounds.
inline float tensor_scale_for(FormatId f) {
  if (!entry(f).accepts(kOptionScale)) return 1.0f;
  return f == FormatId::nvfp4 || f == FormatId::nvfp4_4over6 ? 0.3f : 0.0625f;
}

// Rows at magnitudes from 2^-20 to 2^10, plus the rows that stress the edge cases: all zeros,
// a NaN, infinities, subnormals, exact halves (rounding ties), a negative largest magnitude, and
// given 9 rows or more the grid ties of two formats whose block scale those rows make exactly 1:
// iq4_nl's (each 32-block opens with -127, then grid values and the midpoints between them) and
// nvfp4's at global scale 1 (each 16-block opens with 6, then every E2M1 midpoint, both signs),
// and 32-blocks whose largest magnitude alternates just above and below iq4_nl's 1e-15 cutoff.
inline std::vector<float> probe_rows(int head_dim, int n_rows, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(head_dim) * n_rows);
  for (int r = 0; r < n_rows; ++r) {
    const double magnitude = std::ldexp(1.0, static_cast<int>(rng.below(31)) - 20);
    for (int i = 0; i < head_dim; ++i) x[static_cast<size_t>(r) * head_dim + i] = static_cast<float>(rng.normal() * magnitude);
  }
  auto row = [&](int r) { return x.data() + static_cast<size_t>(r) * head_dim; };
  std::fill(row(0), row(1), 0.0f);
  row(1)[5] = NAN;
  row(2)[3] = INFINITY;
  row(2)[40] = -INFINITY;
  for (int i = 0; i < head_dim; ++i) row(3)[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, -140);
  for (int i = 0; i < head_dim; ++i) row(4)[i] = 0.5f * static_cast<float>(i % 17) - 4.0f;
  row(5)[7] = -1000.0f;
  if (n_rows > 8) {
    const int8_t grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    for (int i = 0; i < head_dim; ++i) {
      const int k = i % 31;
      row(6)[i] = i % 32 == 0 ? -127.0f : k < 15 ? 0.5f * static_cast<float>(grid[k] + grid[k + 1]) : grid[k - 15];
    }
    const float e2m1_ties[8] = {6.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    for (int i = 0; i < head_dim; ++i) row(7)[i] = (i % 16 < 8 ? 1.0f : -1.0f) * e2m1_ties[i % 8];
    for (int i = 0; i < head_dim; ++i) row(8)[i] = std::ldexp(static_cast<float>(i % 7) - 3.0f, -51 - (i / 32) % 2);
  }
  return x;
}

inline bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || f32_bits(a) == f32_bits(b); }

}  // namespace kvgate::kernels::gpu::testing
