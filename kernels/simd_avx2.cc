// The public entry points of the AVX2 row paths: check the running CPU, then dispatch on the
// registry entry's FormatId to its family's kernels (kernels/simd_avx2_<family>.cc).
#include "kernels/simd_avx2.h"

#include <array>

#include "core/cpu_features.h"
#include "kernels/simd_avx2_rows.h"
#include "kernels/simd_avx512_util.h"

namespace kvgate::kernels::simd {
namespace {

using namespace avx2;

KVGATE_AVX2 float dot_f32_avx2(const float* a, const float* b, int n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  float sum = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

KVGATE_AVX2 void axpy_f32_avx2(float w, const float* x, float* y, int n) {
  const __m256 wv = _mm256_set1_ps(w);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), wv, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += w * x[i];
}

KVGATE_AVX2 void softmax_weights_avx2(const float* scores, int n, float max, float* weights) {
  const __m256 m = _mm256_set1_ps(max);
  int t = 0;
  for (; t + 8 <= n; t += 8) _mm256_storeu_ps(weights + t, exp_ps(_mm256_sub_ps(_mm256_loadu_ps(scores + t), m)));
  for (; t < n; ++t) weights[t] = exp_poly(scores[t] - max);
}

// GCC 12's 512-bit max, min and shifts start from _mm512_undefined_ps/si512, which
// -Wmaybe-uninitialized flags where they are inlined (as in kernels/simd_avx512_pairs.h).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The same weights 16 at a time (avx512::exp_ps equals avx2::exp_ps lane for lane); a page of
// 32 scores is two exponentials per row instead of four.
KVGATE_AVX512 void softmax_weights_avx512(const float* scores, int n, float max, float* weights) {
  const __m512 m = _mm512_set1_ps(max);
  int t = 0;
  for (; t + 16 <= n; t += 16) _mm512_storeu_ps(weights + t, avx512::exp_ps(_mm512_sub_ps(_mm512_loadu_ps(scores + t), m)));
  softmax_weights_avx2(scores + t, n - t, max, weights + t);
}
#pragma GCC diagnostic pop

const RowKernels* find_row_kernels(FormatId id) {
  for (const RowKernels* (*family)(FormatId) :
       {&float_row_kernels, &pth_row_kernels, &ggml_row_kernels, &nvfp4_row_kernels, &uniform_row_kernels})
    if (const RowKernels* k = family(id)) return k;
  return nullptr;
}

// Asked on every call, i.e. per page and head of a decode step (thousands of times per token),
// so the families are searched once per id.
const RowKernels* row_kernels(FormatId id) {
  using Table = std::array<const RowKernels*, 1u << (8 * sizeof(FormatId))>;
  static const Table table = [] {
    Table t{};
    for (size_t i = 0; i < t.size(); ++i) t[i] = find_row_kernels(static_cast<FormatId>(i));
    return t;
  }();
  return table[static_cast<size_t>(id)];
}

}  // namespace

bool dot_rows(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens, float* scores) {
  if (!cpu_has_avx2_fma_f16c()) return false;
  const RowKernels* k = row_kernels(f.id);
  return k && k->dot_rows(f, q, n_q, rows, n_tokens, scores);
}

bool axpy_rows(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens, float* acc) {
  if (!cpu_has_avx2_fma_f16c()) return false;
  const RowKernels* k = row_kernels(f.id);
  return k && k->axpy_rows(f, weights, n_q, rows, n_tokens, acc);
}

bool dequantize_row(const RowFormat& f, const uint8_t* row, float* y) {
  if (!cpu_has_avx2_fma_f16c()) return false;
  const RowKernels* k = row_kernels(f.id);
  return k && k->dequantize_row && k->dequantize_row(f, row, y);
}

bool quantize_row(const RowFormat& f, const float* x, uint8_t* row) {
  if (!cpu_has_avx2_fma_f16c()) return false;
  const RowKernels* k = row_kernels(f.id);
  return k && k->quantize_row && k->quantize_row(f, x, row);
}

float dot_f32(const float* a, const float* b, int n) {
  if (cpu_has_avx2_fma_f16c()) return dot_f32_avx2(a, b, n);
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four chains, so the compiler can use SSE2
  int i = 0;
  for (; i + 4 <= n; i += 4)
    for (int k = 0; k < 4; ++k) s[k] += a[i + k] * b[i + k];
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

void axpy_f32(float w, const float* x, float* y, int n) {
  if (cpu_has_avx2_fma_f16c()) return axpy_f32_avx2(w, x, y, n);
  for (int i = 0; i < n; ++i) y[i] += w * x[i];
}

void softmax_weights(const float* scores, int n, float max, float* weights) {
  if (cpu_has_avx512()) return softmax_weights_avx512(scores, n, max, weights);
  if (cpu_has_avx2_fma_f16c()) return softmax_weights_avx2(scores, n, max, weights);
  for (int t = 0; t < n; ++t) weights[t] = exp_poly(scores[t] - max);
}

}  // namespace kvgate::kernels::simd
