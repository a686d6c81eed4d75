#pragma once
// The geometry of the tensor-core prefill kernel (attention_prefill.cuh), as host+device code so
// tests/kernels/prefill_tile_test.cc checks it without a GPU: which query row, token and head_dim
// element every register of every lane holds, where the f16 K and V tiles keep their elements in
// shared memory, and the shared-memory layout of a block.
//
// The kernel computes S = Q K^T and O += P V with mma.m16n8k16 (f16 inputs, f32 accumulators).
// Its operands follow the instruction's fragment layout (PTX ISA, "Matrix fragments for
// mma.m16n8k16", restated below as mma_a/b/c_*), but the kernel chooses which head_dim element and
// which token each logical k and n index stands for, so that every operand a lane reads from
// shared memory is 4 consecutive halves (one 8-byte load) and no two lanes of a load phase hit
// the same bank:
//   - S = Q K^T, k-step kk: logical k = 2t + e + 8s  <->  head_dim element 16 kk + 4t + 2s + e
//     (lane = 4g + t; s the register pair, e the half), in Q's registers and in K's.
//   - S tile (chunk c of 16 tokens, half h): column n  <->  token 16c + 4(n/2) + 2h + n%2. So a
//     lane's scores of row g are tokens 16c + 4t + 0..3 over h = 0, 1, which are exactly the P
//     registers of mma's A operand for the P V step over chunk c (registers need no shuffle).
//   - O += P V, chunk c: logical k = 2t + e + 8s  <->  token 16c + 4t + 2s + e; so V's operand
//     is 4 consecutive tokens of one head_dim element: V is kept transposed (vt[d][token]).
//   - K rows are stored permuted (key_tile_row) so that the 8 rows a K operand load touches are
//     8 consecutive rows, 16 halves of padding apart in banks.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "kernels/gpu/kv_tile.h"

namespace kvgate::kernels::gpu {

inline constexpr int kPrefillWarps = 4;
inline constexpr int kPrefillThreads = 32 * kPrefillWarps;
inline constexpr int kPrefillWarpRows = 16;                            // one mma M per warp
inline constexpr int kPrefillRows = kPrefillWarps * kPrefillWarpRows;  // query rows per block
#if defined(__HIP_PLATFORM_AMD__) || defined(KVGATE_GPU_HIP)
// HIP: 64 KiB of LDS per block and no asynchronous copy: tiles of 32 tokens decoded straight from
// global memory (no staging buffer).
inline constexpr int kPrefillTokens = 32;
inline constexpr bool kPrefillStaged = false;
#else
// CUDA: tiles of 64 tokens; the next tile's raw bytes are copied (cp.async) while this one is
// computed.
inline constexpr int kPrefillTokens = 64;
inline constexpr bool kPrefillStaged = true;
#endif
// __launch_bounds__(128, 3) for f16 keys: at most 168 registers a thread, 3 blocks per SM;
// (128, 2) for split keys (their third mma operand and second K tile): 255 registers, 2 blocks
// (the static check's bounds; attention_plan_test's occupancy).
KVGATE_HD constexpr int prefill_min_blocks(bool split_keys) { return split_keys ? 2 : 3; }
KVGATE_HD constexpr int prefill_max_registers(bool split_keys) { return split_keys ? 255 : 168; }
// Padding of the f16 tiles' rows, in halves: 8-byte operand loads of 4 rows (a half-warp) start 8
// banks apart.
inline constexpr int kPrefillPad = 16;
// Tokens a warp scores at a time (two 16-token chunks): the online softmax steps per sub-tile, so
// only its scores live in registers.
inline constexpr int kPrefillSubTokens = 32;

// ---- precision ----
// f16 keeps 11 significant bits, too few for kvgate's bound on attention (NMSE 1e-6 against
// float64: tests/gpu; prefill_tile_test models the kernel's arithmetic against it). So the query
// is split into two f16 terms, q = hi + lo (lo = the f16 rounding of q - hi: 22 bits together, or
// 2^-25 absolute where lo is an f16 subnormal),
// and so are the keys whose decoded values are not f16 values; scores are then
//   S = q_hi k_hi + q_lo k_hi + q_hi k_lo   (q_lo k_lo is below f32's rounding of S)
// with f32 accumulation: two mma per k-step (three with split keys) instead of one. P and V are
// rounded to f16 once (their errors average out over the tokens).
template <class KT>
inline constexpr bool kF16ExactKeys = false;  // a decoded key is an f16 value: k_lo would be 0
template <>
inline constexpr bool kF16ExactKeys<KvTile<Half16Rows<false>>> = true;

// ---- mma.m16n8k16 with f16 A/B and f32 C: the hardware's fragment layout (lane = 4g + t) ----
// A (16 x 16, row-major): register r (0..3), half e (0..1).
KVGATE_HD constexpr int mma_a_row(int lane, int r) { return lane / 4 + 8 * (r % 2); }
KVGATE_HD constexpr int mma_a_col(int lane, int r, int e) { return 2 * (lane % 4) + e + 8 * (r / 2); }
// B (16 x 8, "col": column n is a contiguous operand): register r (0..1), half e.
KVGATE_HD constexpr int mma_b_row(int lane, int r, int e) { return 2 * (lane % 4) + e + 8 * r; }
KVGATE_HD constexpr int mma_b_col(int lane) { return lane / 4; }
// C/D (16 x 8 floats): element i (0..3).
KVGATE_HD constexpr int mma_c_row(int lane, int i) { return lane / 4 + 8 * (i / 2); }
KVGATE_HD constexpr int mma_c_col(int lane, int i) { return 2 * (lane % 4) + i % 2; }

// ---- the kernel's choice of element and token per logical index ----
// The head_dim element of logical k in k-step kk of S = Q K^T.
KVGATE_HD constexpr int score_dim(int kk, int k) { return 16 * kk + 4 * ((k % 8) / 2) + 2 * (k / 8) + k % 2; }
// The token (inside the tile) of column n of S tile (chunk c, half h).
KVGATE_HD constexpr int score_token(int c, int h, int n) { return 16 * c + 4 * (n / 2) + 2 * h + n % 2; }
// The token of logical k in the P V step over chunk c.
KVGATE_HD constexpr int value_token(int c, int k) { return 16 * c + 4 * ((k % 8) / 2) + 2 * (k / 8) + k % 2; }
// The row of the f16 K tile that holds a token: the tokens of S tile (c, h) are rows 16c + 8h + 0..7.
KVGATE_HD constexpr int key_tile_row(int token) {
  const int u = token % 16;
  return token - u + 8 * ((u / 2) % 2) + 2 * (u / 4) + u % 2;
}

// Strides of the f16 tiles in halves: K row-major [token row][head_dim], V transposed
// [head_dim][token].
KVGATE_HD constexpr int prefill_key_stride(int head_dim) { return head_dim + kPrefillPad; }
KVGATE_HD constexpr int prefill_value_stride(int tokens) { return tokens + kPrefillPad; }

// Where the decode of a tile puts element d of token `token` (offsets in halves into the tiles).
KVGATE_HD constexpr int key_tile_offset(int head_dim, int token, int d) {
  return key_tile_row(token) * prefill_key_stride(head_dim) + d;
}
KVGATE_HD constexpr int value_tile_offset(int tokens, int token, int d) { return d * prefill_value_stride(tokens) + token; }

// Where a lane's operands lie (offsets in halves into the tiles; each the first of 4 consecutive).
// Q of k-step kk, register pair s (0: registers 0-1, 1: registers 2-3) is read from the float
// rows instead (query_frag below). K of S tile (c, h), k-step kk:
KVGATE_HD constexpr int key_operand(int head_dim, int lane, int c, int h, int kk) {
  return (16 * c + 8 * h + lane / 4) * prefill_key_stride(head_dim) + 16 * kk + 4 * (lane % 4);
}
// V of chunk c, output tile j (head_dim elements 8j..8j+7):
KVGATE_HD constexpr int value_operand(int tokens, int lane, int c, int j) {
  return (8 * j + lane / 4) * prefill_value_stride(tokens) + 16 * c + 4 * (lane % 4);
}

// Two floats as an f16x2 register (lo in the low half), each rounded to nearest even.
KVGATE_HD uint32_t pack_half2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<uint32_t>(f32_to_f16(lo)) | (static_cast<uint32_t>(f32_to_f16(hi)) << 16);
#endif
}

// An f16x2 register's halves, widened exactly.
KVGATE_HD float half_lo(uint32_t v) { return widen_half(static_cast<uint16_t>(v & 0xffffu)); }
KVGATE_HD float half_hi(uint32_t v) { return widen_half(static_cast<uint16_t>(v >> 16)); }

// Two floats as hi + lo f16x2 registers (lo: the f16 rounding of each float minus its hi; the
// difference is exact in f32).
KVGATE_HD void split_half2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = pack_half2(x0, x1);
  lo = pack_half2(rn_sub(x0, half_lo(hi)), rn_sub(x1, half_hi(hi)));
}

// Q's A operands (hi and lo) of k-step kk for the warp whose first row is `row`: q rows of
// `width` floats.
KVGATE_HD void query_frags(const float* q, int width, int row, int lane, int kk, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
  KVGATE_UNROLL
  for (int r = 0; r < 4; ++r) {
    const float* q_row = q + static_cast<long>(row + mma_a_row(lane, r)) * width;
    split_half2(q_row[score_dim(kk, mma_a_col(lane, r, 0))], q_row[score_dim(kk, mma_a_col(lane, r, 1))], hi[r], lo[r]);
  }
}

// P's A operand of chunk c from the lane's scores of its S tiles (c, 0) and (c, 1).
KVGATE_HD void score_frag(const float (&s0)[4], const float (&s1)[4], uint32_t (&a)[4]) {
  a[0] = pack_half2(s0[0], s0[1]);  // row g, tokens 4t, 4t+1
  a[1] = pack_half2(s0[2], s0[3]);  // row g + 8
  a[2] = pack_half2(s1[0], s1[1]);  // row g, tokens 4t+2, 4t+3
  a[3] = pack_half2(s1[2], s1[3]);
}

// ---- one warp's online softmax over a sub-tile of kPrefillSubTokens tokens, lane by lane ----
// A lane holds, of S tile (chunk c, half h), element i: row g (i < 2) or g + 8 (lane = 4g + t), token
// u0 + score_token(c, h, mma_c_col(lane, i)) for the sub-tile starting at token u0. Scores are in
// log2 units. The kernel (attention_prefill.cuh) and prefill_tile_test run these same functions;
// only the exchange between a row's 4 lanes (two shuffles on the device) is each one's own.

// Scores a row may not see become -inf, whatever their bytes decoded to: tokens at or past
// split_end, or after the row's position (pos[ri]; -1 for rows past the block's).
template <int SC>
KVGATE_HD void mask_sub_tile(float (&s)[SC][2][4], int lane, int u0, const int (&pos)[2], int split_end) {
  KVGATE_UNROLL
  for (int c = 0; c < SC; ++c)
    KVGATE_UNROLL
    for (int h = 0; h < 2; ++h)
      KVGATE_UNROLL
      for (int i = 0; i < 4; ++i) {
        const int t = u0 + score_token(c, h, mma_c_col(lane, i));
        if (t >= split_end || t > pos[i / 2]) s[c][h][i] = -INFINITY;
      }
}

// This lane's largest score of row ri (0: row g, 1: row g + 8) in the sub-tile.
template <int SC>
KVGATE_HD float lane_row_max(const float (&s)[SC][2][4], int ri) {
  float mx = -INFINITY;
  KVGATE_UNROLL
  for (int c = 0; c < SC; ++c)
    KVGATE_UNROLL
    for (int h = 0; h < 2; ++h) mx = fmaxf(mx, fmaxf(s[c][h][2 * ri], s[c][h][2 * ri + 1]));
  return mx;
}

// With mx the row's largest score in the sub-tile (over its 4 lanes): raises the running max m,
// rescales this lane's part of the row sum l and of the output o, turns the row's scores into
// weights exp2(s - m) (0 while the row has seen nothing: no exp2(-inf - -inf)) and adds them to l.
template <int SC, int NJ, class Exp2>
KVGATE_HD void softmax_sub_tile(float (&s)[SC][2][4], float (&o)[NJ][4], float& m, float& l, int ri, float mx,
                                Exp2 exp2) {
  const float m_new = fmaxf(m, mx);
  const float correction = m_new == -INFINITY ? 1.0f : exp2(m - m_new);
  m = m_new;
  l *= correction;
  KVGATE_UNROLL
  for (int j = 0; j < NJ; ++j) {
    o[j][2 * ri] *= correction;
    o[j][2 * ri + 1] *= correction;
  }
  float sum = 0.0f;
  KVGATE_UNROLL
  for (int c = 0; c < SC; ++c)
    KVGATE_UNROLL
    for (int h = 0; h < 2; ++h)
      KVGATE_UNROLL
      for (int e = 0; e < 2; ++e) {
        float& v = s[c][h][2 * ri + e];
        v = m_new == -INFINITY ? 0.0f : exp2(v - m_new);
        sum += v;
      }
  l += sum;
}

// An 8-byte operand (two f16x2 registers) at `halves` (8-byte aligned) of a tile.
KVGATE_HD void load_operand(const uint16_t* tile, int halves, uint32_t (&b)[2]) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  const uint2 v = *reinterpret_cast<const uint2*>(tile + halves);
  b[0] = v.x;
  b[1] = v.y;
#else
  const uint16_t* h = tile + halves;
  b[0] = h[0] | (static_cast<uint32_t>(h[1]) << 16);
  b[1] = h[2] | (static_cast<uint32_t>(h[3]) << 16);
#endif
}

// 16 bytes (8 halves) at `halves` (16-byte aligned) of a tile: one store.
KVGATE_HD void store_halves8(uint16_t* tile, int halves, const uint32_t (&w)[4]) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  *reinterpret_cast<uint4*>(tile + halves) = make_uint4(w[0], w[1], w[2], w[3]);
#else
  for (int i = 0; i < 4; ++i) {
    tile[halves + 2 * i] = static_cast<uint16_t>(w[i] & 0xffffu);
    tile[halves + 2 * i + 1] = static_cast<uint16_t>(w[i] >> 16);
  }
#endif
}

// Decodes tokens [0, n_tok) of a tile (raw rows at key_row(tok), value_row(tok)) through the
// formats' loaders into the f16 tiles, once per block: keys row-major at key_tile_offset (as hi
// and lo terms when kSplit), values transposed at value_tile_offset; tokens past n_tok become
// zeros (their P is 0, and 0 x a stale NaN would not be). Thread `thread` of `threads` takes every
// threads-th 8-element run (the device: the block's threads; prefill_tile_test: one loop).
template <class KT, class VT, int D, bool kSplit, class KeyRow, class ValueRow>
KVGATE_HD void decode_prefill_tile(const RowArgs& ka, const RowArgs& va, KeyRow key_row, ValueRow value_row, int n_tok,
                                   uint16_t* ks, uint16_t* ks_lo, uint16_t* vt, int thread, int threads) {
  constexpr int BC = kPrefillTokens, kRuns = D / 8;
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#pragma unroll 1
#endif
  for (int idx = thread; idx < BC * kRuns; idx += threads) {
    const int run = idx % kRuns, tok = idx / kRuns;
    float y[8];
    if (tok < n_tok) {
      KT::template decode<8>(ka, key_row(tok), 8 * run, y);
    } else {
      KVGATE_UNROLL
      for (int k = 0; k < 8; ++k) y[k] = 0.0f;
    }
    uint32_t h[4], lo[4];
    KVGATE_UNROLL
    for (int w = 0; w < 4; ++w) split_half2(y[2 * w], y[2 * w + 1], h[w], lo[w]);
    store_halves8(ks, key_tile_offset(D, tok, 8 * run), h);
    if constexpr (kSplit) store_halves8(ks_lo, key_tile_offset(D, tok, 8 * run), lo);
  }
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#pragma unroll 1
#endif
  for (int idx = thread; idx < (BC / 2) * kRuns; idx += threads) {
    const int pair = idx % (BC / 2), run = idx / (BC / 2);
    float a[8], b[8];
    KVGATE_UNROLL
    for (int k = 0; k < 8; ++k) a[k] = b[k] = 0.0f;
    if (2 * pair < n_tok) VT::template decode<8>(va, value_row(2 * pair), 8 * run, a);
    if (2 * pair + 1 < n_tok) VT::template decode<8>(va, value_row(2 * pair + 1), 8 * run, b);
    KVGATE_UNROLL
    for (int k = 0; k < 8; ++k) {
      const uint32_t w = pack_half2(a[k], b[k]);
      const int at = value_tile_offset(BC, 2 * pair, 8 * run + k);
#if defined(__CUDACC__) || defined(__HIPCC__)
      *reinterpret_cast<uint32_t*>(vt + at) = w;
#else
      vt[at] = static_cast<uint16_t>(w & 0xffffu);
      vt[at + 1] = static_cast<uint16_t>(w >> 16);
#endif
    }
  }
}

// The dynamic shared memory of one prefill block, in bytes from its start (offsets multiples of 16):
//   rows   [kPrefillRows][head_dim] floats: the scaled, rotated query rows until the block has
//          built its operands, the output rows at the end; on CUDA the same bytes stage a tile's
//          raw K and V bytes in between (stage, stage + stage_value);
//   tiles  the f16 K tile (key_hi), with split keys the tile of their lo terms (key_lo), then the
//          transposed f16 V tile (value_tile); before the first tile they are the query rotation's
//          scratch (as many bytes as rows), after the last the rows' softmax states
//          ([2][kPrefillRows] floats).
struct PrefillSmem {
  int rows, stage, stage_value, key_hi, key_lo, value_tile, total;
};
KVGATE_HD constexpr int round16(int bytes) { return (bytes + 15) / 16 * 16; }
KVGATE_HD PrefillSmem prefill_smem(int head_dim, int key_row_bytes, int value_row_bytes, bool split_keys,
                                   int tokens = kPrefillTokens, bool staged = kPrefillStaged) {
  PrefillSmem s{};
  const int rows_bytes = kPrefillRows * head_dim * 4;
  const int stage_bytes = staged ? tile_bytes(key_row_bytes, tokens) + tile_bytes(value_row_bytes, tokens) : 0;
  s.rows = 0;
  s.stage = 0;
  s.stage_value = staged ? tile_bytes(key_row_bytes, tokens) : 0;
  s.key_hi = round16(rows_bytes > stage_bytes ? rows_bytes : stage_bytes);
  const int key_tile = round16(tokens * prefill_key_stride(head_dim) * 2);
  s.key_lo = s.key_hi + key_tile;
  s.value_tile = s.key_lo + (split_keys ? key_tile : 0);
  const int tiles_end = s.value_tile + round16(head_dim * prefill_value_stride(tokens) * 2);
  int end = tiles_end > s.key_hi + rows_bytes ? tiles_end : s.key_hi + rows_bytes;
  end = end > s.key_hi + 2 * kPrefillRows * 4 ? end : s.key_hi + 2 * kPrefillRows * 4;
  s.total = end;
  return s;
}

}  // namespace kvgate::kernels::gpu
