#pragma once
// GPU rows of the TurboQuant keys, as kernels/formats_turboquant.cc stores them: tq{b}
// (TurboQuantMseCodec) and tqprod{b} (TurboQuantProdCodec). Values are in the rotated basis;
// attention rotates the query instead (kernels/gpu/gpu_attention.cu). The codec constants come
// from the host (kernels/gpu/tq_params.h) in TqParams.
#include "kernels/gpu/rows_common.h"

namespace kvgate::kernels::gpu {

// The constants of a TurboQuant key codec (tq1..tq4, tq2.5, tq3.5, tqprod2..4): the rotation
// (Walsh-Hadamard signs and scale, or rot=qr's dense matrix) and the Lloyd-Max codebooks scaled
// for N(0, 1/head_dim), built on the host from the same seed and solution as the CPU codec
// (kernels/gpu/tq_params.h). The dense matrices are pointers: host memory for host code, device
// memory once DevicePagedKv has uploaded them.
struct TqParams {
  int bits = 0;      // b: the width of the codes past the outlier channels (tqprod{b}: b - 1)
  int outliers = 0;  // the first `outliers` rotated coordinates take b + 1 bits (tq2.5, tq3.5, :outliers=)
  bool norm_correction = false;
  float rotation_scale = 1.0f;  // 1/sqrt(head_dim) as a float, as HadamardRotation holds it
  float signs[kTqMaxHeadDim] = {};
  float centroids[16] = {};
  float thresholds[15] = {};
  float outlier_centroids[32] = {};  // the (b + 1)-bit codebook
  float outlier_thresholds[31] = {};
  // tqprod{b}: S, head_dim x head_dim row-major (iid N(0, 1) from the seed), and sqrt(pi/2)/head_dim.
  const float* sketch = nullptr;
  float qjl_scale = 0.0f;
  // rot=qr: Q, head_dim x head_dim row-major (OrthogonalRotation::matrix); null for the
  // Walsh-Hadamard rotation (signs, rotation_scale).
  const float* rotation_matrix = nullptr;
};

// ---- tq{b} ----
// Layout: [f16 norm][codes, LSB-first, rotated coordinate 0 first: b + 1 bits for the first
// `outliers` coordinates, b for the rest].

KVGATE_HD size_t tq_code_bits(int bits, int outliers, int head_dim) {
  return static_cast<size_t>(outliers) * (bits + 1) + static_cast<size_t>(head_dim - outliers) * bits;
}
// Coordinate i's code: the outlier channels' (b + 1)-bit codes come first in the stream.
KVGATE_HD uint32_t tq_code(const TqParams& p, const uint8_t* codes, int i) {
  const bool outlier = i < p.outliers;
  const int width = outlier ? p.bits + 1 : p.bits;
  const int first = outlier ? i * width : p.outliers * (p.bits + 1) + (i - p.outliers) * p.bits;
  uint32_t code = 0;
  for (int k = 0; k < width; ++k) {
    const int bit = first + k;
    code |= static_cast<uint32_t>((codes[bit >> 3] >> (bit & 7)) & 1u) << k;
  }
  return code;
}
KVGATE_HD float tq_centroid(const TqParams& p, int i, uint32_t code) {
  return i < p.outliers ? p.outlier_centroids[code] : p.centroids[code];
}

// y = R u for the unit key u = x * inv, as KeyRotation::forward computes it: the Walsh-Hadamard
// rotation, or rot=qr's Q with each output summed in double (OrthogonalRotation::forward).
KVGATE_HD void tq_rotate_unit(const TqParams& p, int head_dim, const float* x, float inv, float* y) {
  if (p.rotation_matrix) {
    float unit[kTqMaxHeadDim];
    for (int i = 0; i < head_dim; ++i) unit[i] = rn_mul(x[i], inv);
    for (int row = 0; row < head_dim; ++row) {
      // Products of two floats are exact in double, so a fused multiply-add cannot change the sum.
      const float* q = p.rotation_matrix + static_cast<size_t>(row) * head_dim;
      double sum = 0.0;
      for (int col = 0; col < head_dim; ++col) sum += static_cast<double>(q[col]) * unit[col];
      y[row] = static_cast<float>(sum);
    }
    return;
  }
  for (int i = 0; i < head_dim; ++i) y[i] = rn_mul(rn_mul(x[i], inv), p.signs[i]);
  fwht(y, head_dim);
  for (int i = 0; i < head_dim; ++i) y[i] = rn_mul(y[i], p.rotation_scale);
}

KVGATE_HD void encode_tq(const TqParams& p, int head_dim, const float* x, uint8_t* dst) {
  const int code_bytes = static_cast<int>((tq_code_bits(p.bits, p.outliers, head_dim) + 7) / 8);
  for (int b = 0; b < 2 + code_bytes; ++b) dst[b] = 0;
  double norm2 = 0.0;
  for (int i = 0; i < head_dim; ++i) norm2 += static_cast<double>(x[i]) * x[i];
  const double norm = sqrt(norm2);
  if (!(norm > 0.0) || !(norm <= DBL_MAX)) return;  // a zero or non-finite key: the zero vector
  const float inv = static_cast<float>(1.0 / norm);
  float y[kTqMaxHeadDim];
  tq_rotate_unit(p, head_dim, x, inv, y);
  double centroid_norm2 = 0.0;
  int bit = 0;
  for (int i = 0; i < head_dim; ++i) {
    const float v = y[i];
    const bool outlier = i < p.outliers;
    const int width = outlier ? p.bits + 1 : p.bits;
    const float* thresholds = outlier ? p.outlier_thresholds : p.thresholds;
    const int last = (1 << width) - 1;
    int code = 0;  // std::upper_bound over the thresholds: how many are <= v (all of them for NaN)
    while (code < last && !(v < thresholds[code])) ++code;
    for (int k = 0; k < width; ++k, ++bit)
      if ((code >> k) & 1) dst[2 + (bit >> 3)] |= static_cast<uint8_t>(1u << (bit & 7));
    const float c = tq_centroid(p, i, static_cast<uint32_t>(code));
    centroid_norm2 += static_cast<double>(c) * c;
  }
  const double stored = p.norm_correction ? norm / sqrt(centroid_norm2) : norm;
  store_u16(dst, f32_to_f16(static_cast<float>(65504.0 < stored ? 65504.0 : stored)));
}

// ---- tqprod{b} ----
// Layout: [f16 norm][f16 residual norm gamma][(b-1)-bit codes as tq{b-1}][head_dim sign bits,
// LSB-first, 1 = +]. The signs are sign(S r) of the residual r = y - c of the rotated unit key.

KVGATE_HD const uint8_t* tqprod_signs(const TqParams& p, const uint8_t* row, int head_dim) {
  return row + 4 + (head_dim * p.bits + 7) / 8;
}
KVGATE_HD float tqprod_sign(const uint8_t* signs, int j) { return (signs[j >> 3] >> (j & 7)) & 1u ? 1.0f : -1.0f; }

KVGATE_HD void encode_tqprod(const TqParams& p, int head_dim, const float* x, uint8_t* dst) {
  const int code_bytes = (head_dim * p.bits + 7) / 8;
  for (int b = 0; b < 4 + code_bytes + (head_dim + 7) / 8; ++b) dst[b] = 0;
  double norm2 = 0.0;
  for (int i = 0; i < head_dim; ++i) norm2 += static_cast<double>(x[i]) * x[i];
  const double norm = sqrt(norm2);
  if (!(norm > 0.0) || !(norm <= DBL_MAX)) return;  // a zero or non-finite key: all zero bytes
  const float inv = static_cast<float>(1.0 / norm);
  float y[kTqMaxHeadDim];
  tq_rotate_unit(p, head_dim, x, inv, y);
  const int last = (1 << p.bits) - 1;
  double r2 = 0.0;
  for (int i = 0; i < head_dim; ++i) {
    int code = 0;  // as encode_tq
    while (code < last && !(y[i] < p.thresholds[code])) ++code;
    for (int k = 0; k < p.bits; ++k) {
      const int bit = i * p.bits + k;
      if ((code >> k) & 1) dst[4 + (bit >> 3)] |= static_cast<uint8_t>(1u << (bit & 7));
    }
    y[i] = rn_sub(y[i], p.centroids[code]);  // the residual, in place
    r2 += static_cast<double>(y[i]) * y[i];
  }
  uint8_t* signs = dst + 4 + code_bytes;
  for (int j = 0; j < head_dim; ++j) {
    // Products of two floats are exact in double, so a fused multiply-add cannot change the sum.
    const float* s_row = p.sketch + static_cast<size_t>(j) * head_dim;
    double s = 0.0;
    for (int i = 0; i < head_dim; ++i) s += static_cast<double>(s_row[i]) * y[i];
    if (s >= 0.0) signs[j >> 3] |= static_cast<uint8_t>(1u << (j & 7));
  }
  store_u16(dst, f32_to_f16(static_cast<float>(65504.0 < norm ? 65504.0 : norm)));
  const double gamma = sqrt(r2);
  store_u16(dst + 2, f32_to_f16(static_cast<float>(65504.0 < gamma ? 65504.0 : gamma)));
}

// Element i in the rotated basis (dequantize_stored_ref): ||k|| (c_i + qjl_scale gamma (S^T z)_i),
// (S^T z)_i summed in double over j in order. O(head_dim) per element: attention never calls it
// (it scores keys with tqprod_spans against S q).
KVGATE_HD float tqprod_element(const TqParams& p, int head_dim, const uint8_t* row, int i) {
  const uint8_t* signs = tqprod_signs(p, row, head_dim);
  double back = 0.0;
  for (int j = 0; j < head_dim; ++j)
    back += static_cast<double>(tqprod_sign(signs, j)) * p.sketch[static_cast<size_t>(j) * head_dim + i];
  const float c = p.centroids[tq_code(p, row + 4, i)];
  const float norm = f16_to_f32(load_u16(row)), gamma = f16_to_f32(load_u16(row + 2));
  return rn_mul(norm, rn_add(c, rn_mul(rn_mul(p.qjl_scale, gamma), static_cast<float>(back))));
}

// sq = S q for a rotated query (TurboQuantProdCodec::sketch_query: float, i in order).
KVGATE_HD void tqprod_sketch_query(const TqParams& p, int head_dim, const float* q, float* sq) {
  for (int j = 0; j < head_dim; ++j) {
    const float* s_row = p.sketch + static_cast<size_t>(j) * head_dim;
    float s = 0.0f;
    for (int i = 0; i < head_dim; ++i) s = rn_add(s, rn_mul(s_row[i], q[i]));
    sq[j] = s;
  }
}

// <q, k~> = ||k|| (<q, c> + qjl_scale gamma <S q, z>) as the CPU codec's dot_ref computes it.
KVGATE_HD float tqprod_dot(const TqParams& p, int head_dim, const float* q, const float* sq, const uint8_t* row) {
  const uint8_t* signs = tqprod_signs(p, row, head_dim);
  float mse_part = 0.0f, qjl_part = 0.0f;
  for (int i = 0; i < head_dim; ++i) {
    mse_part = rn_add(mse_part, rn_mul(q[i], p.centroids[tq_code(p, row + 4, i)]));
    qjl_part = (signs[i >> 3] >> (i & 7)) & 1u ? rn_add(qjl_part, sq[i]) : rn_sub(qjl_part, sq[i]);
  }
  const float norm = f16_to_f32(load_u16(row)), gamma = f16_to_f32(load_u16(row + 2));
  return rn_mul(norm, rn_add(mse_part, rn_mul(rn_mul(p.qjl_scale, gamma), qjl_part)));
}

// The two halves of the score over elements [i0, i0 + n) (zero past n): mse[k] = ||k|| c_i
// against q, qjl[k] = +-||k|| qjl_scale gamma against S q; their sum over a row is <q, k~>.
template <int N>
KVGATE_HD void tqprod_spans(const TqParams& p, int head_dim, const uint8_t* row, int i0, int n, float* mse, float* qjl) {
  const float norm = f16_to_f32(load_u16(row));
  const float weight = rn_mul(norm, rn_mul(p.qjl_scale, f16_to_f32(load_u16(row + 2))));
  const uint8_t* signs = tqprod_signs(p, row, head_dim);
  KVGATE_UNROLL
  for (int k = 0; k < N; ++k) {
    mse[k] = k < n ? rn_mul(norm, p.centroids[tq_code(p, row + 4, i0 + k)]) : 0.0f;
    qjl[k] = k < n ? rn_mul(tqprod_sign(signs, i0 + k), weight) : 0.0f;
  }
}

// What the GPU host code needs to know of a TurboQuant key format (kernels/gpu/kv_rows.h:
// rows_info): the code width past the outlier channels (TqParams::bits; tqprod{b} spends one of
// its b bits on the QJL sign) and the default outlier channels, head_dim / divisor (tq2.5, tq3.5).
struct TqShape {
  int bits = 0;
  int outlier_divisor = 0;
  bool prod = false;
};

// tq{b}, tq{b}.5: kBits-bit codes; with kOutlierDivisor, head_dim / kOutlierDivisor channels at
// kBits + 1 unless the spec names a count (TqParams::outliers).
template <int kBits, int kOutlierDivisor>
struct TqRows {
  static constexpr TqShape kTq{kBits, kOutlierDivisor, false};
  KVGATE_HD static int default_outliers(int head_dim) { return kOutlierDivisor ? head_dim / kOutlierDivisor : 0; }
  // `tq`: the constants' outlier count, or null for the format's default.
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams* tq) {
    return 2 + (tq_code_bits(kBits, tq ? tq->outliers : default_outliers(head_dim), head_dim) + 7) / 8;
  }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) { encode_tq(*a.tq, a.head_dim, x, dst); }
  KVGATE_HD static float element(const RowArgs& a, const uint8_t* row, int i) {
    return rn_mul(f16_to_f32(load_u16(row)), tq_centroid(*a.tq, i, tq_code(*a.tq, row + 2, i)));
  }
  template <int N>
  KVGATE_HD static void span(const RowArgs& a, const uint8_t* row, int i0, int n, float* y) {
    const float norm = f16_to_f32(load_u16(row));
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k)
      y[k] = k < n ? rn_mul(norm, tq_centroid(*a.tq, i0 + k, tq_code(*a.tq, row + 2, i0 + k))) : 0.0f;
  }
};

// tqprod{b}: kBits = b - 1 code bits plus the QJL sign. Attention scores its keys with
// tqprod_spans against q and S q; span() (element by element, O(head_dim) each) serves tests.
template <int kBits>
struct TqProdRows {
  static constexpr TqShape kTq{kBits, 0, true};
  KVGATE_HD static size_t row_bytes(int head_dim, const TqParams*) {
    const size_t d = static_cast<size_t>(head_dim);
    return 4 + (d * kBits + 7) / 8 + (d + 7) / 8;
  }
  KVGATE_HD static void encode(const RowArgs& a, const float* x, uint8_t* dst) { encode_tqprod(*a.tq, a.head_dim, x, dst); }
  KVGATE_HD static float element(const RowArgs& a, const uint8_t* row, int i) {
    return tqprod_element(*a.tq, a.head_dim, row, i);
  }
  template <int N>
  KVGATE_HD static void span(const RowArgs& a, const uint8_t* row, int i0, int n, float* y) {
    span_by_element<TqProdRows, N>(a, row, i0, n, y);
  }
};

}  // namespace kvgate::kernels::gpu
