#pragma once
// The generic AVX2 drivers of the fused row paths, instantiated per decoder by the family files
// (kernels/simd_avx2_<family>.cc). A decoder turns one block of stored bytes into 8-float
// vectors in "row units" (the value before the per-row or per-tensor scale); the drivers tile 4
// rows at a time so each query chunk is loaded once per 4 keys and 4 independent FMA chains hide
// the latency. Each family exposes its decoders through RowKernels, keyed by the FormatId of the
// registry entry (simd_avx2.cc dispatches).
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "kernels/format_id.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx2_util.h"

namespace kvgate::kernels::simd {

// What the AVX2 code does for one format; a null entry (or false from a call) sends the caller
// to its scalar reference.
struct RowKernels {
  bool (*dot_rows)(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens, float* scores);
  bool (*axpy_rows)(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens, float* acc);
  bool (*dequantize_row)(const RowFormat& f, const uint8_t* row, float* y);
  bool (*quantize_row)(const RowFormat& f, const float* x, uint8_t* row);
};

// The family tables (one per kernels/simd_avx2_<family>.cc): the kernels of `id`, or null when
// the family does not hold it.
const RowKernels* float_row_kernels(FormatId id);    // f32, f16, bf16, fp8_*
const RowKernels* pth_row_kernels(FormatId id);      // int8_pth, fp8_pth, int4_pth
const RowKernels* ggml_row_kernels(FormatId id);     // q8_0, q5_0, q5_1, q4_0, q4_1, iq4_nl, mxfp4
const RowKernels* nvfp4_row_kernels(FormatId id);    // nvfp4, nvfp4_4over6
const RowKernels* uniform_row_kernels(FormatId id);  // u2, u3, u4, u8

namespace avx2 {

// Scratch buffers the row drivers store whole vectors into and broadcast from, on cache-line
// boundaries so no 32- or 64-byte access straddles two lines (malloc aligns to 16 bytes). No
// measurable change on the development VM; it keeps the kernels' cost independent of where
// malloc happens to put a buffer.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
};
using ScratchFloats = std::vector<float, CacheLineAllocator<float>>;

// ---- decoders ----
// Each decoder yields the block's raw values (codes as floats, before any scale). Block formats
// also expose their fp16 scale d (and q4_1's minimum m): the drivers apply d once per block to
// a partial sum instead of once per element, and dequantize applies raw * d (+ m) in exactly
// ggml's order so its output stays bit-identical to the reference.
struct NoBlockScale {
  static constexpr bool kBlockScaled = false, kBlockMin = false;
  static constexpr float kRawFactor = 1.0f;
  static float block_d(const uint8_t*) { return 1.0f; }
  static float block_m(const uint8_t*) { return 0.0f; }
};
// Decoders without a per-row zero point (all but the u{b} formats) and whose dequantize is
// bit-exact per element.
struct NoRowMin {
  static constexpr bool kRowMin = false, kExactDequant = true;
  static float row_min(const uint8_t*) { return 0.0f; }
};

// ---- generic drivers ----
// One row's contribution to a dot product over one block: raw . q, scaled by the block's d
// (and q4_1's m times the block's query sum).
// The arithmetic of one row's block once its codes are decoded: shared by the path that decodes
// per query and the one that decodes a tile once for all queries, so both give the same bits.
template <class D>
KVGATE_AVX2_INLINE __m256 dot_decoded(const __m256* v, float d, float m, const __m256* qv, __m256 qsum, __m256 acc) {
  constexpr int V = D::kElems / 8;
  if constexpr (D::kBlockScaled) {
    __m256 p = _mm256_mul_ps(v[0], qv[0]);
    for (int k = 1; k < V; ++k) p = _mm256_fmadd_ps(v[k], qv[k], p);
    acc = _mm256_fmadd_ps(p, _mm256_set1_ps(d), acc);
    if constexpr (D::kBlockMin) acc = _mm256_fmadd_ps(qsum, _mm256_set1_ps(m), acc);
    return acc;
  } else {
    for (int k = 0; k < V; ++k) acc = _mm256_fmadd_ps(v[k], qv[k], acc);
    return acc;
  }
}

template <class D>
KVGATE_AVX2_INLINE __m256 dot_block(const uint8_t* blk, const __m256* qv, __m256 qsum, __m256 acc) {
  constexpr int V = D::kElems / 8;
  __m256 v[V];
  D::decode(blk, v);
  return dot_decoded<D>(v, D::kBlockScaled ? D::block_d(blk) : 1.0f, D::kBlockMin ? D::block_m(blk) : 0.0f, qv, qsum,
                        acc);
}

// Bytes past the row being decoded that the drivers prefetch, one row's worth per row. A head's
// share of a page is a few KiB, too short a run for the hardware prefetcher to ramp up on, and
// the attention walk reads the shares of a page's heads, then the next page's, back to back, so
// the bytes past a call's rows are mostly the next call's. Asking for them row by row at a fixed
// distance keeps DRAM busy while the FMAs run, without the bursts that overflow the line fill
// buffers; past the walk's end the requests are wasted, never faults. 1 KiB measured best at
// 32k tokens (docs/perf-log.md, "row prefetch": 0.5 to 2 KiB within noise, 8 KiB slower).
inline constexpr size_t kPrefetchAhead = 1024;
KVGATE_AVX2_INLINE void prefetch_row_ahead(const uint8_t* row, size_t row_bytes) {
  for (size_t o = 0; o < row_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(row + kPrefetchAhead + o), _MM_HINT_T0);
}

// Four consecutive rows with every block decoded once, so a tile is decoded once for all the
// query rows of a call (a prefill chunk times the GQA group) instead of once per query row. The
// values are exactly those the per-query path decodes, so results do not change.
inline constexpr int kTileRows = 4;
inline constexpr int kTileMaxHeadDim = 1024;  // kv_format.cc's limit
template <class D, int kRows = kTileRows>
struct DecodedTile {
  static constexpr int kMaxBlocks = kTileMaxHeadDim / D::kElems;
  // Block scales, [block][row] so a tile's are contiguous.
  float d[kMaxBlocks][kRows];
  float m[kMaxBlocks][kRows];
  // Rows head_dim + 16 floats apart: at kTileMaxHeadDim apart (4 KiB) every row's vectors would
  // share their low 12 address bits and L1 sets with the others'.
  alignas(64) float v[kRows * (kTileMaxHeadDim + 16)];
  int stride = 0;

  KVGATE_AVX2_INLINE const __m256* row(int i) const {
    return reinterpret_cast<const __m256*>(v + static_cast<size_t>(i) * stride);
  }
  KVGATE_AVX2_INLINE float* row_floats(int i) { return v + static_cast<size_t>(i) * stride; }
  void set_head_dim(int head_dim) { stride = head_dim + 16; }

  KVGATE_AVX2_INLINE void decode(const uint8_t* const* r, int nb) {
    constexpr int V = D::kElems / 8;
    set_head_dim(nb * D::kElems);
    for (int i = 0; i < kRows; ++i) {
      prefetch_row_ahead(r[i], D::kHeader + static_cast<size_t>(nb) * D::kBytes);
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = r[i] + D::kHeader + static_cast<size_t>(b) * D::kBytes;
        __m256 x[V];
        D::decode(blk, x);
        for (int k = 0; k < V; ++k) _mm256_store_ps(row_floats(i) + b * D::kElems + 8 * k, x[k]);
        if constexpr (D::kBlockScaled) d[b][i] = D::block_d(blk);
        if constexpr (D::kBlockMin) m[b][i] = D::block_m(blk);
      }
    }
  }
};

template <class D>
KVGATE_AVX2_INLINE __m256 query_block_sum(const __m256* qv) {
  constexpr int V = D::kElems / 8;
  __m256 s = qv[0];
  for (int k = 1; k < V; ++k) s = _mm256_add_ps(s, qv[k]);
  return s;
}

// The row factors finish_tile_scores applies to a tile's four rows, read once per tile for
// every query row (with a GQA group of query rows per call, reading them per query row made
// the u{b} formats' f16 header loads a third of their dot).
struct TileRowFactors {
  __m128 scale, min;
};
template <class D>
KVGATE_AVX2_INLINE TileRowFactors tile_row_factors(const RowFormat& f, const uint8_t* const* r) {
  TileRowFactors t{_mm_set1_ps(1.0f), _mm_setzero_ps()};
  if constexpr (D::kRowScaled)
    t.scale = _mm_setr_ps(D::row_scale(r[0], f.scale), D::row_scale(r[1], f.scale), D::row_scale(r[2], f.scale),
                          D::row_scale(r[3], f.scale));
  if constexpr (D::kRowMin) t.min = _mm_setr_ps(D::row_min(r[0]), D::row_min(r[1]), D::row_min(r[2]), D::row_min(r[3]));
  return t;
}

// finish() of dot_rows_tail for four rows of a tile at once, the same operations in the same
// order per lane: score holds hsum of the tile's rows' raw sums for one query row, qtotal is
// the hsum of that row's query sum (used by the u{b} formats only).
template <class D>
KVGATE_AVX2_INLINE void finish_tile_scores(const TileRowFactors& t, __m128 score, float qtotal, float* out) {
  if constexpr (D::kRawFactor != 1.0f) score = _mm_mul_ps(score, _mm_set1_ps(D::kRawFactor));
  if constexpr (D::kRowScaled) score = _mm_mul_ps(score, t.scale);
  if constexpr (D::kRowMin) score = _mm_add_ps(score, _mm_mul_ps(_mm_set1_ps(qtotal), t.min));
  _mm_storeu_ps(out, score);
}

template <class D>
KVGATE_AVX2_INLINE float query_total(__m256 qtotal) {
  return D::kRowMin ? hsum(qtotal) : 0.0f;
}

// R query rows (qp[j]) against a decoded tile: each row's four scores at out[j]. Each (row,
// key) sum is one chain of dependent FMAs through the head_dim, so one row's four keys leave
// the FMA ports waiting on latency; two rows keep eight chains in flight. Only for decoders of
// one or two vectors per block: with four (the ggml blocks) each block's partial sums are
// short independent chains already, and two rows' query vectors would not fit in 16 registers.
template <class D>
inline constexpr int kTileQueryRows = D::kElems / 8 <= 2 ? 2 : 1;

// Rows row0 .. row0 + 3 of a decoded tile (r: their stored rows).
template <class D, int R, class Tile>
KVGATE_AVX2_INLINE void dot_tile_rows(const RowFormat& f, const Tile& tile, int row0, const uint8_t* const* r, int nb,
                                      const float* const* qp, float* const* out) {
  constexpr int V = D::kElems / 8;
  __m256 acc[R][kTileRows], qtotal[R];
  for (int j = 0; j < R; ++j) {
    qtotal[j] = _mm256_setzero_ps();
    for (int i = 0; i < kTileRows; ++i) acc[j][i] = _mm256_setzero_ps();
  }
  for (int b = 0; b < nb; ++b) {
    __m256 qv[R][V], qsum[R];
    for (int j = 0; j < R; ++j) {
      for (int k = 0; k < V; ++k) qv[j][k] = _mm256_loadu_ps(qp[j] + b * D::kElems + 8 * k);
      qsum[j] = (D::kBlockMin || D::kRowMin) ? query_block_sum<D>(qv[j]) : _mm256_setzero_ps();
      if constexpr (D::kRowMin) qtotal[j] = _mm256_add_ps(qtotal[j], qsum[j]);
    }
    for (int i = 0; i < kTileRows; ++i)
      for (int j = 0; j < R; ++j)
        acc[j][i] = dot_decoded<D>(tile.row(row0 + i) + b * V, tile.d[b][row0 + i], tile.m[b][row0 + i], qv[j], qsum[j],
                                   acc[j][i]);
  }
  const TileRowFactors factors = tile_row_factors<D>(f, r);
  for (int j = 0; j < R; ++j)
    finish_tile_scores<D>(factors, hsum4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]), query_total<D>(qtotal[j]), out[j]);
}

template <class D, class Tile>
KVGATE_AVX2_INLINE void dot_tile_row(const RowFormat& f, const Tile& tile, int row0, const uint8_t* const* r, int nb,
                                     const float* qp, float* out) {
  dot_tile_rows<D, 1>(f, tile, row0, r, nb, &qp, &out);
}

// r[i] = first + i * row_bytes for i < n, each from the one before: GCC vectorizes the product
// form into 64-bit vector multiplies (vpmullq, 15 cycles), which a pass then waits on.
inline void set_row_pointers(const uint8_t* first, size_t row_bytes, int n, const uint8_t** r) {
  r[0] = first;
  for (int i = 1; i < n; ++i) r[i] = r[i - 1] + row_bytes;
}

inline void tile_rows(const uint8_t* rows, size_t row_bytes, int t, const uint8_t** r) {
  set_row_pointers(rows + static_cast<size_t>(t) * row_bytes, row_bytes, kTileRows, r);
}

// Tokens [t, n_tokens) one query row at a time: four rows per step, then single rows.
template <class D>
KVGATE_AVX2 void dot_rows_tail(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens, int t,
                               float* scores) {
  constexpr int V = D::kElems / 8;
  const int nb = f.head_dim / D::kElems;
  const size_t rb = f.row_bytes;
  // score = (raw . q) * factor * row scale (+ row zero * sum(q) for the u{b} formats).
  auto finish = [&](__m256 acc, __m256 qtotal, const uint8_t* row) KVGATE_AVX2_LAMBDA {
    float score = hsum(acc) * D::kRawFactor * D::row_scale(row, f.scale);
    if constexpr (D::kRowMin) score += hsum(qtotal) * D::row_min(row);
    return score;
  };
  for (; t + 4 <= n_tokens; t += 4) {
    const uint8_t* r0 = rows + static_cast<size_t>(t) * rb;
    const uint8_t* r1 = r0 + rb;
    const uint8_t* r2 = r1 + rb;
    const uint8_t* r3 = r2 + rb;
    for (int qi = 0; qi < n_q; ++qi) {
      const float* qp = q + static_cast<size_t>(qi) * f.head_dim;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, qtotal = a0;
      for (int b = 0; b < nb; ++b) {
        const size_t off = D::kHeader + static_cast<size_t>(b) * D::kBytes;
        __m256 qv[V];
        for (int k = 0; k < V; ++k) qv[k] = _mm256_loadu_ps(qp + b * D::kElems + 8 * k);
        const __m256 qsum = (D::kBlockMin || D::kRowMin) ? query_block_sum<D>(qv) : _mm256_setzero_ps();
        if constexpr (D::kRowMin) qtotal = _mm256_add_ps(qtotal, qsum);
        a0 = dot_block<D>(r0 + off, qv, qsum, a0);
        a1 = dot_block<D>(r1 + off, qv, qsum, a1);
        a2 = dot_block<D>(r2 + off, qv, qsum, a2);
        a3 = dot_block<D>(r3 + off, qv, qsum, a3);
      }
      float* out = scores + static_cast<size_t>(qi) * n_tokens + t;
      out[0] = finish(a0, qtotal, r0);
      out[1] = finish(a1, qtotal, r1);
      out[2] = finish(a2, qtotal, r2);
      out[3] = finish(a3, qtotal, r3);
    }
  }
  for (; t < n_tokens; ++t) {
    const uint8_t* r0 = rows + static_cast<size_t>(t) * rb;
    for (int qi = 0; qi < n_q; ++qi) {
      const float* qp = q + static_cast<size_t>(qi) * f.head_dim;
      __m256 a0 = _mm256_setzero_ps(), qtotal = a0;
      for (int b = 0; b < nb; ++b) {
        __m256 qv[V];
        for (int k = 0; k < V; ++k) qv[k] = _mm256_loadu_ps(qp + b * D::kElems + 8 * k);
        const __m256 qsum = (D::kBlockMin || D::kRowMin) ? query_block_sum<D>(qv) : _mm256_setzero_ps();
        if constexpr (D::kRowMin) qtotal = _mm256_add_ps(qtotal, qsum);
        a0 = dot_block<D>(r0 + D::kHeader + static_cast<size_t>(b) * D::kBytes, qv, qsum, a0);
      }
      scores[static_cast<size_t>(qi) * n_tokens + t] = finish(a0, qtotal, r0);
    }
  }
}

template <class D>
KVGATE_AVX2 void dot_rows_impl(const RowFormat& f, const float* q, int n_q, const uint8_t* rows, int n_tokens,
                               float* scores) {
  const int nb = f.head_dim / D::kElems;
  int t = 0;
  if (n_q > 1 && f.head_dim <= kTileMaxHeadDim) {
    DecodedTile<D> tile;
    for (; t + kTileRows <= n_tokens; t += kTileRows) {
      const uint8_t* r[kTileRows];
      tile_rows(rows, f.row_bytes, t, r);
      tile.decode(r, nb);
      auto q_row = [&](int qi) { return q + static_cast<size_t>(qi) * f.head_dim; };
      auto out_row = [&](int qi) { return scores + static_cast<size_t>(qi) * n_tokens + t; };
      int qi = 0;
      for (; kTileQueryRows<D> == 2 && qi + 2 <= n_q; qi += 2) {
        const float* qp[2] = {q_row(qi), q_row(qi + 1)};
        float* out[2] = {out_row(qi), out_row(qi + 1)};
        dot_tile_rows<D, kTileQueryRows<D>>(f, tile, 0, r, nb, qp, out);
      }
      for (; qi < n_q; ++qi) dot_tile_row<D>(f, tile, 0, r, nb, q_row(qi), out_row(qi));
    }
  }
  dot_rows_tail<D>(f, q, n_q, rows, n_tokens, t, scores);
}

// acc += sum over R rows of w_r * value_r for one block whose codes are decoded (v[i] points at
// row i's V vectors, d and m are its block's scale and min); w already carries the row scale,
// and row_add is sum_r weight_r * zero_r for the u{b} formats.
template <class D, int R>
KVGATE_AVX2_INLINE void axpy_decoded(const __m256* const* v, const float* d, const float* m, const float* w,
                                     float row_add, float* ab) {
  constexpr int V = D::kElems / 8;
  __m256 wd[R];
  float add = row_add;
  for (int i = 0; i < R; ++i) {
    wd[i] = _mm256_set1_ps(D::kBlockScaled ? w[i] * d[i] : w[i]);
    if constexpr (D::kBlockMin) add += w[i] * m[i];
  }
  for (int k = 0; k < V; ++k) {
    __m256 s = _mm256_loadu_ps(ab + 8 * k);
    for (int i = 0; i < R; ++i) s = _mm256_fmadd_ps(v[i][k], wd[i], s);
    if constexpr (D::kBlockMin || D::kRowMin) s = _mm256_add_ps(s, _mm256_set1_ps(add));
    _mm256_storeu_ps(ab + 8 * k, s);
  }
}

template <class D, int R>
KVGATE_AVX2_INLINE void axpy_block(const uint8_t* const* r, const float* w, float row_add, size_t off, float* ab) {
  constexpr int V = D::kElems / 8;
  __m256 v[R][V];
  const __m256* vp[R];
  float d[R], m[R];
  for (int i = 0; i < R; ++i) {
    D::decode(r[i] + off, v[i]);
    vp[i] = v[i];
    d[i] = D::kBlockScaled ? D::block_d(r[i] + off) : 1.0f;
    m[i] = D::kBlockMin ? D::block_m(r[i] + off) : 0.0f;
  }
  axpy_decoded<D, R>(vp, d, m, w, row_add, ab);
}

// The multi-row axpy's tiles of one call, each block decoded once ([tile][block][row of tile]
// [vector]), with every row's block scales and minima ([block][row], rows padded to 8).
template <class D>
struct DecodedRows {
  int n_tiles = 0, nb = 0;
  size_t padded_rows = 0;
  ScratchFloats decoded, block_d, block_m;

  // Sizes the buffers for a call of n_tokens; returns the rows its whole tiles hold. The layout's
  // blocks are layout_elems long: the format's blocks, or for a format without block scales
  // any multiple of 8 dividing head_dim (the sums do not see where blocks end).
  int prepare(const RowFormat& f, int n_tokens, int layout_elems = D::kElems) {
    const size_t kChunk = static_cast<size_t>(kTileRows) * layout_elems;
    nb = f.head_dim / layout_elems;
    n_tiles = n_tokens / kTileRows;
    const int n_rows = n_tiles * kTileRows;
    padded_rows = (static_cast<size_t>(n_rows) + 7) / 8 * 8;
    decoded.resize(static_cast<size_t>(n_tiles) * nb * kChunk);
    block_d.assign(static_cast<size_t>(nb) * padded_rows, 0.0f);  // rows past n_rows stay 0
    block_m.resize(block_d.size());
    return n_rows;
  }

  KVGATE_AVX2_INLINE void decode(const RowFormat& f, const uint8_t* rows, int n_tokens) {
    const int n_rows = prepare(f, n_tokens);
    // Raw pointers and a loop of their own: this object is thread_local in the drivers, and
    // through its members every store in the loop would reload the vectors' data pointers from
    // the TLS block (a call, as far as the compiler knows, so the decoded vectors spilled too).
    decode_into(f, rows, n_rows, nb, padded_rows, decoded.data(), block_d.data(), block_m.data());
  }

  static KVGATE_AVX2_INLINE void decode_into(const RowFormat& f, const uint8_t* rows, int n_rows, int nb,
                                             size_t padded_rows, float* out, float* bd, float* bm) {
    constexpr int V = D::kElems / 8;
    constexpr size_t kChunk = static_cast<size_t>(kTileRows) * V * 8;
    for (int row = 0; row < n_rows; ++row) {
      const uint8_t* r = rows + static_cast<size_t>(row) * f.row_bytes;
      prefetch_row_ahead(r, f.row_bytes);
      float* dst = out + static_cast<size_t>(row / kTileRows) * nb * kChunk + static_cast<size_t>(row % kTileRows) * V * 8;
      for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = r + D::kHeader + static_cast<size_t>(b) * D::kBytes;
        __m256 v[V];
        D::decode(blk, v);
        for (int k = 0; k < V; ++k) _mm256_storeu_ps(dst + static_cast<size_t>(b) * kChunk + k * 8, v[k]);
        // Only the block formats read these (RowFactors, TileSums::add).
        if constexpr (D::kBlockScaled) bd[static_cast<size_t>(b) * padded_rows + row] = D::block_d(blk);
        if constexpr (D::kBlockMin) bm[static_cast<size_t>(b) * padded_rows + row] = D::block_m(blk);
      }
    }
  }
};

// One query row's factors for DecodedRows: w[row] = weight * row scale, row_add[tile] = sum of
// weight * row min, wd[block][row] = w * block scale (one rounding, as the per-row path's scalar
// product), formed eight at a time.
template <class D>
struct RowFactors {
  ScratchFloats w, wd, row_add;

  KVGATE_AVX2_INLINE void compute(const RowFormat& f, const uint8_t* rows, const float* wq, const DecodedRows<D>& dr) {
    w.resize(dr.padded_rows);
    wd.resize(dr.block_d.size());
    row_add.resize(dr.n_tiles);
    // Raw pointers, as in DecodedRows::decode: this object is thread_local in the drivers.
    compute_into(f, rows, wq, dr.n_tiles, dr.nb, dr.padded_rows, dr.block_d.data(), w.data(), wd.data(), row_add.data());
  }

  static KVGATE_AVX2_INLINE void compute_into(const RowFormat& f, const uint8_t* rows, const float* wq, int n_tiles, int nb,
                                              size_t padded_rows, const float* block_d, float* w, float* wd,
                                              float* row_add) {
    const int n_rows = n_tiles * kTileRows;
    std::fill(w + n_rows, w + padded_rows, 0.0f);  // the last vector's rows past n_rows
    if constexpr (!D::kRowScaled && !D::kRowMin && D::kRawFactor == 1.0f) {
      // w = weight * 1 * 1, i.e. the weights themselves: a copy rather than a scalar loop over
      // the page's tokens per query row (page/axpy/q4_0/128/4: ~10 ns of ~380 per page).
      std::memcpy(w, wq, sizeof(float) * static_cast<size_t>(n_rows));
      std::fill(row_add, row_add + n_tiles, 0.0f);
    } else {
      for (int tile = 0; tile < n_tiles; ++tile) {
        float add = 0.0f;
        for (int i = 0; i < kTileRows; ++i) {
          const int row = tile * kTileRows + i;
          const uint8_t* r = rows + static_cast<size_t>(row) * f.row_bytes;
          w[row] = wq[row] * D::kRawFactor * D::row_scale(r, f.scale);
          if constexpr (D::kRowMin) add += wq[row] * D::row_min(r);
        }
        row_add[tile] = add;
      }
    }
    if constexpr (D::kBlockScaled)
      for (int b = 0; b < nb; ++b)
        for (size_t row = 0; row < padded_rows; row += 8) {
          const size_t at = static_cast<size_t>(b) * padded_rows + row;
          _mm256_storeu_ps(&wd[at], _mm256_mul_ps(_mm256_loadu_ps(&w[row]), _mm256_loadu_ps(&block_d[at])));
        }
  }
};

// The multi-row axpy's decoded tiles and one query row's factors, read by axpy_block_group. Raw
// pointers: the thread_local vectors behind them are not touched inside the tile loop, whose
// every access would otherwise go through the TLS block.
struct TileSums {
  int n_tiles, nb;
  size_t padded_rows;
  const float* decoded;  // [tile][block][row of tile][vector]
  const float* w;        // [row] weight * row scale
  const float* wd;       // [block][row] w * block scale
  const float* block_m;  // [block][row]
  const float* row_add;  // [tile] sum of weight * row min
  float* acc;            // [head_dim] this query row's accumulator

  template <class D>
  static TileSums of(const DecodedRows<D>& dr, const RowFactors<D>& rf, float* acc) {
    return {dr.n_tiles, dr.nb, dr.padded_rows, dr.decoded.data(), rf.w.data(), rf.wd.data(), dr.block_m.data(),
            rf.row_add.data(), acc};
  }
  // The weight of row i of `tile` in block b, and the sum of weight * block min over the tile's
  // rows added to row_add (q4_1's m), in the per-row path's order.
  template <class D>
  const float* weights(int tile, int b) const {
    return D::kBlockScaled ? wd + static_cast<size_t>(b) * padded_rows + static_cast<size_t>(tile) * kTileRows
                           : w + static_cast<size_t>(tile) * kTileRows;
  }
  template <class D>
  float add(int tile, int b) const {
    float a = row_add[tile];
    if constexpr (D::kBlockMin) {
      const size_t block_at = static_cast<size_t>(b) * padded_rows + static_cast<size_t>(tile) * kTileRows;
      for (int i = 0; i < kTileRows; ++i) a += w[tile * kTileRows + i] * block_m[block_at + i];
    }
    return a;
  }
};

// Blocks whose accumulators run side by side in axpy_block_group: each block's sum is one chain
// of dependent FMAs through every tile, so a format with one vector per block (u4, f16) would
// wait out the FMA latency at every step; four chains in flight hide it.
template <int L>
inline constexpr int kAxpyGroup = L / 8 >= 4 ? 1 : 4 / (L / 8);

// Blocks [b0, b0 + G) of one query row through all tiles, in a layout of L-element blocks (see
// DecodedRows::prepare). Per block the operations and their order are those of one block at a
// time, so grouping changes no bit.
template <class D, int G, int L = D::kElems>
KVGATE_AVX2_INLINE void axpy_block_group(const TileSums& t, int b0) {
  constexpr int V = L / 8;
  constexpr size_t kChunk = static_cast<size_t>(kTileRows) * V * 8;
  // Unrolled so the sums are registers (GCC keeps a runtime-indexed array in memory).
  __m256 s[G][V];
#pragma GCC unroll 16
  for (int j = 0; j < G; ++j)
#pragma GCC unroll 16
    for (int k = 0; k < V; ++k) s[j][k] = _mm256_loadu_ps(t.acc + (b0 + j) * L + 8 * k);
  for (int tile = 0; tile < t.n_tiles; ++tile) {
    const float* v = t.decoded + (static_cast<size_t>(tile) * t.nb + b0) * kChunk;
#pragma GCC unroll 16
    for (int j = 0; j < G; ++j) {
      const float* wt = t.weights<D>(tile, b0 + j);
      __m256 wv[kTileRows];
      for (int i = 0; i < kTileRows; ++i) wv[i] = _mm256_broadcast_ss(wt + i);
      const float add = t.add<D>(tile, b0 + j);
#pragma GCC unroll 16
      for (int k = 0; k < V; ++k) {
#pragma GCC unroll 16
        for (int i = 0; i < kTileRows; ++i)
          s[j][k] = _mm256_fmadd_ps(_mm256_loadu_ps(v + j * kChunk + (i * V + k) * 8), wv[i], s[j][k]);
        if constexpr (D::kBlockMin || D::kRowMin) s[j][k] = _mm256_add_ps(s[j][k], _mm256_set1_ps(add));
      }
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < G; ++j)
#pragma GCC unroll 16
    for (int k = 0; k < V; ++k) _mm256_storeu_ps(t.acc + (b0 + j) * L + 8 * k, s[j][k]);
}

// One query row's accumulator through every decoded tile, one group of blocks at a time, so
// the accumulator stays in registers across the tiles.
template <class D, int L = D::kElems>
KVGATE_AVX2_INLINE void axpy_tiles_row(const TileSums& sums) {
  int b = 0;
  for (; b + kAxpyGroup<L> <= sums.nb; b += kAxpyGroup<L>) axpy_block_group<D, kAxpyGroup<L>, L>(sums, b);
  for (; b < sums.nb; ++b) axpy_block_group<D, 1, L>(sums, b);
}

// Tokens [t, n_tokens) one query row at a time: four rows per step, then single rows.
template <class D>
KVGATE_AVX2 void axpy_rows_tail(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens,
                                int t, float* acc) {
  const int nb = f.head_dim / D::kElems;
  const size_t rb = f.row_bytes;
  for (; t + 4 <= n_tokens; t += 4) {
    const uint8_t* r[4] = {rows + static_cast<size_t>(t) * rb, rows + static_cast<size_t>(t + 1) * rb,
                           rows + static_cast<size_t>(t + 2) * rb, rows + static_cast<size_t>(t + 3) * rb};
    for (int qi = 0; qi < n_q; ++qi) {
      const float* wq = weights + static_cast<size_t>(qi) * n_tokens + t;
      float w[4], row_add = 0.0f;
      for (int i = 0; i < 4; ++i) {
        w[i] = wq[i] * D::kRawFactor * D::row_scale(r[i], f.scale);
        if constexpr (D::kRowMin) row_add += wq[i] * D::row_min(r[i]);
      }
      float* a = acc + static_cast<size_t>(qi) * f.head_dim;
      for (int b = 0; b < nb; ++b)
        axpy_block<D, 4>(r, w, row_add, D::kHeader + static_cast<size_t>(b) * D::kBytes, a + b * D::kElems);
    }
  }
  for (; t < n_tokens; ++t) {
    const uint8_t* r[1] = {rows + static_cast<size_t>(t) * rb};
    for (int qi = 0; qi < n_q; ++qi) {
      const float wt = weights[static_cast<size_t>(qi) * n_tokens + t];
      const float w[1] = {wt * D::kRawFactor * D::row_scale(r[0], f.scale)};
      const float row_add = D::kRowMin ? wt * D::row_min(r[0]) : 0.0f;
      float* a = acc + static_cast<size_t>(qi) * f.head_dim;
      for (int b = 0; b < nb; ++b)
        axpy_block<D, 1>(r, w, row_add, D::kHeader + static_cast<size_t>(b) * D::kBytes, a + b * D::kElems);
    }
  }
}

template <class D>
KVGATE_AVX2 void axpy_rows_impl(const RowFormat& f, const float* weights, int n_q, const uint8_t* rows, int n_tokens,
                                float* acc) {
  int t = 0;
  if (n_q > 1) {
    // Every whole tile of the call decoded once; then each query row's accumulator stays in
    // registers, one head_dim block at a time, across all tiles. Per element the operations and
    // their order are those of axpy_block tile after tile, so the result is unchanged.
    thread_local DecodedRows<D> dr;
    thread_local RowFactors<D> rf;
    dr.decode(f, rows, n_tokens);
    for (int qi = 0; qi < n_q; ++qi) {
      rf.compute(f, rows, weights + static_cast<size_t>(qi) * n_tokens, dr);
      axpy_tiles_row<D>(TileSums::of(dr, rf, acc + static_cast<size_t>(qi) * f.head_dim));
    }
    t = dr.n_tiles * kTileRows;
  }
  axpy_rows_tail<D>(f, weights, n_q, rows, n_tokens, t, acc);
}

template <class D>
KVGATE_AVX2 void dequantize_row_impl(const RowFormat& f, const uint8_t* row, float* y) {
  constexpr int V = D::kElems / 8;
  const int nb = f.head_dim / D::kElems;
  const __m256 scale = _mm256_set1_ps(D::row_scale(row, f.scale));
  for (int b = 0; b < nb; ++b) {
    const uint8_t* blk = row + D::kHeader + static_cast<size_t>(b) * D::kBytes;
    __m256 v[V];
    D::decode(blk, v);
    for (int k = 0; k < V; ++k) {
      if constexpr (D::kBlockScaled) v[k] = _mm256_mul_ps(v[k], _mm256_set1_ps(D::block_d(blk)));
      if constexpr (D::kBlockMin) v[k] = _mm256_add_ps(v[k], _mm256_set1_ps(D::block_m(blk)));
      if constexpr (D::kRowScaled) v[k] = _mm256_mul_ps(v[k], scale);
      if constexpr (D::kRowMin) v[k] = _mm256_add_ps(v[k], _mm256_set1_ps(D::row_min(row)));
      _mm256_storeu_ps(y + b * D::kElems + 8 * k, v[k]);
    }
  }
}

}  // namespace avx2
}  // namespace kvgate::kernels::simd
