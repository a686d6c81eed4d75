#include "scoring/token_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/cpu_features.h"
#include "core/error.h"

namespace kvgate::scoring {

namespace {

// The softmax sums run over the vocabulary once per scored position and config, which made
// scoring cost as much as a forward pass: two std::exp per entry. They now take one pass with a
// vectorized double-precision exp. The arithmetic is fixed — 8 lanes (lane l takes entries
// i ≡ l mod 8), the exp below operation by operation, the lanes summed by a fixed tree — and
// the AVX2 and the portable path perform the same IEEE operations (std::fma where the vector
// code fuses), so the sums are bit-identical between runs, thread counts and machines.
constexpr int kLanes = 8;

// exp(x) for x <= 0, to about 2 ulp: with t = x / ln 2 rounded to a multiple n of 1/16 (adding
// 1.5·2^48 does the rounding and leaves 16n in the low mantissa bits) and f = t − n,
// exp(x) = 2^k · 2^(j/16) · 2^f for n = k + j/16: 2^(j/16) from a table of 16, 2^f for
// |f| <= 1/32 by a degree-6 Chebyshev fit (relative error 8e-18, mpmath.chebyfit). The rounding
// of t costs |x|·2^-53 relative, harmless in absolute terms (e^x |x| <= 1/e). Below kExpFloor
// the result is 0 (exp(-708) ~ 3e-308; every sum here holds a term equal to 1, the maximum's,
// so nothing below that floor can change one).
constexpr double kExpFloor = -708.0;
constexpr double kLog2e = 0x1.71547652b82fep+0;
constexpr double kRoundingShift = 0x1.8p48;
constexpr double kPoly[7] = {0x1.430a49610efc6p-13, 0x1.5d89be4c12513p-10, 0x1.3b2ab6fb09b31p-7, 0x1.c6b08d6e8a384p-5,
                             0x1.ebfbdff82c594p-3,  0x1.62e42fefa39fdp-1,  0x1.0000000000000p+0};  // highest first
alignas(64) constexpr double kTwoToSixteenths[16] = {
    0x1.0000000000000p+0, 0x1.0b5586cf9890fp+0, 0x1.172b83c7d517bp+0, 0x1.2387a6e756238p+0,
    0x1.306fe0a31b715p+0, 0x1.3dea64c123422p+0, 0x1.4bfdad5362a27p+0, 0x1.5ab07dd485429p+0,
    0x1.6a09e667f3bcdp+0, 0x1.7a11473eb0187p+0, 0x1.8ace5422aa0dbp+0, 0x1.9c49182a3f090p+0,
    0x1.ae89f995ad3adp+0, 0x1.c199bdd85529cp+0, 0x1.d5818dcfba487p+0, 0x1.ea4afa2a490dap+0};

double pow2(int64_t k) {  // 2^k for a normal exponent
  const uint64_t bits = static_cast<uint64_t>(k + 1023) << 52;
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

double exp_nonpositive(double x) {
  if (!(x >= kExpFloor)) return 0.0;
  const double t = x * kLog2e;
  const double m = t + kRoundingShift;
  const double n = m - kRoundingShift;
  const double f = t - n;
  double p = kPoly[0];
  for (int i = 1; i < 7; ++i) p = std::fma(p, f, kPoly[i]);
  uint64_t m_bits;
  std::memcpy(&m_bits, &m, sizeof m_bits);
  return p * kTwoToSixteenths[m_bits & 15] * pow2(static_cast<int64_t>(std::floor(n)));
}

struct RowMax {
  float value = 0.0f;
  uint32_t first_index = 0;  // the lowest index holding it
  float min = 0.0f;          // the smallest entry
  bool bad = false;          // a NaN or an infinity may be among the entries

  // Whether exp(x − value) may fall below the exp floor for some entry (−inf included).
  bool reaches_floor() const { return static_cast<double>(min) - static_cast<double>(value) < kExpFloor; }
};

// Σ exp(x_i − max) over one logit row, and optionally, against a second row q with its own
// maximum, Σ exp(r_i − max_r) and Σ exp(q_i − max_q) and Σ exp(r_i − max_r)(r_i − q_i) — the
// three sums KL(r || q) is made of — in one pass.
struct Sums {
  double ref = 0.0;      // Σ e_i, e_i = exp(r_i − max_r)
  double q = 0.0;        // Σ exp(q_i − max_q)
  double weighted = 0.0; // Σ e_i (r_i − q_i), terms with e_i == 0 left out (masked tokens)
};

// The fixed reduction of the 8 lane sums: pairs (l, l + 4), then (l, l + 2), then the last two.
double reduce_lanes(const double* lanes) {
  double s4[4], s2[2];
  for (int l = 0; l < 4; ++l) s4[l] = lanes[l] + lanes[l + 4];
  for (int l = 0; l < 2; ++l) s2[l] = s4[l] + s4[l + 2];
  return s2[0] + s2[1];
}

// The portable path: the same operations as the AVX2 one, one lane at a time.
Sums sums_portable(const float* r, const float* q, size_t n, double max_r, double max_q) {
  double ref[kLanes] = {}, qs[kLanes] = {}, weighted[kLanes] = {};
  for (size_t i = 0; i < n; ++i) {
    const int l = static_cast<int>(i % kLanes);
    const double rv = r[i];
    const double e = exp_nonpositive(rv - max_r);
    ref[l] += e;
    if (q) {
      const double qv = q[i];
      qs[l] += exp_nonpositive(qv - max_q);
      const double term = e * (rv - qv);
      weighted[l] += e == 0.0 ? 0.0 : term;
    }
  }
  return {reduce_lanes(ref), reduce_lanes(qs), reduce_lanes(weighted)};
}

#if defined(__x86_64__)
#define KVGATE_AVX2 __attribute__((target("avx2,fma")))

KVGATE_AVX2 inline __m256d exp_nonpositive(__m256d x) {
  const __m256d t = _mm256_mul_pd(x, _mm256_set1_pd(kLog2e));
  const __m256d m = _mm256_add_pd(t, _mm256_set1_pd(kRoundingShift));
  const __m256d n = _mm256_sub_pd(m, _mm256_set1_pd(kRoundingShift));
  const __m256d f = _mm256_sub_pd(t, n);
  __m256d p = _mm256_set1_pd(kPoly[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_pd(p, f, _mm256_set1_pd(kPoly[i]));
  const __m256i j = _mm256_and_si256(_mm256_castpd_si256(m), _mm256_set1_epi64x(15));
  const __m256d table = _mm256_i64gather_pd(kTwoToSixteenths, j, 8);
  // 2^floor(n) built in the exponent bits, as pow2() does.
  const __m256d k = _mm256_round_pd(n, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m256i k_bits = _mm256_slli_epi64(
      _mm256_add_epi64(_mm256_castpd_si256(_mm256_add_pd(k, _mm256_set1_pd(0x1.8p52))),
                       _mm256_set1_epi64x(1023 - (int64_t{1} << 51))),
      52);
  return _mm256_mul_pd(_mm256_mul_pd(p, table), _mm256_castsi256_pd(k_bits));
}

// Lanes at or below the floor (and -inf) are 0; the others as above.
KVGATE_AVX2 inline __m256d exp_nonpositive_masked(__m256d x) {
  const __m256d below = _mm256_cmp_pd(x, _mm256_set1_pd(kExpFloor), _CMP_NGE_UQ);
  return _mm256_andnot_pd(below, exp_nonpositive(_mm256_max_pd(x, _mm256_set1_pd(kExpFloor))));
}

template <bool kMasked>
KVGATE_AVX2 inline __m256d exp_lanes(__m256d x) {
  if constexpr (kMasked) {
    return exp_nonpositive_masked(x);
  } else {
    return exp_nonpositive(x);
  }
}

// Continues each lane's sums over the entries the vector loop left, as sums_portable does.
void sums_tail(const float* r, const float* q, size_t begin, size_t n, double max_r, double max_q,
               double (&lanes)[3][kLanes]) {
  for (size_t i = begin; i < n; ++i) {
    const int l = static_cast<int>(i % kLanes);
    const double rv = r[i];
    const double e = exp_nonpositive(rv - max_r);
    lanes[0][l] += e;
    if (q) {
      const double qv = q[i];
      lanes[1][l] += exp_nonpositive(qv - max_q);
      const double term = e * (rv - qv);
      lanes[2][l] += e == 0.0 ? 0.0 : term;
    }
  }
}

// kMasked: some entry may lie below the floor (or be -inf); without it every lane is in range,
// every e_i > 0, and the masks would change nothing.
template <bool kMasked>
KVGATE_AVX2 Sums sums_avx2(const float* r, const float* q, size_t n, double max_r, double max_q) {
  const __m256d mr = _mm256_set1_pd(max_r), mq = _mm256_set1_pd(max_q), zero = _mm256_setzero_pd();
  __m256d ref[2] = {zero, zero}, qs[2] = {zero, zero}, weighted[2] = {zero, zero};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int h = 0; h < 2; ++h) {  // lanes 0-3, then 4-7
      const __m256d rv = _mm256_cvtps_pd(_mm_loadu_ps(r + i + 4 * h));
      const __m256d e = exp_lanes<kMasked>(_mm256_sub_pd(rv, mr));
      ref[h] = _mm256_add_pd(ref[h], e);
      if (q) {
        const __m256d qv = _mm256_cvtps_pd(_mm_loadu_ps(q + i + 4 * h));
        qs[h] = _mm256_add_pd(qs[h], exp_lanes<kMasked>(_mm256_sub_pd(qv, mq)));
        __m256d term = _mm256_mul_pd(e, _mm256_sub_pd(rv, qv));
        if (kMasked) term = _mm256_andnot_pd(_mm256_cmp_pd(e, zero, _CMP_EQ_OQ), term);
        weighted[h] = _mm256_add_pd(weighted[h], term);
      }
    }
  }
  double lanes[3][kLanes];
  for (int h = 0; h < 2; ++h) {
    _mm256_storeu_pd(lanes[0] + 4 * h, ref[h]);
    _mm256_storeu_pd(lanes[1] + 4 * h, qs[h]);
    _mm256_storeu_pd(lanes[2] + 4 * h, weighted[h]);
  }
  sums_tail(r, q, i, n, max_r, max_q, lanes);
  return {reduce_lanes(lanes[0]), reduce_lanes(lanes[1]), reduce_lanes(lanes[2])};
}

#define KVGATE_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))
// GCC 12's own avx512fintrin.h trips -Wmaybe-uninitialized on the _mm512_undefined_pd() that
// some unmasked intrinsics (max, cvtps_pd) pass as their unused merge source.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The same exp on eight lanes at once; the same rounded operations as the AVX2 one.
KVGATE_AVX512 inline __m512d exp_nonpositive(__m512d x, __mmask8 keep) {
  const __m512d t = _mm512_mul_pd(x, _mm512_set1_pd(kLog2e));
  const __m512d m = _mm512_add_pd(t, _mm512_set1_pd(kRoundingShift));
  const __m512d n = _mm512_sub_pd(m, _mm512_set1_pd(kRoundingShift));
  const __m512d f = _mm512_sub_pd(t, n);
  __m512d p = _mm512_set1_pd(kPoly[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_pd(p, f, _mm512_set1_pd(kPoly[i]));
  // The table lookup is one two-register permute (it reads the low 4 bits of each index), and
  // scalef multiplies by 2^floor(n) with one rounding, as the multiplication by pow2() does.
  const __m512d table = _mm512_permutex2var_pd(_mm512_load_pd(kTwoToSixteenths), _mm512_castpd_si512(m),
                                               _mm512_load_pd(kTwoToSixteenths + 8));
  return _mm512_maskz_scalef_pd(keep, _mm512_mul_pd(p, table), n);
}

template <bool kMasked>
KVGATE_AVX512 inline __m512d exp_lanes(__m512d x) {
  if constexpr (kMasked) {
    const __m512d floor = _mm512_set1_pd(kExpFloor);
    return exp_nonpositive(_mm512_max_pd(x, floor), _mm512_cmp_pd_mask(x, floor, _CMP_GE_OQ));
  } else {
    return exp_nonpositive(x, __mmask8{0xff});
  }
}

template <bool kMasked>
KVGATE_AVX512 Sums sums_avx512(const float* r, const float* q, size_t n, double max_r, double max_q) {
  const __m512d mr = _mm512_set1_pd(max_r), mq = _mm512_set1_pd(max_q);
  __m512d ref = _mm512_setzero_pd(), qs = ref, weighted = ref;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512d rv = _mm512_cvtps_pd(_mm256_loadu_ps(r + i));
    const __m512d e = exp_lanes<kMasked>(_mm512_sub_pd(rv, mr));
    ref = _mm512_add_pd(ref, e);
    if (q) {
      const __m512d qv = _mm512_cvtps_pd(_mm256_loadu_ps(q + i));
      qs = _mm512_add_pd(qs, exp_lanes<kMasked>(_mm512_sub_pd(qv, mq)));
      const __m512d d = _mm512_sub_pd(rv, qv);
      const __m512d term = kMasked ? _mm512_maskz_mul_pd(_mm512_cmp_pd_mask(e, _mm512_setzero_pd(), _CMP_NEQ_UQ), e, d)
                                   : _mm512_mul_pd(e, d);
      weighted = _mm512_add_pd(weighted, term);
    }
  }
  double lanes[3][kLanes];
  _mm512_storeu_pd(lanes[0], ref);
  _mm512_storeu_pd(lanes[1], qs);
  _mm512_storeu_pd(lanes[2], weighted);
  sums_tail(r, q, i, n, max_r, max_q, lanes);
  return {reduce_lanes(lanes[0]), reduce_lanes(lanes[1]), reduce_lanes(lanes[2])};
}

#pragma GCC diagnostic pop

// Largest and smallest logit, and whether a NaN or an infinity is among them (x − x is NaN
// exactly for those; −inf is allowed and sorted out by the caller's rescan). Four independent
// chains, so the compare latency does not serialize the loop.
KVGATE_AVX2 RowMax range_avx2(const float* x, size_t n) {
  constexpr int kChains = 4;
  __m256 hi[kChains], lo[kChains], nonfinite = _mm256_setzero_ps();
  for (int c = 0; c < kChains; ++c) {
    hi[c] = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    lo[c] = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  }
  size_t i = 0;
  for (; i + 8 * kChains <= n; i += 8 * kChains) {
    for (int c = 0; c < kChains; ++c) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * c);
      hi[c] = _mm256_max_ps(hi[c], v);
      lo[c] = _mm256_min_ps(lo[c], v);
      nonfinite = _mm256_add_ps(nonfinite, _mm256_sub_ps(v, v));
    }
  }
  RowMax r;
  r.value = -std::numeric_limits<float>::infinity();
  r.min = std::numeric_limits<float>::infinity();
  float lanes[8];
  for (int c = 0; c < kChains; ++c) {
    _mm256_storeu_ps(lanes, hi[c]);
    for (float v : lanes) r.value = v > r.value ? v : r.value;
    _mm256_storeu_ps(lanes, lo[c]);
    for (float v : lanes) r.min = v < r.min ? v : r.min;
  }
  _mm256_storeu_ps(lanes, nonfinite);
  for (float v : lanes) r.bad = r.bad || v != 0.0f;
  for (; i < n; ++i) {
    r.bad = r.bad || !std::isfinite(x[i]);
    r.value = x[i] > r.value ? x[i] : r.value;
    r.min = x[i] < r.min ? x[i] : r.min;
  }
  return r;
}

KVGATE_AVX2 uint32_t first_index_avx2(const float* x, size_t n, float value) {
  const __m256 target = _mm256_set1_ps(value);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), target, _CMP_EQ_OQ));
    if (hits != 0) return static_cast<uint32_t>(i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(hits))));
  }
  while (x[i] != value) ++i;
  return static_cast<uint32_t>(i);
}

// The AVX-512 and AVX2 sums are written as the portable one's operations, lane for lane, so the choice (and
// KVGATE_DISABLE_SIMD / KVGATE_DISABLE_AVX512) never changes a bit.
bool use_avx512() { return cpu_has_avx512(); }
bool use_avx2() { return cpu_has_avx2_fma_f16c(); }
#else
bool use_avx2() { return false; }
#endif

// masked: whether some entry may lie below the exp floor (decided from the rows' minima).
Sums softmax_sums(const float* r, const float* q, size_t n, double max_r, double max_q, bool masked, bool simd) {
#if defined(__x86_64__)
  if (simd && use_avx512())
    return masked ? sums_avx512<true>(r, q, n, max_r, max_q) : sums_avx512<false>(r, q, n, max_r, max_q);
  if (simd && use_avx2())
    return masked ? sums_avx2<true>(r, q, n, max_r, max_q) : sums_avx2<false>(r, q, n, max_r, max_q);
#endif
  return sums_portable(r, q, n, max_r, max_q);
}

[[noreturn]] void throw_bad_logit(std::span<const float> logits) {
  for (size_t i = 0; i < logits.size(); ++i) {
    const double v = logits[i];
    if (std::isnan(v) || v == std::numeric_limits<double>::infinity())
      throw_input_error("logits: non-finite value " + std::to_string(v) + " at index " + std::to_string(i));
  }
  throw_internal_error("logits: a non-finite value was reported but not found");
}

// Validates a logit row and finds its maximum: an input error on an empty row, a NaN or a +inf
// entry, or a row where every entry is -inf.
RowMax row_max(std::span<const float> logits, bool simd) {
  if (logits.empty()) throw_input_error("logits: empty vector");
  RowMax r;
#if defined(__x86_64__)
  simd = simd && use_avx2();
  if (simd) r = range_avx2(logits.data(), logits.size());
#else
  simd = false;
#endif
  if (!simd || r.bad) {  // the scalar pass, also to tell an allowed -inf from a NaN or +inf
    r = RowMax{};
    r.value = -std::numeric_limits<float>::infinity();
    r.min = std::numeric_limits<float>::infinity();
    for (const float v : logits) {
      if (std::isnan(v) || v == std::numeric_limits<float>::infinity()) throw_bad_logit(logits);
      r.value = v > r.value ? v : r.value;
      r.min = v < r.min ? v : r.min;
    }
  }
  if (r.value == -std::numeric_limits<float>::infinity())
    throw_input_error("logits: every entry is -inf, no distribution is defined");
#if defined(__x86_64__)
  if (simd) {
    r.first_index = first_index_avx2(logits.data(), logits.size(), r.value);
    return r;
  }
#endif
  while (logits[r.first_index] != r.value) ++r.first_index;
  return r;
}

// llama.cpp drops reference entries at or below this log-probability from the KL sum.
constexpr double kLlamaCppMinLogProb = -16.0;

// The reference's log-probabilities as llama-perplexity --kl-divergence-base stores them and
// --kl-divergence reads them back: float arithmetic in llama.cpp's order, logits more than 16
// below the largest clamped to the floor, the rest rounded to 65536 steps between the floor
// and the maximum (round half to even, as its nearest_int).
std::vector<double> llama_cpp_stored_log_probs(std::span<const float> logits) {
  float max_logit = logits[0];
  float min_logit = logits[0];
  for (const float v : logits) {
    max_logit = std::max(max_logit, v);
    min_logit = std::min(min_logit, v);
  }
  min_logit = std::max(min_logit, max_logit - 16.0f);
  double sum_exp = 0.0;
  for (const float v : logits) sum_exp += std::exp(v - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float min_log_prob = min_logit - max_logit - log_sum_exp;
  const float scale = (max_logit - min_logit) / 65535.0f;
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    float steps = 0.0f;
    if (scale != 0.0f && logits[i] > min_logit) steps = std::nearbyint((1.0f / scale) * (logits[i] - min_logit));
    out[i] = scale * steps + min_log_prob;
  }
  return out;
}

// KL(ref || q) over the entries with ln p_ref > -16 only, given both log normalizers. Those are
// entries within 16 nats of the maximum, a few hundred of a vocabulary, so they are summed
// after the vectorized pass, in index order with the same exp: a compare per entry and an exp
// per kept one on top of kFull's cost, and the same result on every path.
double kld_llama_cpp_terms(std::span<const float> ref_logits, std::span<const float> q_logits, double max_ref,
                           double sum_ref, double log_norm_ref, double log_norm_q) {
  double kept_exp = 0.0, kept_weighted = 0.0;
  for (size_t i = 0; i < ref_logits.size(); ++i) {
    const double r = ref_logits[i];
    if (!(r - log_norm_ref > kLlamaCppMinLogProb)) continue;
    const double e = exp_nonpositive(r - max_ref);
    kept_exp += e;
    kept_weighted += e * (r - static_cast<double>(q_logits[i]));
  }
  // Σ_kept p_i (ln p_i − ln q_i) with p_i = e_i / Σe: the kFull identity on the kept entries,
  // whose probabilities no longer sum to 1.
  return kept_weighted / sum_ref - (log_norm_ref - log_norm_q) * (kept_exp / sum_ref);
}

// kLlamaCppStored: everything about the reference comes from what llama.cpp's base file keeps
// of it (its NLL and top-1 included); the candidate keeps its exact normalizer.
void use_llama_cpp_stored_reference(std::span<const float> ref_logits, std::span<const float> q_logits,
                                    uint32_t correct_token, double log_norm_q, PositionComparison& c) {
  const std::vector<double> log_ref = llama_cpp_stored_log_probs(ref_logits);
  c.nll_ref = -log_ref[correct_token];
  size_t best = 0;
  double kld = 0.0;
  for (size_t i = 0; i < log_ref.size(); ++i) {
    if (log_ref[i] > log_ref[best]) best = i;
    if (log_ref[i] <= kLlamaCppMinLogProb) continue;
    const double log_q = static_cast<double>(q_logits[i]) - log_norm_q;
    kld += std::exp(log_ref[i]) * (log_ref[i] - log_q);
  }
  c.top1_ref = static_cast<uint32_t>(best);
  c.kld = kld;
}

PositionComparison compare(std::span<const float> ref_logits, std::span<const float> q_logits, uint32_t correct_token,
                           KldDefinition definition, bool simd) {
  if (ref_logits.size() != q_logits.size())
    throw_input_error("compare_position: reference has " + std::to_string(ref_logits.size()) +
                      " logits but quantized config has " + std::to_string(q_logits.size()));
  if (correct_token >= ref_logits.size())
    throw_input_error("compare_position: correct token " + std::to_string(correct_token) +
                      " is outside the vocabulary of " + std::to_string(ref_logits.size()));
  auto checked_max = [simd](std::span<const float> row, LogitSide side) {
    try {
      return row_max(row, simd);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::input) throw;
      throw NonFiniteLogits(side, std::string(side == LogitSide::reference ? "reference " : "candidate ") + e.what());
    }
  };
  const RowMax ref_max = checked_max(ref_logits, LogitSide::reference), q_max = checked_max(q_logits, LogitSide::candidate);
  const Sums s = softmax_sums(ref_logits.data(), q_logits.data(), ref_logits.size(), ref_max.value, q_max.value,
                              ref_max.reaches_floor() || q_max.reaches_floor(), simd);
  const double log_norm_ref = ref_max.value + std::log(s.ref);
  const double log_norm_q = q_max.value + std::log(s.q);

  // KL(ref || q) = Σ p_ref (ln p_ref − ln q) with ln p = logit − log normalizer: since Σ p_ref = 1
  // it is Σ e_i (r_i − q_i) / Σ e_i − (log_norm_ref − log_norm_q). Identical inputs give 0 exactly:
  // every r_i − q_i is 0 and the two normalizers are computed alike.
  PositionComparison c;
  c.kld = s.weighted / s.ref - (log_norm_ref - log_norm_q);
  c.nll_ref = log_norm_ref - static_cast<double>(ref_logits[correct_token]);
  c.nll_q = log_norm_q - static_cast<double>(q_logits[correct_token]);
  c.top1_ref = ref_max.first_index;
  c.top1_q = q_max.first_index;
  if (definition == KldDefinition::kLlamaCpp)
    c.kld = kld_llama_cpp_terms(ref_logits, q_logits, ref_max.value, s.ref, log_norm_ref, log_norm_q);
  else if (definition == KldDefinition::kLlamaCppStored)
    use_llama_cpp_stored_reference(ref_logits, q_logits, correct_token, log_norm_q, c);
  c.p_ref = std::exp(-c.nll_ref);
  c.p_q = std::exp(-c.nll_q);
  c.delta_p = c.p_q - c.p_ref;
  c.same_top1 = c.top1_ref == c.top1_q;
  return c;
}

}  // namespace

void log_softmax(std::span<const float> logits, std::span<double> out) {
  if (out.size() != logits.size()) throw_internal_error("log_softmax: output size differs from input size");
  const RowMax m = row_max(logits, true);
  const double max_logit = m.value;
  const double log_norm =
      max_logit + std::log(softmax_sums(logits.data(), nullptr, logits.size(), max_logit, 0.0, m.reaches_floor(), true).ref);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - log_norm;
}

PositionComparison compare_position(std::span<const float> ref_logits, std::span<const float> q_logits,
                                    uint32_t correct_token) {
  return compare(ref_logits, q_logits, correct_token, KldDefinition::kFull, true);
}

PositionComparison compare_position(std::span<const float> ref_logits, std::span<const float> q_logits,
                                    uint32_t correct_token, KldDefinition definition) {
  return compare(ref_logits, q_logits, correct_token, definition, true);
}

PositionComparison compare_position_portable(std::span<const float> ref_logits, std::span<const float> q_logits,
                                             uint32_t correct_token, KldDefinition definition) {
  return compare(ref_logits, q_logits, correct_token, definition, false);
}

}  // namespace kvgate::scoring
