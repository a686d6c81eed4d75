#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/gpu/gpu_convert.h"

namespace kvgate::kernels::gpu {
namespace {

class GpuConvert : public ::testing::TestWithParam<ElementFormat> {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no " << vendor() << " device present; GPU checks need one";
  }
};

// Inputs that hit every rounding path: random normals at several magnitudes, exact midpoints,
// subnormals, huge values, infinities and NaN.
std::vector<float> probe_values() {
  std::vector<float> v;
  Rng rng(2026);
  for (int i = 0; i < 4097; ++i) v.push_back(static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.below(40)) - 20)));
  for (int e = -30; e < 20; ++e)
    for (float m : {1.0f, 1.0625f, 1.125f, 1.5f, 1.9375f}) v.push_back(std::ldexp(m, e));
  v.insert(v.end(), {0.0f, -0.0f, 448.0f, 464.0f, 1e9f, -1e9f, INFINITY, -INFINITY, NAN});
  return v;
}

uint8_t cpu_code8(ElementFormat f, float x, float scale) {
  const Fp8Kind kind = f == ElementFormat::fp8_e4m3 ? Fp8Kind::e4m3fn
                       : f == ElementFormat::fp8_e5m2 ? Fp8Kind::e5m2
                                                      : Fp8Kind::e4m3fnuz;
  return f32_to_fp8(x / scale, kind);
}

TEST_P(GpuConvert, QuantizeIsBitIdenticalToCpuReference) {
  const ElementFormat f = GetParam();
  const float scale = 0.75f;
  const std::vector<float> x = probe_values();
  std::vector<uint8_t> gpu(x.size() * element_bytes(f), 0xAB);  // poisoned
  quantize_elements(f, scale, x.data(), x.size(), gpu.data());
  for (size_t i = 0; i < x.size(); ++i) {
    if (element_bytes(f) == 2) {
      uint16_t got;
      std::memcpy(&got, gpu.data() + 2 * i, 2);
      const uint16_t want = f == ElementFormat::f16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
      ASSERT_EQ(got, want) << "element " << i << " value " << x[i];
    } else {
      ASSERT_EQ(gpu[i], cpu_code8(f, x[i], scale)) << "element " << i << " value " << x[i];
    }
  }
}

TEST_P(GpuConvert, DequantizeMatchesCpuOnEveryCode) {
  const ElementFormat f = GetParam();
  const size_t n = element_bytes(f) == 2 ? 65536 : 256;
  std::vector<uint8_t> codes(n * element_bytes(f));
  for (size_t i = 0; i < n; ++i) std::memcpy(codes.data() + i * element_bytes(f), &i, element_bytes(f));
  std::vector<float> y(n, -12345.0f);
  dequantize_elements(f, 1.0f, codes.data(), n, y.data());
  for (size_t i = 0; i < n; ++i) {
    float want;
    if (f == ElementFormat::f16) want = f16_to_f32(static_cast<uint16_t>(i));
    else if (f == ElementFormat::bf16) want = bf16_to_f32(static_cast<uint16_t>(i));
    else want = fp8_to_f32(static_cast<uint8_t>(i), f == ElementFormat::fp8_e4m3 ? Fp8Kind::e4m3fn
                                                       : f == ElementFormat::fp8_e5m2 ? Fp8Kind::e5m2
                                                                                      : Fp8Kind::e4m3fnuz);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(y[i])) << "code " << i;
    } else {
      ASSERT_EQ(f32_bits(y[i]), f32_bits(want)) << "code " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllElementFormats, GpuConvert,
                         ::testing::Values(ElementFormat::f16, ElementFormat::bf16, ElementFormat::fp8_e4m3,
                                           ElementFormat::fp8_e5m2, ElementFormat::fp8_e4m3fnuz));

}  // namespace
}  // namespace kvgate::kernels::gpu
