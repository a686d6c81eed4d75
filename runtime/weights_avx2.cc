// AVX2/FMA row dots for the block types decode spends its time in, and their decode to float.
// Compiled with function-level target attributes so the binary still runs (on the scalar path)
// on CPUs without AVX2.
#include "runtime/weights_avx2.h"

#include <immintrin.h>

#include <cstring>

#include "core/float_convert.h"

namespace kvgate::runtime::avx2 {
namespace {

#define KVGATE_AVX2 __attribute__((target("avx2,fma,f16c")))

KVGATE_AVX2 inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

KVGATE_AVX2 inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

// Decode streams every weight once per token and is bound by how many cache lines are in flight,
// not by arithmetic: each row dot prefetches the bytes this far ahead (rows of a matrix are
// contiguous, so that is a later row of the same call), which triples the rate from DRAM/L3.
constexpr int kPrefetchBytes = 4096;

KVGATE_AVX2 inline void prefetch_ahead(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

// 16 packed nibble bytes -> the four 8-float groups of a 32-element block, in element order
// (low nibbles are elements 0..15, high nibbles 16..31). One in-lane byte shuffle puts bytes l
// and 8 + l into lane l; shifts and masks then pick the four nibbles, instead of one widening
// shuffle per group (the shuffle port was the limit).
KVGATE_AVX2 inline void nibbles_to_floats(const uint8_t* qs, __m256 out[4]) {
  const __m256i pairs = _mm256_setr_epi8(0, 8, -1, -1, 1, 9, -1, -1, 2, 10, -1, -1, 3, 11, -1, -1,  //
                                         4, 12, -1, -1, 5, 13, -1, -1, 6, 14, -1, -1, 7, 15, -1, -1);
  const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i v = _mm256_shuffle_epi8(bytes, pairs);  // lane l: qs[l] | qs[8 + l] << 8
  const __m256i mask = _mm256_set1_epi32(0x0f);
  out[0] = _mm256_cvtepi32_ps(_mm256_and_si256(v, mask));                          // qs[l] & 15
  out[1] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 8), mask));    // qs[8 + l] & 15
  out[2] = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v, 4), mask));    // qs[l] >> 4
  out[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 12));                           // qs[8 + l] >> 4
}

// Elements 0..15 are the 16 bytes' low nibbles, 16..31 their high ones: as 32-bit integers in
// four groups of eight, in element order.
KVGATE_AVX2 inline void nibbles_to_ints(const uint8_t* qs, __m256i out[4]) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
  out[0] = _mm256_cvtepu8_epi32(lo);
  out[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
  out[2] = _mm256_cvtepu8_epi32(hi);
  out[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
}

}  // namespace

KVGATE_AVX2 float dot_q4_0(const uint8_t* row, int64_t n_blocks, const float* x, const float* /*block_sums*/) {
  __m256 acc = _mm256_setzero_ps();
  const __m256 eight = _mm256_set1_ps(8.0f);
  for (int64_t b = 0; b < n_blocks; ++b, row += 18, x += 32) {
    prefetch_ahead(row);
    __m256 q[4];
    nibbles_to_floats(row + 2, q);
    __m256 t = _mm256_mul_ps(_mm256_sub_ps(q[0], eight), _mm256_loadu_ps(x));
    t = _mm256_fmadd_ps(_mm256_sub_ps(q[1], eight), _mm256_loadu_ps(x + 8), t);
    t = _mm256_fmadd_ps(_mm256_sub_ps(q[2], eight), _mm256_loadu_ps(x + 16), t);
    t = _mm256_fmadd_ps(_mm256_sub_ps(q[3], eight), _mm256_loadu_ps(x + 24), t);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(row)), t, acc);
  }
  return hsum(acc);
}

// Σ_b (d_b Σ_j q_j x_j + m_b Σ_j x_j): the block sums of x are shared by every row.
KVGATE_AVX2 float dot_q4_1(const uint8_t* row, int64_t n_blocks, const float* x, const float* block_sums) {
  __m256 acc = _mm256_setzero_ps();
  float min_term = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b, row += 20, x += 32) {
    prefetch_ahead(row);
    __m256 q[4];
    nibbles_to_floats(row + 4, q);
    __m256 t = _mm256_mul_ps(q[0], _mm256_loadu_ps(x));
    t = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(x + 8), t);
    t = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(x + 16), t);
    t = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(x + 24), t);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(row)), t, acc);
    min_term += half_at(row + 2) * block_sums[b];
  }
  return hsum(acc) + min_term;
}

KVGATE_AVX2 float dot_q8_0(const uint8_t* row, int64_t n_blocks, const float* x, const float* /*block_sums*/) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b, row += 34, x += 32) {
    prefetch_ahead(row);
    const uint8_t* qs = row + 2;
    __m256 t = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      const __m128i b8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * k));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b8));
      t = _mm256_fmadd_ps(q, _mm256_loadu_ps(x + 8 * k), t);
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(row)), t, acc);
  }
  return hsum(acc);
}

KVGATE_AVX2 float dot_f32(const float* row, int64_t n, const float* x) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    prefetch_ahead(reinterpret_cast<const uint8_t*>(row + i));
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(row + i), _mm256_loadu_ps(x + i), acc);
  }
  float sum = hsum(acc);
  for (; i < n; ++i) sum += row[i] * x[i];
  return sum;
}

KVGATE_AVX2 float dot_f16(const uint8_t* row, int64_t n, const float* x) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    prefetch_ahead(row + 2 * i);
    const __m256 w = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + i), acc);
  }
  float sum = hsum(acc);
  for (; i < n; ++i) sum += half_at(row + 2 * i) * x[i];
  return sum;
}

KVGATE_AVX2 float dot_bf16(const uint8_t* row, int64_t n, const float* x) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    prefetch_ahead(row + 2 * i);
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * i)));
    const __m256 w = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    acc = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + i), acc);
  }
  float sum = hsum(acc);
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    sum += bf16_to_f32(h) * x[i];
  }
  return sum;
}

// Prefill expands every weight tile to float before its sgemm (weights.cc matmul_many), once per
// 512-token chunk: for the default model's Q4_1 weights the scalar block decode took a fifth of
// a depth sweep's CPU time, as much as the sgemm. A 4- or 8-bit code times an f16 scale is exact
// in f32, so these give the scalar decode's bits however the compiler schedules them.
KVGATE_AVX2 void dequantize_q4_0(const uint8_t* row, int64_t n_blocks, float* out) {
  const __m256i eight = _mm256_set1_epi32(8);
  for (int64_t b = 0; b < n_blocks; ++b, row += 18, out += 32) {
    const __m256 d = _mm256_set1_ps(half_at(row));
    __m256i q[4];
    nibbles_to_ints(row + 2, q);
    for (int k = 0; k < 4; ++k)
      _mm256_storeu_ps(out + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q[k], eight)), d));
  }
}

KVGATE_AVX2 void dequantize_q4_1(const uint8_t* row, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, row += 20, out += 32) {
    const __m256 d = _mm256_set1_ps(half_at(row)), m = _mm256_set1_ps(half_at(row + 2));
    __m256i q[4];
    nibbles_to_ints(row + 4, q);
    for (int k = 0; k < 4; ++k)
      _mm256_storeu_ps(out + 8 * k, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q[k]), d), m));
  }
}

KVGATE_AVX2 void dequantize_q8_0(const uint8_t* row, int64_t n_blocks, float* out) {
  for (int64_t b = 0; b < n_blocks; ++b, row += 34, out += 32) {
    const __m256 d = _mm256_set1_ps(half_at(row));
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 2 + 8 * k));
      _mm256_storeu_ps(out + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

}  // namespace kvgate::runtime::avx2
