#pragma once
// AVX-512 forms of the multi-row drivers of kernels/simd_avx2_rows.h: each 512-bit vector holds
// the same 8-float chunk for two query rows (low half row A, high half row B), and the decoded
// key or value vector is broadcast to both halves. Per lane every operation and its order are
// those of the AVX2 driver for that row, so the two give the same bits; what changes is that one
// FMA does two rows' work and a decoded tile is read once per pair. Odd rows and the tokens
// past the last whole tile go through the AVX2 code.
#include "kernels/simd_avx2_rows.h"
#include "kernels/simd_avx512_util.h"

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

// ---- 512-bit decode ----
// A decoder may add `static void decode512(const uint8_t* b, __m512* v)` (AVX-512): the raw
// values of kDecode512Elems<D> elements from block b, 16 per vector, the same floats decode
// gives (codes are small integers or exact table values, so no rounding differs). An 8-element
// decoder's decode512 covers two blocks, which only decoders without block scales offer: their
// blocks lie back to back. The tile decode is the per-token cost the pair drivers add to the
// FMAs, and it runs on the two vector ports the FMAs need; one table permute per 16 codes (the
// 4-bit formats) or one widening per 16 (8-bit, f16) is a quarter to a half of the AVX2 decode.
template <class D>
concept Decodes512 = requires(const uint8_t* b, __m512* v) { D::decode512(b, v); };
template <class D>
inline constexpr int kDecode512Elems = D::kElems < 16 ? 16 : D::kElems;

// 16-entry float tables: vpermps reads only the low four bits of each index, so codes need no mask.
KVGATE_AVX512_INLINE __m512 table16(const float (&t)[16]) { return _mm512_loadu_ps(t); }
inline constexpr float kNibbles[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
inline constexpr float kNibblesMinus8[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
// E2M1 (mxfp4, nvfp4) at twice its value, all integers; the block scale carries the 1/2.
inline constexpr float kE2m1Twice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// ggml's 4-bit layout (byte j holds element j in its low nibble, j + 16 in its high one).
KVGATE_AVX512_INLINE void lookup_nibbles32(const uint8_t* qs, __m512 table, __m512* v) {
  const __m512i codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  v[0] = _mm512_permutexvar_ps(codes, table);
  v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), table);
}
// 16 codes in order, two per byte, low nibble first (the u32 at p holds elements 0..7).
KVGATE_AVX512_INLINE __m512 lookup_nibbles16(const uint8_t* p, __m512 table) {
  const __m512i words = _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m512i spread = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), words);
  const __m512i shifted = _mm512_srlv_epi32(spread, _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28));
  return _mm512_permutexvar_ps(shifted, table);
}
KVGATE_AVX512_INLINE __m512 cvt_i8x16_512(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
KVGATE_AVX512_INLINE __m512 cvt_u8x16_512(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

// Decoders whose block_d is the f16 at the block's start and block_m (if any) the f16 after it
// (ggml's blocks). Their scales are gathered a column at a time: one gather and one conversion
// per 4 or 8 rows instead of a load, a conversion and a store per row and block.
template <class D>
concept F16BlockScales = requires { requires D::kF16Scales; };

// The f16 values at p + offset[i], converted. Each lane reads 4 bytes: the value and the 2 bytes
// after it, which lie inside the same block. Gathers cost per instruction more than per lane
// here (7 ns for four 4-lane gathers, 3.5 ns for one of 16), so callers fill 16 lanes at a time.
KVGATE_AVX512_INLINE __m512 gather_f16x16(const uint8_t* p, __m512i offset) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(offset, p, 1)));
}
KVGATE_AVX512_INLINE __m128 gather_f16x4(const uint8_t* p, __m128i offset) {
  return _mm_cvtph_ps(_mm_cvtepi32_epi16(_mm_i32gather_epi32(reinterpret_cast<const int*>(p), offset, 1)));
}

template <class D>
KVGATE_AVX512_INLINE void scales16(const uint8_t* first, __m512i offset, float* d, float* m) {
  _mm512_storeu_ps(d, gather_f16x16(first, offset));
  if constexpr (D::kBlockMin) _mm512_storeu_ps(m, gather_f16x16(first + 2, offset));
}
template <class D>
KVGATE_AVX512_INLINE void scales4(const uint8_t* first, __m128i offset, float* d, float* m) {
  _mm_storeu_ps(d, gather_f16x4(first, offset));
  if constexpr (D::kBlockMin) _mm_storeu_ps(m, gather_f16x4(first + 2, offset));
}

// Block scales (and minima) of rows [0, n_rows) (a multiple of 4), rows row_bytes apart:
// d[b * stride + row] = block_d of row's block b. Where stride is n_rows (a tile: 4 or 8 rows)
// the outputs are one run over (block, row), gathered 16 at a time across blocks.
template <class D>
KVGATE_AVX512_INLINE void block_scales(const uint8_t* rows, int n_rows, int row_bytes, int nb, float* d, float* m,
                                       size_t stride) {
  const uint8_t* first = rows + D::kHeader;
  if constexpr (F16BlockScales<D>) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i rows16 = _mm512_mullo_epi32(lane, _mm512_set1_epi32(row_bytes));
    const __m128i rows4 = _mm512_castsi512_si128(rows16);
    if (stride == static_cast<size_t>(n_rows) && (n_rows == 4 || n_rows == 8)) {
      // Output k is block k / n_rows, row k % n_rows.
      const int shift = n_rows == 4 ? 2 : 3;
      const __m512i in_row = _mm512_mullo_epi32(_mm512_and_si512(lane, _mm512_set1_epi32(n_rows - 1)), _mm512_set1_epi32(row_bytes));
      __m512i offset = _mm512_add_epi32(in_row, _mm512_mullo_epi32(_mm512_srli_epi32(lane, shift), _mm512_set1_epi32(D::kBytes)));
      const __m512i step = _mm512_set1_epi32((16 >> shift) * D::kBytes);
      const int total = nb * n_rows;
      int k = 0;
      for (; k + 16 <= total; k += 16, offset = _mm512_add_epi32(offset, step)) scales16<D>(first, offset, d + k, m + k);
      for (; k < total; k += 4)  // total is a multiple of n_rows, so k .. k + 3 lie in one block
        scales4<D>(first, _mm_add_epi32(rows4, _mm_set1_epi32((k & (n_rows - 1)) * row_bytes + (k >> shift) * D::kBytes)),
                   d + k, m + k);
      return;
    }
    for (int b = 0; b < nb; ++b) {
      const size_t at = static_cast<size_t>(b) * stride;
      int row = 0;
      for (; row + 16 <= n_rows; row += 16)
        scales16<D>(first, _mm512_add_epi32(rows16, _mm512_set1_epi32(row * row_bytes + b * D::kBytes)), d + at + row,
                    m + at + row);
      for (; row < n_rows; row += 4)
        scales4<D>(first, _mm_add_epi32(rows4, _mm_set1_epi32(row * row_bytes + b * D::kBytes)), d + at + row, m + at + row);
    }
  } else {
    for (int b = 0; b < nb; ++b)
      for (int row = 0; row < n_rows; ++row) {
        const uint8_t* at = first + static_cast<size_t>(row) * row_bytes + static_cast<size_t>(b) * D::kBytes;
        d[static_cast<size_t>(b) * stride + row] = D::block_d(at);
        if constexpr (D::kBlockMin) m[static_cast<size_t>(b) * stride + row] = D::block_m(at);
      }
  }
}

// Elements one decode step yields: decode512's, or one block where the decoder has none.
template <class D>
inline constexpr int kUnitElems = Decodes512<D> ? kDecode512Elems<D> : D::kElems;

// One row's blocks [0, nb) decoded, unit by unit (kUnitElems, or one block when kWide is false):
// unit u's elements in order at dst + u * kUnitStride.
template <class D, size_t kUnitStride, bool kWide = Decodes512<D>>
KVGATE_AVX512_INLINE void decode_row_blocks(const uint8_t* row, int nb, float* dst) {
  constexpr int V = D::kElems / 8;
  constexpr int kUnit = kWide ? kUnitElems<D> : D::kElems;
  constexpr int kBlocks = kUnit / D::kElems;
  static_assert(kBlocks == 1 || !D::kBlockScaled, "two blocks per decode512 only without block scales");
  const uint8_t* blocks = row + D::kHeader;
  int b = 0;
  if constexpr (kWide) {
    __m512 w[kUnit / 16];
    // Unrolled, with the output pointer stepped rather than recomputed from b: the loop is a
    // few vector instructions per unit, and its index arithmetic was most of its cost.
    const int units = nb / kBlocks;
    float* out = dst;
#pragma GCC unroll 8
    for (int u = 0; u < units; ++u, out += kUnitStride) {
      D::decode512(blocks + static_cast<size_t>(u) * kBlocks * D::kBytes, w);
      for (int j = 0; j < kUnit / 16; ++j) _mm512_storeu_ps(out + 16 * j, w[j]);
    }
    b = units * kBlocks;
  }
  // Every block without kWide (kBlocks 1), else an odd last 8-element block (b even): either way
  // the start of unit b / kBlocks.
  for (; b < nb; ++b) {
    __m256 v[V];
    D::decode(blocks + static_cast<size_t>(b) * D::kBytes, v);
    float* out = dst + static_cast<size_t>(b / kBlocks) * kUnitStride;
    for (int k = 0; k < V; ++k) _mm256_storeu_ps(out + 8 * k, v[k]);
  }
}

// Calls body(nb) with nb a constant for head_dim 64 and 128 (the models' head sizes), so the
// per-row decode loops inlined into it unroll completely: at a few vector instructions per
// unit, a counted loop's bookkeeping was a third of the decode.
template <class D, class Body>
KVGATE_AVX512_INLINE void with_block_count(int nb, Body&& body) {
  if (nb * D::kElems == 128)
    body(128 / D::kElems);
  else if (nb * D::kElems == 64)
    body(64 / D::kElems);
  else
    body(nb);
}

// DecodedTile::decode of the first n_rows rows through decode_row_blocks.
template <class D, int kRows>
KVGATE_AVX512_INLINE void decode_tile(DecodedTile<D, kRows>& tile, const uint8_t* const* r, int n_rows, int nb) {
  tile.set_head_dim(nb * D::kElems);
  with_block_count<D>(nb, [&](int n) KVGATE_AVX512_LAMBDA {
    const size_t row_bytes = D::kHeader + static_cast<size_t>(n) * D::kBytes;
    for (int i = 0; i < n_rows; ++i) {
      prefetch_row_ahead(r[i], row_bytes);
      decode_row_blocks<D, kUnitElems<D>>(r[i], n, tile.row_floats(i));
    }
  });
  // The tile's rows are consecutive stored rows (tile_rows).
  if constexpr (D::kBlockScaled)
    block_scales<D>(r[0], n_rows, static_cast<int>(r[1] - r[0]), nb, &tile.d[0][0], &tile.m[0][0], kRows);
}

// DecodedRows::decode through decode_row_blocks, in a layout of L-element blocks: the format's
// blocks, or 16 (one decode512) for an 8-element format without block scales, so each decode
// is one 512-bit store rather than two halves 4 blocks apart. Without kValues only the block
// scales (for callers that decode the values themselves).
template <class D, int L, bool kValues = true>
KVGATE_AVX512_INLINE void decode_rows(DecodedRows<D>& dr, const RowFormat& f, const uint8_t* rows, int n_tokens) {
  constexpr size_t kChunk = static_cast<size_t>(kTileRows) * L;
  constexpr bool kWide = Decodes512<D> && (L == kUnitElems<D>);
  const int n_rows = dr.prepare(f, n_tokens, L);
  float* out = dr.decoded.data();
  float* bd = dr.block_d.data();
  float* bm = dr.block_m.data();
  const int nb = f.head_dim / D::kElems;
  const size_t tile_floats = static_cast<size_t>(dr.nb) * kChunk;
  const size_t padded = dr.padded_rows;
  // Locals only in the loop: dr is thread_local, and each access to it is a TLS lookup.
  if constexpr (kValues) with_block_count<D>(nb, [&](int n) KVGATE_AVX512_LAMBDA {
    for (int row = 0; row < n_rows; ++row) {
      const uint8_t* r = rows + static_cast<size_t>(row) * f.row_bytes;
      prefetch_row_ahead(r, f.row_bytes);
      decode_row_blocks<D, kChunk, kWide>(
          r, n, out + static_cast<size_t>(row / kTileRows) * tile_floats + static_cast<size_t>(row % kTileRows) * L);
    }
  });
  if constexpr (D::kBlockScaled) block_scales<D>(rows, n_rows, static_cast<int>(f.row_bytes), nb, bd, bm, padded);
}

// hsum4 (kernels/simd_avx2_util.h) of both rows of T tiles' accumulators (a[4s .. 4s + 3]:
// tile s's keys) at once: the same additions per sum, ((l0 + l4) + (l2 + l6)) + ((l1 + l5) +
// (l3 + l7)), pairing registers at every step (two tiles: 26 instructions instead of 42 for a
// 4-key reduction per tile; one: 14 instead of 20). sums[tile][row]: the tile's four keys' sums
// for row A and row B.
template <int T>
KVGATE_AVX512_INLINE void hsum_tiles_pair(const __m512* a, __m128 (*sums)[2]) {
  static_assert(T == 1 || T == 2);
  // Quarters of an accumulator: row A lanes 0-3, A 4-7, B 0-3, B 4-7. Step 1, s_i = l_i + l_(i+4):
  // w[i] = [x A, x B, y A, y B] for the pair (x, y) = (a[2i], a[2i + 1]).
  __m512 w[2 * T];
  for (int i = 0; i < 2 * T; ++i) {
    const __m512 x = a[2 * i], y = a[2 * i + 1];
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Step 2, s0 + s2 and s1 + s3 within each quarter, for the pair (w[2j], w[2j + 1]).
  __m512 z[T];
  for (int j = 0; j < T; ++j) {
    const __m512 x = w[2 * j], y = w[2 * j + 1];
    z[j] = _mm512_add_ps(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Step 3, the sums' two halves added: quarter 0 = row A keys 0, 2 (, 4, 6); 1 = row B's; 2 = row
  // A keys 1, 3 (, 5, 7); 3 = row B's. With one tile both halves of each quarter are the same.
  const __m512 z1 = z[T - 1];
  const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(z[0], z1, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(z[0], z1, _MM_SHUFFLE(3, 1, 3, 1)));
  // Even and odd keys interleaved: quarter 0 of lo = row A keys 0-3, quarter 1 = row B keys 0-3.
  const __m512 odd = _mm512_shuffle_f32x4(e, e, _MM_SHUFFLE(1, 0, 3, 2));
  const __m512 lo = _mm512_unpacklo_ps(e, odd);
  sums[0][0] = _mm512_castps512_ps128(lo);
  sums[0][1] = _mm512_extractf32x4_ps(lo, 1);
  if constexpr (T == 2) {
    const __m512 hi = _mm512_unpackhi_ps(e, odd);
    sums[1][0] = _mm512_castps512_ps128(hi);
    sums[1][1] = _mm512_extractf32x4_ps(hi, 1);
  }
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
// ...), against T tiles of four decoded rows: tile s's scores of each row at out[s][2p] (A) and
// out[s][2p + 1] (B), as dot_tile_row gives them. Each (row, key) sum is one chain of dependent
// FMAs through the head_dim; two FMA ports of four cycles' latency need eight chains in flight,
// and more where consecutive passes cannot overlap.
template <class D, int P, int T, class Tile>
KVGATE_AVX512_INLINE void dot_tile_pairs(const RowFormat& f, const Tile& tile, const uint8_t* const* r, int nb,
                                         const float* const* qp, float* const (*out)[2 * P]) {
  constexpr int V = D::kElems / 8;
  constexpr int kRows = kTileRows * T;
  __m512 acc[P][kRows], qtotal[P];
  for (int p = 0; p < P; ++p) {
    qtotal[p] = _mm512_setzero_ps();
    for (int i = 0; i < kRows; ++i) acc[p][i] = _mm512_setzero_ps();
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
    for (int i = 0; i < kRows; ++i)
      for (int p = 0; p < P; ++p)
        acc[p][i] = dot_decoded<D>(tile.row(i) + b * V, tile.d[b][i], tile.m[b][i], qv[p], qsum[p], acc[p][i]);
  }
  float total_a[P], total_b[P];
  for (int p = 0; p < P; ++p) {
    total_a[p] = query_total<D>(low(qtotal[p]));
    total_b[p] = query_total<D>(high(qtotal[p]));
  }
  __m128 sums[P][T][2];  // [pair][tile][row A, row B]: the tile's four keys
  for (int p = 0; p < P; ++p) hsum_tiles_pair<T>(acc[p], sums[p]);
  for (int s = 0; s < T; ++s) {
    const TileRowFactors factors = tile_row_factors<D>(f, r + kTileRows * s);
    for (int p = 0; p < P; ++p) {
      finish_tile_scores<D>(factors, sums[p][s][0], total_a[p], out[s][2 * p]);
      finish_tile_scores<D>(factors, sums[p][s][1], total_b[p], out[s][2 * p + 1]);
    }
  }
}

// Tiles per pass of the pair dot. Without block scales each (row, key) sum is one chain through
// the whole head_dim (16 FMAs at 128), and one tile's eight chains leave the ports idle while a
// pass drains into its reductions; two tiles keep sixteen. Block-scaled formats' sums are short
// per-block chains joined once per block, and two tiles' temporaries would not fit 32 registers.
template <class D>
inline constexpr int kPassTiles = D::kBlockScaled ? 1 : 2;

// Every query row against the tokens [t, t + 4T) of a decoded tile.
template <class D, int T, class Tile>
KVGATE_AVX512_INLINE void dot_pass(const RowFormat& f, const Tile& tile, const uint8_t* const* r, int nb, const float* q,
                                   const float* qi2, int n_q, int n_tokens, int t, float* scores) {
  const int hd = f.head_dim;
  const int pairs = n_q / 2;
  auto pair_q = [&](int p) { return qi2 + static_cast<size_t>(p) * 2 * hd; };
  auto row_out = [&](int row, int s) { return scores + static_cast<size_t>(row) * n_tokens + t + kTileRows * s; };
  int p = 0;
  for (; p + 2 <= pairs; p += 2) {
    const float* qp[2] = {pair_q(p), pair_q(p + 1)};
    float* out[T][4];
    for (int s = 0; s < T; ++s)
      for (int j = 0; j < 4; ++j) out[s][j] = row_out(2 * p + j, s);
    dot_tile_pairs<D, 2, T>(f, tile, r, nb, qp, out);
  }
  if (p < pairs) {
    const float* qp[1] = {pair_q(p)};
    float* out[T][2];
    for (int s = 0; s < T; ++s)
      for (int j = 0; j < 2; ++j) out[s][j] = row_out(2 * p + j, s);
    dot_tile_pairs<D, 1, T>(f, tile, r, nb, qp, out);
  }
  if (n_q % 2)
    for (int s = 0; s < T; ++s)
      dot_tile_row<D>(f, tile, kTileRows * s, r + kTileRows * s, nb, q + static_cast<size_t>(n_q - 1) * hd,
                      row_out(n_q - 1, s));
}

template <class D>
KVGATE_AVX512 void dot_rows_pairs(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens,
                                  float* scores) {
  constexpr int kRows = kTileRows * kPassTiles<D>;
  const int nb = f.head_dim / D::kElems;
  const int hd = f.head_dim;
  const int pairs = n_q / 2;
  thread_local ScratchFloats interleaved;
  interleaved.resize(static_cast<size_t>(pairs) * 2 * hd);
  float* qi2 = interleaved.data();
  for (int p = 0; p < pairs; ++p)
    for (int c = 0; c < hd; c += 8) {
      const float* a = q + static_cast<size_t>(2 * p) * hd + c;
      _mm512_storeu_ps(qi2 + static_cast<size_t>(p) * 2 * hd + 2 * c, pair(_mm256_loadu_ps(a), _mm256_loadu_ps(a + hd)));
    }
  DecodedTile<D, kRows> tile;
  const uint8_t* r[kRows];
  int t = 0;
  for (; t + kRows <= n_tokens; t += kRows) {
    set_row_pointers(rows + static_cast<size_t>(t) * f.row_bytes, f.row_bytes, kRows, r);
    decode_tile<D>(tile, r, kRows, nb);
    dot_pass<D, kPassTiles<D>>(f, tile, r, nb, q, qi2, n_q, n_tokens, t, scores);
  }
  if constexpr (kPassTiles<D> > 1)
    for (; t + kTileRows <= n_tokens; t += kTileRows) {
      set_row_pointers(rows + static_cast<size_t>(t) * f.row_bytes, f.row_bytes, kTileRows, r);
      decode_tile<D>(tile, r, kTileRows, nb);
      dot_pass<D, 1>(f, tile, r, nb, q, qi2, n_q, n_tokens, t, scores);
    }
  dot_rows_tail<D>(f, q, n_q, rows, n_tokens, t, scores);
}

// Blocks whose sums run side by side in the pair form of axpy_block_group: each vector's sum is
// one chain of dependent FMAs (four per tile, in row order), and two FMA ports of four cycles'
// latency need eight chains in flight; 32 vector registers hold them with their weights.
template <int L>
inline constexpr int kPairGroup = L / 8 >= 8 ? 1 : 8 / (L / 8);

// axpy_block_group for P row pairs (a[p]: pair p's row A sums, b[p]: its row B's). Each decoded
// vector is loaded once for all P pairs: with one pair per pass, a load per FMA held the loop to
// ~0.55 of the FMA ports' peak; two FMAs per load reach ~0.7, and two pairs double the chains
// in flight.
template <class D, int G, int L, int P>
KVGATE_AVX512_INLINE void axpy_block_group(const TileSums* ta, const TileSums* tb, int b0) {
  static_assert(!D::kBlockScaled, "block-scaled formats take the rows form");
  constexpr int V = L / 8;
  constexpr size_t kChunk = static_cast<size_t>(kTileRows) * V * 8;
  // The sums must stay in registers across the tile loop: unrolled loops index them with
  // constants (GCC keeps a runtime-indexed array in memory, a load and a store per FMA).
  __m512 s[P][G][V];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
    for (int j = 0; j < G; ++j)
#pragma GCC unroll 16
      for (int k = 0; k < V; ++k) {
        const int at = (b0 + j) * L + 8 * k;
        s[p][j][k] = pair(_mm256_loadu_ps(ta[p].acc + at), _mm256_loadu_ps(tb[p].acc + at));
      }
  const int n_tiles = ta[0].n_tiles;
  const size_t nb = static_cast<size_t>(ta[0].nb);
  for (int tile = 0; tile < n_tiles; ++tile) {
    const float* v = ta[0].decoded + (static_cast<size_t>(tile) * nb + b0) * kChunk;
    // Without block scales every block of a tile has the same weights.
    __m512 w[P][kTileRows], add[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      const float* wa = ta[p].weights<D>(tile, b0);
      const float* wb = tb[p].weights<D>(tile, b0);
#pragma GCC unroll 16
      for (int i = 0; i < kTileRows; ++i) w[p][i] = pair_set1(wa[i], wb[i]);
      if constexpr (D::kRowMin) add[p] = pair_set1(ta[p].add<D>(tile, b0), tb[p].add<D>(tile, b0));
    }
#pragma GCC unroll 16
    for (int j = 0; j < G; ++j) {
#pragma GCC unroll 16
      for (int k = 0; k < V; ++k) {
#pragma GCC unroll 16
        for (int i = 0; i < kTileRows; ++i) {
          const __m512 x = both(v + j * kChunk + (i * V + k) * 8);
#pragma GCC unroll 16
          for (int p = 0; p < P; ++p) s[p][j][k] = _mm512_fmadd_ps(x, w[p][i], s[p][j][k]);
        }
        if constexpr (D::kRowMin)
#pragma GCC unroll 16
          for (int p = 0; p < P; ++p) s[p][j][k] = _mm512_add_ps(s[p][j][k], add[p]);
      }
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
    for (int j = 0; j < G; ++j)
#pragma GCC unroll 16
      for (int k = 0; k < V; ++k) {
        const int at = (b0 + j) * L + 8 * k;
        _mm256_storeu_ps(ta[p].acc + at, low(s[p][j][k]));
        _mm256_storeu_ps(tb[p].acc + at, high(s[p][j][k]));
      }
}

// Every block of P row pairs, kPairGroup<L> blocks per pass.
template <class D, int L, int P>
KVGATE_AVX512_INLINE void axpy_pairs_blocks(const TileSums* ta, const TileSums* tb) {
  int b = 0;
  for (; b + kPairGroup<L> <= ta[0].nb; b += kPairGroup<L>) axpy_block_group<D, kPairGroup<L>, L, P>(ta, tb, b);
  for (; b < ta[0].nb; ++b) axpy_block_group<D, 1, L, P>(ta, tb, b);
}

// Query row qi's factors (into rf) and the TileSums over them.
template <class D>
KVGATE_AVX512_INLINE TileSums row_sums(const RowFormat& f, const uint8_t* rows, const float* weights, int n_tokens,
                                       const DecodedRows<D>& dr, RowFactors<D>& rf, int qi, float* acc) {
  rf.compute(f, rows, weights + static_cast<size_t>(qi) * n_tokens, dr);
  return TileSums::of(dr, rf, acc + static_cast<size_t>(qi) * f.head_dim);
}

template <class D, int L>
KVGATE_AVX512_INLINE void axpy_rows_pairs_in(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows,
                                             int n_tokens, float* acc) {
  thread_local DecodedRows<D> dr;
  thread_local RowFactors<D> factors[4];
  decode_rows<D, L>(dr, f, rows, n_tokens);
  int qi = 0;
  for (; qi + 4 <= n_q; qi += 4) {
    const TileSums ta[2] = {row_sums(f, rows, weights, n_tokens, dr, factors[0], qi, acc),
                            row_sums(f, rows, weights, n_tokens, dr, factors[1], qi + 2, acc)};
    const TileSums tb[2] = {row_sums(f, rows, weights, n_tokens, dr, factors[2], qi + 1, acc),
                            row_sums(f, rows, weights, n_tokens, dr, factors[3], qi + 3, acc)};
    axpy_pairs_blocks<D, L, 2>(ta, tb);
  }
  if (qi + 2 <= n_q) {
    const TileSums ta[1] = {row_sums(f, rows, weights, n_tokens, dr, factors[0], qi, acc)};
    const TileSums tb[1] = {row_sums(f, rows, weights, n_tokens, dr, factors[1], qi + 1, acc)};
    axpy_pairs_blocks<D, L, 1>(ta, tb);
    qi += 2;
  }
  if (qi < n_q) axpy_tiles_row<D, L>(row_sums(f, rows, weights, n_tokens, dr, factors[0], qi, acc));
  axpy_rows_tail<D>(f, weights, n_q, rows, n_tokens, dr.n_tiles * kTileRows, acc);
}

// The axpy in rows form: each vector holds 16 elements of one query row, the values are loaded
// (or decoded) whole and each token's weight is broadcast from memory. Per element the FMAs and
// adds are the pair form's, in the same order (the axpy's elements are independent chains,
// unlike the dot's lanes). The pair form needs a weight vector of two rows per token (and per
// block, for block-scaled formats: an insert on the FMAs' port for every four FMAs); here none.
// Its unit is one decode512 (block-scaled: one block).
template <class D>
inline constexpr int kRowsUnit = D::kBlockScaled ? D::kElems : kUnitElems<D>;
template <class D>
inline constexpr int kRowsGroup = 64 / kRowsUnit<D>;  // units per pass: 4 rows x 64 elements in 16 sums
// With one pass of query rows (a decode step's GQA group of up to four) the rows form decodes
// each unit in registers as its values are needed, instead of storing decoded tiles and
// loading them back (page/axpy/q4_0/128/4: 400 -> 340 ns); with more rows every pass would
// decode again (page/axpy/q4_0/128/48: 15 % slower), so they read decoded tiles.
template <class D>
inline constexpr bool kRowsDirect = [] {
  if constexpr (Decodes512<D>) return kDecode512Elems<D> == kRowsUnit<D>;
  return false;
}();

// Stored rows for axpy_rows_group to decode in registers.
struct StoredRows {
  const uint8_t* rows;
  size_t row_bytes;
};

template <class D, int R, int G, bool kDirect>
KVGATE_AVX512_INLINE void axpy_rows_group(const TileSums* t, StoredRows stored, int u0) {
  constexpr int L = kRowsUnit<D>, H = L / 16;
  static_assert(L % 16 == 0);
  constexpr size_t kChunk = static_cast<size_t>(kTileRows) * L;
  constexpr size_t kUnitBytes = static_cast<size_t>(L / D::kElems) * D::kBytes;
  __m512 s[R][G][H];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < G; ++j)
#pragma GCC unroll 16
      for (int h = 0; h < H; ++h) s[r][j][h] = _mm512_loadu_ps(t[r].acc + (u0 + j) * L + 16 * h);
  const int n_tiles = t[0].n_tiles;
  const size_t nu = static_cast<size_t>(t[0].nb);
  for (int tile = 0; tile < n_tiles; ++tile) {
    const float* v = t[0].decoded + (static_cast<size_t>(tile) * nu + u0) * kChunk;
    const float* w[R][G];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int j = 0; j < G; ++j) w[r][j] = t[r].weights<D>(tile, u0 + j);
#pragma GCC unroll 4
    for (int i = 0; i < kTileRows; ++i)
#pragma GCC unroll 16
      for (int j = 0; j < G; ++j) {
        __m512 x[H];
        if constexpr (kDirect)
          D::decode512(stored.rows + (static_cast<size_t>(tile) * kTileRows + i) * stored.row_bytes + D::kHeader +
                           static_cast<size_t>(u0 + j) * kUnitBytes,
                       x);
        else
#pragma GCC unroll 2
          for (int h = 0; h < H; ++h) x[h] = _mm512_loadu_ps(v + j * kChunk + i * L + 16 * h);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
          const __m512 wv = _mm512_set1_ps(w[r][j][i]);
#pragma GCC unroll 2
          for (int h = 0; h < H; ++h) s[r][j][h] = _mm512_fmadd_ps(x[h], wv, s[r][j][h]);
        }
      }
    if constexpr (D::kBlockMin || D::kRowMin)
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int j = 0; j < G; ++j) {
          const __m512 add = _mm512_set1_ps(t[r].add<D>(tile, u0 + j));
#pragma GCC unroll 2
          for (int h = 0; h < H; ++h) s[r][j][h] = _mm512_add_ps(s[r][j][h], add);
        }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int j = 0; j < G; ++j)
#pragma GCC unroll 16
      for (int h = 0; h < H; ++h) _mm512_storeu_ps(t[r].acc + (u0 + j) * L + 16 * h, s[r][j][h]);
}

template <class D, int R, bool kDirect>
KVGATE_AVX512_INLINE void axpy_rows_units(const TileSums* t, StoredRows stored) {
  int u = 0;
  for (; u + kRowsGroup<D> <= t[0].nb; u += kRowsGroup<D>) axpy_rows_group<D, R, kRowsGroup<D>, kDirect>(t, stored, u);
  for (; u < t[0].nb; ++u) axpy_rows_group<D, R, 1, kDirect>(t, stored, u);
}

template <class D, bool kDirect>
KVGATE_AVX512_INLINE void axpy_rows_all(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows,
                                        int n_tokens, float* acc, DecodedRows<D>& dr, RowFactors<D>* factors) {
  const StoredRows stored{rows, f.row_bytes};
  TileSums t[kTileRows];
  for (int qi = 0; qi < n_q; qi += kTileRows) {
    const int n = std::min(kTileRows, n_q - qi);
    for (int r = 0; r < n; ++r) t[r] = row_sums(f, rows, weights, n_tokens, dr, factors[r], qi + r, acc);
    switch (n) {
      case 4: axpy_rows_units<D, 4, kDirect>(t, stored); break;
      case 3: axpy_rows_units<D, 3, kDirect>(t, stored); break;
      case 2: axpy_rows_units<D, 2, kDirect>(t, stored); break;
      default: axpy_rows_units<D, 1, kDirect>(t, stored);
    }
  }
}

// Every query row, four at a time, through axpy_rows_group; head_dim a multiple of kRowsUnit.
template <class D>
KVGATE_AVX512_INLINE void axpy_rows_form(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows,
                                         int n_tokens, float* acc) {
  thread_local DecodedRows<D> dr;
  thread_local RowFactors<D> factors[kTileRows];
  if (kRowsDirect<D> && n_q <= kTileRows) {
    decode_rows<D, kRowsUnit<D>, false>(dr, f, rows, n_tokens);  // the block scales only
    axpy_rows_all<D, kRowsDirect<D>>(f, weights, n_q, rows, n_tokens, acc, dr, factors);
  } else {
    decode_rows<D, kRowsUnit<D>>(dr, f, rows, n_tokens);
    axpy_rows_all<D, false>(f, weights, n_q, rows, n_tokens, acc, dr, factors);
  }
  axpy_rows_tail<D>(f, weights, n_q, rows, n_tokens, dr.n_tiles * kTileRows, acc);
}

// Block-scaled formats (16- and 32-element blocks, head_dim a multiple) always take the rows
// form; the others on decode steps where it decodes in registers, else the pair form.
template <class D>
KVGATE_AVX512 void axpy_rows_pairs(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens,
                                   float* acc) {
  if constexpr (D::kBlockScaled) {
    static_assert(kRowsUnit<D> % 16 == 0);
    axpy_rows_form<D>(f, weights, n_q, rows, n_tokens, acc);
  } else {
    constexpr int kWideLayout = kUnitElems<D>;
    if constexpr (kRowsDirect<D>)
      if (f.head_dim % kRowsUnit<D> == 0 && n_q <= kTileRows) return axpy_rows_form<D>(f, weights, n_q, rows, n_tokens, acc);
    if (kWideLayout != D::kElems && f.head_dim % kWideLayout == 0)
      axpy_rows_pairs_in<D, kWideLayout>(f, weights, n_q, rows, n_tokens, acc);
    else
      axpy_rows_pairs_in<D, D::kElems>(f, weights, n_q, rows, n_tokens, acc);
  }
}

}  // namespace kvgate::kernels::simd::avx512

#pragma GCC diagnostic pop
