#pragma once
// AVX-512 helpers: the target attributes of every 512-bit kernel and the 16-lane twin of
// simd::avx2::exp_ps. Like the AVX2 helpers they carry target attributes rather than a global
// flag; callers check cpu_has_avx512() (core/cpu_features.h) before calling in.
#include "kernels/simd_avx2_util.h"

#define KVGATE_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c")))
#define KVGATE_AVX512_INLINE \
  __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c"), always_inline)) inline
// For lambdas, which do not take their enclosing function's target.
#define KVGATE_AVX512_LAMBDA __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c"), always_inline))

namespace kvgate::kernels::simd::avx512 {

// avx2::exp_ps on 16 lanes: every lane runs the same operations in the same order (exp_poly's),
// so the two, and the scalar exp_poly, give the same bits. A decode step's softmax over a page
// is a few thousand of these operations per KV head, half as many instructions at 16 lanes.
KVGATE_AVX512_INLINE __m512 exp_ps(__m512 x) {
  const __m512 shifter = _mm512_set1_ps(kExpPolyShifter), one = _mm512_set1_ps(1.0f);
  x = _mm512_max_ps(_mm512_set1_ps(kExpPolyMin), x);
  x = _mm512_min_ps(_mm512_set1_ps(kExpPolyMax), x);
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(kExpPolyLog2e), shifter);
  const __m512 n = _mm512_sub_ps(t, shifter);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kExpPolyLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kExpPolyLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPolyP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPolyP[i]));
  p = _mm512_fmadd_ps(p, r, one);
  p = _mm512_fmadd_ps(p, r, one);
  const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(shifter));
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

}  // namespace kvgate::kernels::simd::avx512
