#pragma once
// The per-row arithmetic of the GPU KV formats, written once for the device and the host (see
// rows_common.h): each family's row functions live in rows_<family>.h, along the CPU codecs'
// seams (kernels/formats_<family>.cc), and with_rows is the one switch on the registry entry's
// FormatId (kernels/format_id.h) that maps a format to them. encode_row, decode_element,
// decode_span and the sizes below are what gpu_kv.cu, gpu_attention.cu and the host tests call.
#include "kernels/gpu/rows_common.h"
#include "kernels/gpu/rows_float.h"
#include "kernels/gpu/rows_fp8.h"
#include "kernels/gpu/rows_ggml.h"
#include "kernels/gpu/rows_kivi.h"
#include "kernels/gpu/rows_nvfp4.h"
#include "kernels/gpu/rows_pth.h"
#include "kernels/gpu/rows_turboquant.h"
#include "kernels/gpu/rows_uniform.h"

namespace kvgate::kernels::gpu {

// A format without GPU kernels (its registry entry's gpu is GpuStorage::none). The host checks
// the entry before anything reaches the device, so these are never asked for bytes.
struct NoRows {
  KVGATE_HD static size_t row_bytes(int, const TqParams*) { return 0; }
  KVGATE_HD static void encode(const RowArgs&, const float*, uint8_t*) {}
  KVGATE_HD static float element(const RowArgs&, const uint8_t*, int) { return 0.0f; }
  template <int N>
  KVGATE_HD static void span(const RowArgs&, const uint8_t*, int, int, float* y) {
    for (int k = 0; k < N; ++k) y[k] = 0.0f;
  }
};

// Every GPU format and its row functions, the one table with_rows and RowsFor read. Adding a
// GPU format adds its line here.
#define KVGATE_GPU_ROWS(X)                          \
  X(f32, F32Rows)                                   \
  X(f16, F16Rows)                                   \
  X(bf16, BF16Rows)                                 \
  X(fp8_e4m3, Fp8Rows<Fp8Kind::e4m3fn>)             \
  X(fp8_e5m2, Fp8Rows<Fp8Kind::e5m2>)               \
  X(fp8_e4m3fnuz, Fp8Rows<Fp8Kind::e4m3fnuz>)       \
  X(int8_pth, Int8PthRows)                          \
  X(fp8_pth, Fp8PthRows)                            \
  X(int4_pth, Int4PthRows)                          \
  X(q8_0, GgmlRows<ggml::Q8_0>)                     \
  X(q5_0, GgmlRows<ggml::Q5_0>)                     \
  X(q5_1, GgmlRows<ggml::Q5_1>)                     \
  X(q4_0, GgmlRows<ggml::Q4_0>)                     \
  X(q4_1, GgmlRows<ggml::Q4_1>)                     \
  X(iq4_nl, GgmlRows<ggml::IQ4_NL>)                 \
  X(mxfp4, GgmlRows<ggml::MXFP4>)                   \
  X(nvfp4, Nvfp4Rows<false>)                        \
  X(nvfp4_4over6, Nvfp4Rows<true>)                  \
  X(kivi2_k, KiviKeyRows<2>)                        \
  X(kivi2_v, KiviValueRows<2>)                      \
  X(kivi4_k, KiviKeyRows<4>)                        \
  X(kivi4_v, KiviValueRows<4>)                      \
  X(tq1, TqRows<1, 0>)                              \
  X(tq2, TqRows<2, 0>)                              \
  X(tq2_5, TqRows<2, 4>)                            \
  X(tq3, TqRows<3, 0>)                              \
  X(tq3_5, TqRows<3, 4>)                            \
  X(tq4, TqRows<4, 0>)                              \
  X(tqprod2, TqProdRows<1>)                         \
  X(tqprod3, TqProdRows<2>)                         \
  X(tqprod4, TqProdRows<3>)                         \
  X(u2, UniformRows<2>)                             \
  X(u3, UniformRows<3>)                             \
  X(u4, UniformRows<4>)                             \
  X(u8, UniformRows<8>)

// The row functions of format F at compile time (the attention kernels' tile loaders, kv_tile.h).
template <FormatId F>
struct RowsFor {
  using type = NoRows;
};
#define KVGATE_ROWS_FOR(id, ...) \
  template <>                    \
  struct RowsFor<FormatId::id> { \
    using type = __VA_ARGS__;    \
  };
KVGATE_GPU_ROWS(KVGATE_ROWS_FOR)
#undef KVGATE_ROWS_FOR

// Calls fn(Rows{}) with the row functions of format f (the run-time switch; the attention
// kernels take the format at compile time instead, through RowsFor).
template <class Fn>
KVGATE_HD auto with_rows(FormatId f, Fn&& fn) -> decltype(fn(NoRows{})) {
  switch (f) {
#define KVGATE_ROWS_CASE(id, ...) \
  case FormatId::id:              \
    return fn(__VA_ARGS__{});
    KVGATE_GPU_ROWS(KVGATE_ROWS_CASE)
#undef KVGATE_ROWS_CASE
    case FormatId::fp4_mx_block16:  // CPU only for now (GpuStorage::none)
    case FormatId::external: break;
  }
  return fn(NoRows{});
}

// ---- family shapes the host side needs (TurboQuant constants, KIVI groups), read off the rows ----
template <class Rows>
KVGATE_HD TqShape tq_shape_of(Rows) { return {}; }
template <int kBits, int kDivisor>
KVGATE_HD TqShape tq_shape_of(TqRows<kBits, kDivisor>) { return TqRows<kBits, kDivisor>::kTq; }
template <int kBits>
KVGATE_HD TqShape tq_shape_of(TqProdRows<kBits>) { return TqProdRows<kBits>::kTq; }
template <class Rows>
KVGATE_HD KiviShape kivi_shape_of(Rows) { return {}; }
template <int kBits>
KVGATE_HD KiviShape kivi_shape_of(KiviKeyRows<kBits>) { return KiviKeyRows<kBits>::kKivi; }
template <int kBits>
KVGATE_HD KiviShape kivi_shape_of(KiviValueRows<kBits>) { return KiviValueRows<kBits>::kKivi; }

KVGATE_HD TqShape tq_shape(FormatId f) {
  return with_rows(f, [](auto rows) { return tq_shape_of(rows); });
}
KVGATE_HD KiviShape kivi_shape(FormatId f) {
  return with_rows(f, [](auto rows) { return kivi_shape_of(rows); });
}
// Every TurboQuant key format: rotated rows, codec constants in TqParams.
KVGATE_HD bool is_tq(FormatId f) { return tq_shape(f).bits > 0; }
KVGATE_HD bool is_tqprod(FormatId f) { return tq_shape(f).prod; }
// The code width past the outlier channels (TqParams::bits).
KVGATE_HD int tq_bits(FormatId f) { return tq_shape(f).bits; }
// Outlier channels when the spec names none (make_mse in kernels/formats_turboquant.cc).
KVGATE_HD int tq_default_outliers(FormatId f, int head_dim) {
  const TqShape s = tq_shape(f);
  return s.outlier_divisor ? head_dim / s.outlier_divisor : 0;
}
KVGATE_HD bool is_kivi(FormatId f) { return kivi_shape(f).bits > 0; }
KVGATE_HD bool is_kivi_key(FormatId f) { return kivi_shape(f).key; }
KVGATE_HD bool is_kivi_value(FormatId f) { return is_kivi(f) && !kivi_shape(f).key; }
KVGATE_HD int kivi_bits(FormatId f) { return kivi_shape(f).bits; }

// ---- rows ----

// Bytes of one row. Callers check the head_dim first (kernels/gpu/kv_formats.h: kv_row_bytes).
// `tq`: the outlier channels of tq{b} rows (null: the format's default).
KVGATE_HD size_t row_bytes(FormatId f, int head_dim, const TqParams* tq = nullptr) {
  return with_rows(f, [&](auto rows) { return decltype(rows)::row_bytes(head_dim, tq); });
}

// Bytes of one storage unit: a row, or for KIVI keys a group of `group` tokens.
KVGATE_HD size_t unit_bytes(FormatId f, int head_dim, int group, const TqParams* tq = nullptr) {
  if (!is_kivi_key(f)) return row_bytes(f, head_dim, tq);
  return 4 * static_cast<size_t>(head_dim) + (static_cast<size_t>(group) * head_dim * kivi_bits(f) + 7) / 8;
}

// One row, sequentially, exactly as the CPU codec's quantize_ref. `tensor_scale` is the
// per-tensor scale of the fp8_e4m3/e5m2/e4m3fnuz formats (stored = fp8(x / scale)) and the
// global scale of nvfp4. `tq`: the codec constants of the TurboQuant keys (ignored by the
// others). `rot`: the ggml formats' Hadamard rotation, or null (the others take none). KIVI keys
// are encoded a group at a time (encode_kivi_key_group), not here.
KVGATE_HD void encode_row(FormatId f, int head_dim, float tensor_scale, const float* x, uint8_t* dst,
                          const TqParams* tq = nullptr, const RotationParams* rot = nullptr) {
  const RowArgs a{head_dim, tensor_scale, tq, rot, 0};
  with_rows(f, [&](auto rows) { decltype(rows)::encode(a, x, dst); });
}

// Element i of a row, as the CPU codec's dequantize_ref computes it (TurboQuant and rotated ggml
// rows: in the rotated basis, as dequantize_stored_ref). KIVI keys: token `sub` of the group.
KVGATE_HD float decode_element(FormatId f, const uint8_t* row, int i, float tensor_scale, const TqParams* tq = nullptr,
                               int sub = 0, int head_dim = 0) {
  const RowArgs a{head_dim, tensor_scale, tq, nullptr, sub};
  return with_rows(f, [&](auto rows) { return decltype(rows)::element(a, row, i); });
}

// Elements [i0, i0 + n) of a row (n <= N; y[k] = 0 for k >= n), each equal to decode_element's.
// i0 is a multiple of N and N divides 16, so a span lies inside one ggml or nvfp4 block and the
// row or block scale is read once: the attention kernels decode their rows through this.
template <int N>
KVGATE_HD void decode_span(FormatId f, const uint8_t* row, int i0, int n, float tensor_scale, float* y,
                           const TqParams* tq = nullptr, int sub = 0, int head_dim = 0) {
  const RowArgs a{head_dim, tensor_scale, tq, nullptr, sub};
  with_rows(f, [&](auto rows) { decltype(rows)::template span<N>(a, row, i0, n, y); });
}

KVGATE_HD void decode_row(FormatId f, int head_dim, float tensor_scale, const uint8_t* row, float* y,
                          const TqParams* tq = nullptr, int sub = 0) {
  for (int i = 0; i < head_dim; ++i) y[i] = decode_element(f, row, i, tensor_scale, tq, sub, head_dim);
}

}  // namespace kvgate::kernels::gpu
