#pragma once
// The RowKernels of one decoder: the entry points the family files (kernels/simd_avx2_<family>.cc)
// put in their tables. Calls over several query rows take the AVX-512 pair drivers when the CPU
// has them (kernels/simd_avx512_pairs.h, the same bits as the AVX2 drivers), else AVX2.
#include "core/cpu_features.h"
#include "kernels/simd_avx512_pairs.h"

namespace kvgate::kernels::simd::avx2 {

template <class D>
bool dot_rows_entry(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens, float* scores) {
  if (f.head_dim % D::kElems != 0) return false;
  if (n_q > 1 && f.head_dim <= kTileMaxHeadDim && cpu_has_avx512())
    avx512::dot_rows_pairs<D>(f, q, n_q, rows, n_tokens, scores);
  else
    dot_rows_impl<D>(f, q, n_q, rows, n_tokens, scores);
  return true;
}
template <class D>
bool axpy_rows_entry(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens, float* acc) {
  if (f.head_dim % D::kElems != 0) return false;
  if (n_q > 1 && cpu_has_avx512())
    avx512::axpy_rows_pairs<D>(f, weights, n_q, rows, n_tokens, acc);
  else
    axpy_rows_impl<D>(f, weights, n_q, rows, n_tokens, acc);
  return true;
}
template <class D>
bool dequantize_row_entry(const RowFormat& f, const uint8_t* row, float* y) {
  if (f.head_dim % D::kElems != 0) return false;
  dequantize_row_impl<D>(f, row, y);
  return true;
}

// The fused paths of decoder D, plus the format's own encoder (null: scalar). Decoders that fold
// a power of two into the scale (the E4M3 ones) or that are not exact per element (nvfp4's -0)
// leave dequantize to the codec's scalar or table path.
template <class D>
constexpr RowKernels decoder_kernels(bool (*quantize_row)(const RowFormat&, const float*, uint8_t*) = nullptr) {
  if constexpr (D::kRawFactor == 1.0f && D::kExactDequant)
    return RowKernels{&dot_rows_entry<D>, &axpy_rows_entry<D>, &dequantize_row_entry<D>, quantize_row};
  else
    return RowKernels{&dot_rows_entry<D>, &axpy_rows_entry<D>, nullptr, quantize_row};
}

}  // namespace kvgate::kernels::simd::avx2
