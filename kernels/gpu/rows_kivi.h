#pragma once
// GPU rows of KIVI, as kernels/formats_kivi.cc stores them: asymmetric codes with the fp16
// (scale, min) as stored. Keys: a group of G tokens per unit, per channel c: scale[c] | min[c]
// (fp16) | codes token-major (index t * d + c), b bits LSB-first. Values: per token, (scale, min)
// per 32 channels | codes. The cache quantizes them from its f16 window, so the encoders read
// what the window holds.
#include "kernels/gpu/rows_common.h"

namespace kvgate::kernels::gpu {

inline constexpr int kKiviDefaultGroup = 32;       // tokens per key group (kernels/formats_kivi.cc)
inline constexpr int kKiviValueChannelGroup = 32;  // channels per value scale

KVGATE_HD float kivi_f16(float v) {  // to_f16 with the clamp to +-65504 (NaN passes through)
  return f16_to_f32(f32_to_f16(v < -65504.0f ? -65504.0f : (65504.0f < v ? 65504.0f : v)));
}
KVGATE_HD uint32_t kivi_code_at(const uint8_t* codes, size_t index, int bits) {
  const size_t bit = index * bits;
  return (codes[bit >> 3] >> (bit & 7)) & ((1u << bits) - 1u);
}
KVGATE_HD void kivi_put_code(uint8_t* codes, size_t index, int bits, uint32_t code) {
  const size_t bit = index * bits;
  codes[bit >> 3] |= static_cast<uint8_t>(code << (bit & 7));
}
struct KiviRange {
  float scale, min;
};
KVGATE_HD KiviRange kivi_range(float lo, float hi, int bits) {
  const float min = kivi_f16(lo);
  return {kivi_f16(rn_div(rn_sub(hi, min), static_cast<float>((1 << bits) - 1))), min};
}
KVGATE_HD uint32_t kivi_encode(float x, KiviRange r, int bits) {
  if (!(r.scale > 0.0f)) return 0;
  const float q = rintf(rn_div(rn_sub(x, r.min), r.scale));
  const float top = static_cast<float>((1 << bits) - 1);
  const float v = q != q ? 0.0f : q;
  return static_cast<uint32_t>(v < 0.0f ? 0.0f : (top < v ? top : v));  // std::clamp(v, 0, top)
}
KVGATE_HD void store_f16_of(uint8_t* p, float v) { store_u16(p, f32_to_f16(v < -65504.0f ? -65504.0f : (65504.0f < v ? 65504.0f : v))); }

// A group of `group` key tokens; row t of the group is rows_f16 + t * stride (halves).
KVGATE_HD void encode_kivi_key_group(int bits, int head_dim, int group, const uint16_t* rows_f16, size_t stride,
                                     uint8_t* dst) {
  const size_t d = static_cast<size_t>(head_dim);
  const size_t bytes = 4 * d + (static_cast<size_t>(group) * d * bits + 7) / 8;
  for (size_t b = 0; b < bytes; ++b) dst[b] = 0;
  uint8_t* codes = dst + 4 * d;
  for (size_t c = 0; c < d; ++c) {
    float lo = f16_to_f32(rows_f16[c]), hi = lo;
    for (int t = 1; t < group; ++t) {
      const float x = f16_to_f32(rows_f16[t * stride + c]);
      lo = x < lo ? x : lo;  // std::min(lo, x)
      hi = hi < x ? x : hi;  // std::max(hi, x)
    }
    const KiviRange r = kivi_range(lo, hi, bits);
    store_f16_of(dst + 2 * c, r.scale);
    store_f16_of(dst + 2 * (d + c), r.min);
    for (int t = 0; t < group; ++t)
      kivi_put_code(codes, t * d + c, bits, kivi_encode(f16_to_f32(rows_f16[t * stride + c]), r, bits));
  }
}

// libstdc++'s std::minmax_element over n floats, pair by pair, so NaN inputs pick the same
// elements the CPU reference picks.
KVGATE_HD void minmax_like_libstdcxx(const float* x, int n, float* lo, float* hi) {
  int mn = 0, mx = 0;
  int i = 1;
  if (n > 1) {
    if (x[1] < x[mn]) mn = 1;
    else mx = 1;
    i = 2;
  }
  while (i < n) {
    const int a = i;
    if (i + 1 == n) {
      if (x[a] < x[mn]) mn = a;
      else if (!(x[a] < x[mx])) mx = a;
      break;
    }
    const int b = i + 1;
    if (x[b] < x[a]) {
      if (x[b] < x[mn]) mn = b;
      if (!(x[a] < x[mx])) mx = a;
    } else {
      if (x[a] < x[mn]) mn = a;
      if (!(x[b] < x[mx])) mx = b;
    }
    i += 2;
  }
  *lo = x[mn];
  *hi = x[mx];
}

KVGATE_HD void encode_kivi_value(int bits, int head_dim, const float* x, uint8_t* dst) {
  const int groups = head_dim / kKiviValueChannelGroup;
  const size_t bytes = 4 * static_cast<size_t>(groups) + (static_cast<size_t>(head_dim) * bits + 7) / 8;
  for (size_t b = 0; b < bytes; ++b) dst[b] = 0;
  uint8_t* codes = dst + 4 * groups;
  for (int g = 0; g < groups; ++g) {
    const float* part = x + g * kKiviValueChannelGroup;
    float lo, hi;
    minmax_like_libstdcxx(part, kKiviValueChannelGroup, &lo, &hi);
    const KiviRange r = kivi_range(lo, hi, bits);
    store_f16_of(dst + 4 * g, r.scale);
    store_f16_of(dst + 4 * g + 2, r.min);
    for (int c = 0; c < kKiviValueChannelGroup; ++c)
      kivi_put_code(codes, static_cast<size_t>(g) * kKiviValueChannelGroup + c, bits, kivi_encode(part[c], r, bits));
  }
}

// What the GPU host code needs to know of a KIVI format (kernels/gpu/kv_rows.h: rows_info).
struct KiviShape {
  int bits = 0;
  bool key = false;
};

// Keys: a unit is a group of tokens (RowArgs::sub picks one); row_bytes is the default group's.
template <int kBits>
struct KiviKeyRows {
  static constexpr KiviShape kKivi{kBits, true};
  KVGATE_HD static size_t unit_bytes(int head_dim, int group) {
    return 4 * static_cast<size_t>(head_dim) + (static_cast<size_t>(group) * head_dim * kBits + 7) / 8;
  }
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) { return unit_bytes(head_dim, kKiviDefaultGroup); }
  KVGATE_HD static void encode(const RowArgs&, const float*, uint8_t*) {}  // a group at a time: encode_kivi_key_group
  KVGATE_HD static float element(const RowArgs& a, const uint8_t* row, int i) {
    const size_t d = static_cast<size_t>(a.head_dim);
    return rn_add(rn_mul(static_cast<float>(kivi_code_at(row + 4 * d, a.sub * d + i, kBits)), f16_to_f32(load_u16(row + 2 * i))),
                  f16_to_f32(load_u16(row + 2 * (d + i))));
  }
  template <int N>
  KVGATE_HD static void span(const RowArgs& a, const uint8_t* row, int i0, int n, float* y) {
    span_by_element<KiviKeyRows, N>(a, row, i0, n, y);
  }
};

// Values: one token per unit.
template <int kBits>
struct KiviValueRows {
  static constexpr KiviShape kKivi{kBits, false};
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) {
    return 4 * static_cast<size_t>(head_dim / kKiviValueChannelGroup) + (static_cast<size_t>(head_dim) * kBits + 7) / 8;
  }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) { encode_kivi_value(kBits, a.head_dim, x, dst); }
  KVGATE_HD static float element(const RowArgs& a, const uint8_t* row, int i) {
    const uint8_t* scales = row + 4 * (i / kKiviValueChannelGroup);
    const int groups = a.head_dim / kKiviValueChannelGroup;
    return rn_add(rn_mul(static_cast<float>(kivi_code_at(row + 4 * groups, i, kBits)), f16_to_f32(load_u16(scales))),
                  f16_to_f32(load_u16(scales + 2)));
  }
  template <int N>
  KVGATE_HD static void span(const RowArgs& a, const uint8_t* row, int i0, int n, float* y) {
    span_by_element<KiviValueRows, N>(a, row, i0, n, y);
  }
};

}  // namespace kvgate::kernels::gpu
