#pragma once
// AVX-512 forms of the multi-row drivers of kernels/simd_avx2_rows.h: each 512-bit vector holds
// the same 8-float chunk for two query rows (low half row A, high half row B), and the decoded
// key or value vector is broadcast to both halves. Per lane every operation and its order are
// those of the AVX2 driver for that row, so the two give the same bits; what changes is that one
// FMA does two rows' work and a decoded tile is read once per pair. Odd rows and the tokens
// past the last whole tile go through the AVX2 code.
#include "kernels/simd_avx2_rows.h"

#define KVGATE_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c")))
#define KVGATE_AVX512_INLINE \
  __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c"), always_inline)) inline

// GCC 12's casts and broadcasts between 256 and 512 bits start from _mm512_undefined_ps, which
// -Wmaybe-uninitialized flags wherever they are inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kvgate::kernels::simd::avx512 {

using namespace avx2;

KVGATE_AVX512_INLINE __m512 pair(__m256 a, __m256 b) { return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1); }
KVGATE_AVX512_INLINE __m512 pair_set1(float a, float b) { return pair(_mm256_set1_ps(a), _mm256_set1_ps(b)); }
KVGATE_AVX512_INLINE __m256 low(__m512 v) { return _mm512_castps512_ps256(v); }
KVGATE_AVX512_INLINE __m256 high(__m512 v) { return _mm512_extractf32x8_ps(v, 1); }
// A decoded 8-float vector in both halves; from memory this is a plain load.
KVGATE_AVX512_INLINE __m512 both(const float* v) { return _mm512_broadcast_f32x8(_mm256_loadu_ps(v)); }
KVGATE_AVX512_INLINE __m512 both(const __m256* v) { return both(reinterpret_cast<const float*>(v)); }

// Lane 0: row A's low + high 128 bits, lane 2: row B's (hsum4's first step for both).
KVGATE_AVX512_INLINE __m512 fold_halves(__m512 a) { return _mm512_add_ps(a, _mm512_shuffle_f32x4(a, a, _MM_SHUFFLE(3, 3, 1, 1))); }

// hsum4 of both halves at once: the same additions in the same order per row, with one
// instruction doing each step for both rows (128-bit lane 0 ends with row A's four sums, lane 2
// with row B's).
KVGATE_AVX512_INLINE void hsum4_pair(__m512 a0, __m512 a1, __m512 a2, __m512 a3, __m128* sum_a, __m128* sum_b) {
  const __m512 x0 = fold_halves(a0), x1 = fold_halves(a1), x2 = fold_halves(a2), x3 = fold_halves(a3);
  // _MM_TRANSPOSE4_PS within each 128-bit lane.
  const __m512 t0 = _mm512_unpacklo_ps(x0, x1), t1 = _mm512_unpackhi_ps(x0, x1);
  const __m512 t2 = _mm512_unpacklo_ps(x2, x3), t3 = _mm512_unpackhi_ps(x2, x3);
  const __m512 y0 = _mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), y1 = _mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512 y2 = _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), y3 = _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(y0, y2), _mm512_add_ps(y1, y3));
  *sum_a = _mm512_castps512_ps128(sum);
  *sum_b = _mm512_extractf32x4_ps(sum, 2);
}

// dot_decoded for a row pair.
template <class D>
KVGATE_AVX512_INLINE __m512 dot_decoded(const __m256* v, float d, float m, const __m512* qv, __m512 qsum, __m512 acc) {
  constexpr int V = D::kElems / 8;
  if constexpr (D::kBlockScaled) {
    __m512 p = _mm512_mul_ps(both(&v[0]), qv[0]);
    for (int k = 1; k < V; ++k) p = _mm512_fmadd_ps(both(&v[k]), qv[k], p);
    acc = _mm512_fmadd_ps(p, _mm512_set1_ps(d), acc);
    if constexpr (D::kBlockMin) acc = _mm512_fmadd_ps(qsum, _mm512_set1_ps(m), acc);
    return acc;
  } else {
    for (int k = 0; k < V; ++k) acc = _mm512_fmadd_ps(both(&v[k]), qv[k], acc);
    return acc;
  }
}

// P pairs of query rows, each interleaved by 8-float chunk (qp[p] = [A 0..7][B 0..7][A 8..15]
// ...), against a decoded tile: each row's four scores at out[2p] (A) and out[2p + 1] (B), as
// dot_tile_row gives them. Each (row, key) sum is one chain of dependent FMAs through the
// head_dim, so four keys alone leave the FMA ports waiting on latency; two pairs keep eight
// chains in flight.
template <class D, int P>
KVGATE_AVX512_INLINE void dot_tile_pairs(const RowFormat& f, const DecodedTile<D>& tile, const uint8_t* const* r, int nb,
                                         const float* const* qp, float* const* out) {
  constexpr int V = D::kElems / 8;
  __m512 acc[P][kTileRows], qtotal[P];
  for (int p = 0; p < P; ++p) {
    qtotal[p] = _mm512_setzero_ps();
    for (int i = 0; i < kTileRows; ++i) acc[p][i] = _mm512_setzero_ps();
  }
  for (int b = 0; b < nb; ++b) {
    __m512 qv[P][V], qsum[P];
    for (int p = 0; p < P; ++p) {
      for (int k = 0; k < V; ++k) qv[p][k] = _mm512_loadu_ps(qp[p] + 2 * (b * D::kElems + 8 * k));
      qsum[p] = _mm512_setzero_ps();
      if constexpr (D::kBlockMin || D::kRowMin) {
        qsum[p] = qv[p][0];
        for (int k = 1; k < V; ++k) qsum[p] = _mm512_add_ps(qsum[p], qv[p][k]);
      }
      if constexpr (D::kRowMin) qtotal[p] = _mm512_add_ps(qtotal[p], qsum[p]);
    }
    for (int i = 0; i < kTileRows; ++i)
      for (int p = 0; p < P; ++p)
        acc[p][i] = dot_decoded<D>(&tile.v[i][b * V], tile.d[i][b], tile.m[i][b], qv[p], qsum[p], acc[p][i]);
  }
  for (int p = 0; p < P; ++p) {
    __m128 sum_a, sum_b;
    hsum4_pair(acc[p][0], acc[p][1], acc[p][2], acc[p][3], &sum_a, &sum_b);
    finish_tile_scores<D>(f, r, sum_a, low(qtotal[p]), out[2 * p]);
    finish_tile_scores<D>(f, r, sum_b, high(qtotal[p]), out[2 * p + 1]);
  }
}

template <class D>
KVGATE_AVX512 void dot_rows_pairs(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens,
                                  float* scores) {
  const int nb = f.head_dim / D::kElems;
  const int hd = f.head_dim;
  const int pairs = n_q / 2;
  thread_local std::vector<float> interleaved;
  interleaved.resize(static_cast<size_t>(pairs) * 2 * hd);
  float* qi2 = interleaved.data();
  for (int p = 0; p < pairs; ++p)
    for (int c = 0; c < hd; c += 8) {
      const float* a = q + static_cast<size_t>(2 * p) * hd + c;
      _mm512_storeu_ps(qi2 + static_cast<size_t>(p) * 2 * hd + 2 * c, pair(_mm256_loadu_ps(a), _mm256_loadu_ps(a + hd)));
    }
  DecodedTile<D> tile;
  int t = 0;
  for (; t + kTileRows <= n_tokens; t += kTileRows) {
    const uint8_t* r[kTileRows];
    tile_rows(rows, f.row_bytes, t, r);
    tile.decode(r, nb);
    auto pair_q = [&](int p) { return qi2 + static_cast<size_t>(p) * 2 * hd; };
    auto row_out = [&](int row) { return scores + static_cast<size_t>(row) * n_tokens + t; };
    int p = 0;
    for (; p + 2 <= pairs; p += 2) {
      const float* qp[2] = {pair_q(p), pair_q(p + 1)};
      float* out[4] = {row_out(2 * p), row_out(2 * p + 1), row_out(2 * p + 2), row_out(2 * p + 3)};
      dot_tile_pairs<D, 2>(f, tile, r, nb, qp, out);
    }
    if (p < pairs) {
      const float* qp[1] = {pair_q(p)};
      float* out[2] = {row_out(2 * p), row_out(2 * p + 1)};
      dot_tile_pairs<D, 1>(f, tile, r, nb, qp, out);
    }
    if (n_q % 2)
      dot_tile_row<D>(f, tile, r, nb, q + static_cast<size_t>(n_q - 1) * hd, scores + static_cast<size_t>(n_q - 1) * n_tokens + t);
  }
  dot_rows_tail<D>(f, q, n_q, rows, n_tokens, t, scores);
}

// Blocks whose sums run side by side in the pair form of axpy_block_group: each vector's sum is
// one chain of dependent FMAs (four per tile, in row order), and two FMA ports of four cycles'
// latency need eight chains in flight; 32 vector registers hold them with their weights.
template <class D>
inline constexpr int kPairGroup = D::kElems / 8 >= 8 ? 1 : 8 / (D::kElems / 8);

// axpy_block_group for a row pair (a: row A's sums, b: row B's).
template <class D, int G>
KVGATE_AVX512_INLINE void axpy_block_group(const TileSums& ta, const TileSums& tb, int b0) {
  constexpr int V = D::kElems / 8;
  constexpr size_t kChunk = static_cast<size_t>(kTileRows) * V * 8;
  __m512 s[G][V];
  for (int j = 0; j < G; ++j)
    for (int k = 0; k < V; ++k) {
      const int at = (b0 + j) * D::kElems + 8 * k;
      s[j][k] = pair(_mm256_loadu_ps(ta.acc + at), _mm256_loadu_ps(tb.acc + at));
    }
  for (int tile = 0; tile < ta.n_tiles; ++tile) {
    const float* v = ta.decoded + (static_cast<size_t>(tile) * ta.nb + b0) * kChunk;
    for (int j = 0; j < G; ++j) {
      const float* wa = ta.weights<D>(tile, b0 + j);
      const float* wb = tb.weights<D>(tile, b0 + j);
      __m512 wv[kTileRows];
      for (int i = 0; i < kTileRows; ++i) wv[i] = pair_set1(wa[i], wb[i]);
      __m512 add = _mm512_setzero_ps();
      if constexpr (D::kBlockMin || D::kRowMin) add = pair_set1(ta.add<D>(tile, b0 + j), tb.add<D>(tile, b0 + j));
      for (int k = 0; k < V; ++k) {
        for (int i = 0; i < kTileRows; ++i) s[j][k] = _mm512_fmadd_ps(both(v + j * kChunk + (i * V + k) * 8), wv[i], s[j][k]);
        if constexpr (D::kBlockMin || D::kRowMin) s[j][k] = _mm512_add_ps(s[j][k], add);
      }
    }
  }
  for (int j = 0; j < G; ++j)
    for (int k = 0; k < V; ++k) {
      const int at = (b0 + j) * D::kElems + 8 * k;
      _mm256_storeu_ps(ta.acc + at, low(s[j][k]));
      _mm256_storeu_ps(tb.acc + at, high(s[j][k]));
    }
}

template <class D>
KVGATE_AVX512 void axpy_rows_pairs(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens,
                                   float* acc) {
  thread_local DecodedRows<D> dr;
  thread_local RowFactors<D> fa, fb;
  dr.decode(f, rows, n_tokens);
  for (int qi = 0; qi + 1 < n_q; qi += 2) {
    fa.compute(f, rows, weights + static_cast<size_t>(qi) * n_tokens, dr);
    fb.compute(f, rows, weights + static_cast<size_t>(qi + 1) * n_tokens, dr);
    const TileSums ta = TileSums::of(dr, fa, acc + static_cast<size_t>(qi) * f.head_dim);
    const TileSums tb = TileSums::of(dr, fb, acc + static_cast<size_t>(qi + 1) * f.head_dim);
    int b = 0;
    for (; b + kPairGroup<D> <= dr.nb; b += kPairGroup<D>) axpy_block_group<D, kPairGroup<D>>(ta, tb, b);
    for (; b < dr.nb; ++b) axpy_block_group<D, 1>(ta, tb, b);
  }
  if (n_q % 2) {
    fa.compute(f, rows, weights + static_cast<size_t>(n_q - 1) * n_tokens, dr);
    axpy_tiles_row<D>(TileSums::of(dr, fa, acc + static_cast<size_t>(n_q - 1) * f.head_dim));
  }
  axpy_rows_tail<D>(f, weights, n_q, rows, n_tokens, dr.n_tiles * kTileRows, acc);
}

}  // namespace kvgate::kernels::simd::avx512

#pragma GCC diagnostic pop
