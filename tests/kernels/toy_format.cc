// A toy KV format added in this one place: its registry entry, its codec and its registration
// (docs/adding-a-kv-format.md). Every binary that links this file (tests/kernels,
// tests/workloads) has it in the registry, so everything that iterates the registry covers it
// without another line: the round-trip contract, attention against float64, the spec parser,
// `kvgate kv list`'s rows, the benchmark's format list and the capacity simulator's byte sizes.
// It has no SIMD or GPU kernels (FormatId::external, GpuStorage::none).
//
// toy_i16: per-token symmetric int16, [f32 scale = absmax / 32767][head_dim x int16 q], value
// q * scale, q = round-to-nearest-even(x / scale) clamped to +-32767 (NaN to -32767).
#include "tests/kernels/toy_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/quantized_codec.h"

namespace kvgate::kernels::testing {
namespace {

class ToyI16Codec final : public QuantizedCodec {
 public:
  using QuantizedCodec::QuantizedCodec;
  size_t group_bytes() const override { return 4 + 2 * static_cast<size_t>(head_dim_); }

 protected:
  void encode_row_ref(const float* x, uint8_t* dst) const override {
    float amax = 0.0f;
    for (int i = 0; i < head_dim_; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = amax / 32767.0f;
    std::memcpy(dst, &scale, 4);
    for (int i = 0; i < head_dim_; ++i) {
      const float r = scale == 0.0f ? 0.0f : std::nearbyint(x[i] / scale);
      const int16_t q = !(r >= -32767.0f) ? -32767 : r > 32767.0f ? 32767 : static_cast<int16_t>(r);
      std::memcpy(dst + 4 + 2 * i, &q, 2);
    }
  }
  void decode_row_ref(const uint8_t* src, float* y) const override {
    float scale;
    std::memcpy(&scale, src, 4);
    for (int i = 0; i < head_dim_; ++i) {
      int16_t q;
      std::memcpy(&q, src + 4 + 2 * i, 2);
      y[i] = static_cast<float>(q) * scale;
    }
  }
};

const FormatInfo kToyI16{.id = FormatId::external, .name = kToyFormatName, .family = "toy",
                         .mirrors = "no engine: a test-only format (tests/kernels/toy_format.cc)",
                         .description = "int16 symmetric, f32 scale absmax/32767 per token-head",
                         .for_keys = true, .for_values = true, .head_dim_multiple = 1, .head_dim_power_of_two = false,
                         .options = 0, .gpu = GpuStorage::none, .make = &make_quantized_codec<ToyI16Codec>};

const FormatRegistration kToyRegistration(kToyI16);

}  // namespace

const FormatInfo& toy_format() { return kToyI16; }

}  // namespace kvgate::kernels::testing
