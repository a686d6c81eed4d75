// The tensor-core prefill kernel's geometry (kernels/gpu/prefill_tile.h) without a GPU:
//   - a host model of one warp's mma.m16n8k16 (the PTX fragment layout) fed with the operands the
//     kernel's own functions build (query_frag, load_operand at key_operand/value_operand of tiles
//     laid out by key_tile_offset/value_tile_offset, score_frag) computes exactly Q K^T and P V of
//     the f16-rounded inputs, every (row, token) and (row, element) once;
//   - no two lanes of a load phase read the same shared-memory bank;
//   - the block's shared memory fits the device (and HIP's 64 KiB) for every kernel pair;
//   - the kernel's block, run on the host (4 warps x 32 lanes in lockstep, the mma a model of the
//     instruction, everything else the kernel's own functions: the tile decode into f16 shared
//     memory, the operands, the causal and split masks, the online softmax, the skipping of
//     sub-tiles no row of a warp sees), over every row block, KV head and split of a launch
//     plan, its splits merged as gpu_attention.cu merges them, equals the CPU attention
//     (paged_attention over the same cache's page bytes) within the device tests' bound;
//   - the kernel's arithmetic (Q and non-f16 keys as f16 hi + lo terms, V and P in f16, f32
//     accumulation, log2-unit online softmax over 32-token sub-tiles), run on the host over every
//     prefill pair's CPU-codec values, stays a tenth below the device tests' bound (NMSE 1e-6
//     against float64); plain f16 scores would not (up to 8.4e-7 here).
// tests/gpu runs the kernel itself against the same bound when a device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/gpu/attention_plan.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/prefill_tile.h"
#include "kernels/gpu/tile_block.h"
#include "kernels/attention.h"
#include "kernels/gpu/tq_params.h"
#include "kernels/kv_config.h"
#include "kernels/kv_format.h"
#include "kernels/paged_kv_cache.h"
#include "kernels/softmax_state.h"
#include "tests/kernels/gaussian.h"
#include "tests/kernels/gpu_row_cases.h"

namespace kvgate::kernels::gpu {
namespace {

float half_of(uint32_t v, int e) { return e ? half_hi(v) : half_lo(v); }
float f16_round(float x) { return f16_to_f32(f32_to_f16(x)); }

// One warp's D = A B + C, from every lane's registers, as the PTX ISA lays the fragments out.
void mma_model(const uint32_t (&a)[32][4], const uint32_t (&b)[32][2], float (&c)[32][4]) {
  double A[16][16], B[16][8];
  int seen_a[16][16] = {}, seen_b[16][8] = {};
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r)
      for (int e = 0; e < 2; ++e) {
        A[mma_a_row(lane, r)][mma_a_col(lane, r, e)] = half_of(a[lane][r], e);
        ++seen_a[mma_a_row(lane, r)][mma_a_col(lane, r, e)];
      }
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 2; ++r)
      for (int e = 0; e < 2; ++e) {
        B[mma_b_row(lane, r, e)][mma_b_col(lane)] = half_of(b[lane][r], e);
        ++seen_b[mma_b_row(lane, r, e)][mma_b_col(lane)];
      }
  for (auto& row : seen_a)
    for (int n : row) ASSERT_EQ(n, 1) << "A fragment layout is not a bijection";
  for (auto& row : seen_b)
    for (int n : row) ASSERT_EQ(n, 1) << "B fragment layout is not a bijection";
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      double sum = c[lane][i];
      for (int k = 0; k < 16; ++k) sum += A[mma_c_row(lane, i)][k] * B[k][mma_c_col(lane, i)];
      c[lane][i] = static_cast<float>(sum);
    }
}

// Distinct 4-byte words per bank in one phase of a warp's shared-memory access: lanes [first,
// first + n) each reading `words` consecutive words from word offset at(lane). 1 = conflict-free.
template <class At>
int bank_ways(int first, int n, int words, At at) {
  std::map<int, std::vector<int>> banks;
  for (int lane = first; lane < first + n; ++lane)
    for (int w = 0; w < words; ++w) {
      const int word = at(lane) + w;
      auto& v = banks[word % 32];
      if (std::find(v.begin(), v.end(), word) == v.end()) v.push_back(word);
    }
  size_t most = 0;
  for (auto& [bank, v] : banks) most = std::max(most, v.size());
  return static_cast<int>(most);
}

struct WarpCase {
  int head_dim, tokens;
};

// One warp's S = Q K^T and O = P V over one tile, from the kernel's operand functions.
TEST(PrefillTile, WarpOperandsComputeQKAndPVOfTheF16Inputs) {
  for (const WarpCase wc : {WarpCase{64, 64}, WarpCase{128, 64}, WarpCase{128, 32}, WarpCase{256, 64}}) {
    const int D = wc.head_dim, BC = wc.tokens;
    SCOPED_TRACE("head_dim " + std::to_string(D) + " tokens " + std::to_string(BC));
    Rng rng(11 + D + BC);
    std::vector<float> q(16 * D), k(static_cast<size_t>(BC) * D), v(static_cast<size_t>(BC) * D), p(16 * BC);
    for (float& x : q) x = static_cast<float>(rng.normal());
    for (float& x : k) x = f16_round(static_cast<float>(rng.normal()));
    for (float& x : v) x = f16_round(static_cast<float>(rng.normal()));
    for (float& x : p) x = static_cast<float>(rng.uniform());
    // The tiles as the kernel's decode lays them out; poisoned (f16 NaN) elsewhere.
    std::vector<uint16_t> ks(static_cast<size_t>(BC) * prefill_key_stride(D), 0x7e00);
    std::vector<uint16_t> vt(static_cast<size_t>(D) * prefill_value_stride(BC), 0x7e00);
    for (int t = 0; t < BC; ++t)
      for (int d = 0; d < D; ++d) {
        ks[key_tile_offset(D, t, d)] = f32_to_f16(k[static_cast<size_t>(t) * D + d]);
        vt[value_tile_offset(BC, t, d)] = f32_to_f16(v[static_cast<size_t>(t) * D + d]);
      }
    // S, tile by tile: every (row, token) once, equal to the float64 product of the f16 inputs up
    // to the f32 rounding of the result.
    std::vector<int> seen(16 * BC, 0);
    for (int c = 0; c < BC / 16; ++c)
      for (int h = 0; h < 2; ++h) {
        float s[32][4] = {};
        for (int kk = 0; kk < D / 16; ++kk) {
          uint32_t hi[32][4], lo[32][4], b[32][2];
          for (int lane = 0; lane < 32; ++lane) {
            query_frags(q.data(), D, 0, lane, kk, hi[lane], lo[lane]);
            load_operand(ks.data(), key_operand(D, lane, c, h, kk), b[lane]);
          }
          mma_model(lo, b, s);
          mma_model(hi, b, s);
          // 8-byte loads: two half-warp phases, each conflict-free.
          for (int half = 0; half < 2; ++half)
            EXPECT_EQ(1, bank_ways(16 * half, 16, 2, [&](int lane) { return key_operand(D, lane, c, h, kk) / 2; }))
                << "K operand c " << c << " h " << h << " kk " << kk;
        }
        for (int lane = 0; lane < 32; ++lane)
          for (int i = 0; i < 4; ++i) {
            const int row = mma_c_row(lane, i), tok = score_token(c, h, mma_c_col(lane, i));
            double want = 0.0, scale = 0.0;
            for (int d = 0; d < D; ++d) {  // q = hi + lo holds 22 bits: the product of q itself
              want += static_cast<double>(q[row * D + d]) * k[static_cast<size_t>(tok) * D + d];
              scale += std::fabs(static_cast<double>(q[row * D + d]) * k[static_cast<size_t>(tok) * D + d]);
            }
            ASSERT_NEAR(s[lane][i], want, 1e-6 * scale) << "row " << row << " token " << tok;
            ++seen[row * BC + tok];
          }
      }
    for (int n : seen) ASSERT_EQ(n, 1) << "a score computed twice or never";
    // O = P V over the tile: P from the score registers (the layout above), V from its tile.
    std::vector<int> seen_o(16 * D, 0);
    for (int j = 0; j < D / 8; ++j) {
      float o[32][4] = {};
      for (int c = 0; c < BC / 16; ++c) {
        uint32_t a[32][4], b[32][2];
        for (int lane = 0; lane < 32; ++lane) {
          float s0[4], s1[4];
          for (int i = 0; i < 4; ++i) {
            const int row = mma_c_row(lane, i);
            s0[i] = p[row * BC + score_token(c, 0, mma_c_col(lane, i))];
            s1[i] = p[row * BC + score_token(c, 1, mma_c_col(lane, i))];
          }
          score_frag(s0, s1, a[lane]);
          load_operand(vt.data(), value_operand(BC, lane, c, j), b[lane]);
        }
        mma_model(a, b, o);
        for (int half = 0; half < 2; ++half)
          EXPECT_EQ(1, bank_ways(16 * half, 16, 2, [&](int lane) { return value_operand(BC, lane, c, j) / 2; }))
              << "V operand c " << c << " j " << j;
      }
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
          const int row = mma_c_row(lane, i), d = 8 * j + mma_c_col(lane, i);
          double want = 0.0, scale = 0.0;
          for (int t = 0; t < BC; ++t) {
            want += static_cast<double>(f16_round(p[row * BC + t])) * v[static_cast<size_t>(t) * D + d];
            scale += std::fabs(static_cast<double>(p[row * BC + t]) * v[static_cast<size_t>(t) * D + d]);
          }
          ASSERT_NEAR(o[lane][i], want, 1e-6 * scale) << "row " << row << " element " << d;
          ++seen_o[row * D + d];
        }
    }
    for (int n : seen_o) ASSERT_EQ(n, 1) << "an output element computed twice or never";
  }
}

// hi + lo carries a float to 22 significant bits, |x - hi - lo| <= 2^-22 |x|, or to 2^-25 absolute
// where lo falls below f16's normal range (a score's error from it stays below f32's rounding).
TEST(PrefillTile, SplitHalvesCarryTwentyTwoBits) {
  Rng rng(5);
  for (int n = 0; n < 100000; ++n) {
    const float x0 = static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.below(20)) - 10));
    const float x1 = -x0 * 0.37f;
    uint32_t hi, lo;
    split_half2(x0, x1, hi, lo);
    auto bound = [](float x) { return std::max(std::ldexp(static_cast<double>(std::fabs(x)), -22), std::ldexp(1.0, -25)); };
    EXPECT_LE(std::fabs(static_cast<double>(x0) - half_lo(hi) - half_lo(lo)), bound(x0));
    EXPECT_LE(std::fabs(static_cast<double>(x1) - half_hi(hi) - half_hi(lo)), bound(x1));
    ASSERT_EQ(half_lo(hi), f16_round(x0));
  }
}

TEST(PrefillTile, TokenAndElementMapsArePermutations) {
  for (int c = 0; c < 4; ++c) {
    std::vector<int> score(16, 0), value(16, 0), rows(16, 0), dims(16, 0);
    for (int h = 0; h < 2; ++h)
      for (int n = 0; n < 8; ++n) ++score[score_token(c, h, n) - 16 * c];
    for (int k = 0; k < 16; ++k) {
      ++value[value_token(c, k) - 16 * c];
      ++rows[key_tile_row(16 * c + k) - 16 * c];
      ++dims[score_dim(c, k) - 16 * c];
    }
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(score[i], 1);
      EXPECT_EQ(value[i], 1);
      EXPECT_EQ(rows[i], 1);
      EXPECT_EQ(dims[i], 1);
    }
  }
  // The P registers a lane holds are the tokens the P V step's logical k names for it.
  for (int lane = 0; lane < 32; ++lane)
    for (int c = 0; c < 4; ++c)
      for (int r = 0; r < 4; ++r)
        for (int e = 0; e < 2; ++e) {
          const int h = r / 2, i = 2 * (r % 2) + e;  // score_frag: register r holds S tile (c, r / 2), elements
          EXPECT_EQ(score_token(c, h, mma_c_col(lane, i)), value_token(c, mma_a_col(lane, r, e)));
          EXPECT_EQ(mma_c_row(lane, i), mma_a_row(lane, r));
        }
}

// The decode's stores (16 bytes of a K row per lane, 4 bytes of V per lane) are conflict-free
// with the kernel's thread mapping.
TEST(PrefillTile, TileStoresAreConflictFree) {
  for (int D : {64, 128, 256}) {
    const int BC = kPrefillTokens, runs = D / 8;
    for (int base = 0; base < BC * runs; base += 32)
      for (int quarter = 0; quarter < 4; ++quarter)  // 16-byte stores: quarter-warp phases
        EXPECT_EQ(1, bank_ways(8 * quarter, 8, 4, [&](int lane) {
                    const int idx = base + lane, run = idx % runs, tok = idx / runs;
                    return key_tile_offset(D, tok, 8 * run) / 2;
                  })) << "head_dim " << D;
    for (int base = 0; base < (BC / 2) * runs; base += 32)
      for (int k = 0; k < 8; ++k)
        EXPECT_EQ(1, bank_ways(0, 32, 1, [&](int lane) {
                    const int idx = base + lane, pair = idx % (BC / 2), run = idx / (BC / 2);
                    return value_tile_offset(BC, 2 * pair, 8 * run + k) / 2;
                  })) << "head_dim " << D;
  }
}

// Every prefill pair's block fits: CUDA (64-token tiles, staged) in an SM's 227 KiB with at least
// 2 blocks per SM by shared memory at head_dim 64 and 128, HIP (32-token tiles, unstaged) in
// 64 KiB; offsets 16-byte aligned; the query rotation's scratch and the row states fit the tiles.
TEST(PrefillTile, SharedMemoryFitsEveryPair) {
  const SmLimits hopper;
  for (const KvPair& pair : kKernelPairs)
    for (const KernelHeadDim& hd : kKernelHeadDims) {
      if (!has_kernel(kPrefillKernel, pair.key, pair.value, hd.head_dim)) continue;
      const int D = hd.head_dim;
      const std::optional<TqConstants> tq =
          is_tq(pair.key) ? make_tq_params(pair.key, D, FormatOptions{}) : std::nullopt;
      const int kb = static_cast<int>(row_bytes(pair.key, D, tq ? &tq->params : nullptr));
      const int vb = static_cast<int>(row_bytes(pair.value, D));
      SCOPED_TRACE(std::string(kv_format_name(pair.key)) + "/" + kv_format_name(pair.value) + " d" + std::to_string(D));
      const bool split = pair.key != FormatId::f16;  // kF16ExactKeys: f16 keys only
      const PrefillSmem cuda = prefill_smem(D, kb, vb, split, 64, true);
      for (int offset : {cuda.key_hi, cuda.key_lo, cuda.value_tile, cuda.stage_value}) EXPECT_EQ(offset % 16, 0);
      EXPECT_GE(cuda.key_hi, kPrefillRows * D * 4);                          // the query rows
      EXPECT_GE(cuda.key_hi, cuda.stage_value + tile_bytes(vb, 64));          // the staged bytes
      EXPECT_GE(cuda.key_lo - cuda.key_hi, 64 * prefill_key_stride(D) * 2);    // the K tile
      EXPECT_GE(cuda.value_tile - cuda.key_lo, split ? 64 * prefill_key_stride(D) * 2 : 0);
      EXPECT_GE(cuda.total - cuda.key_hi, kPrefillRows * D * 4);             // the rotation's scratch
      EXPECT_GE(cuda.total - cuda.value_tile, D * prefill_value_stride(64) * 2);  // the V tile
      // The blocks per SM its launch bounds promise fit the shared memory.
      EXPECT_GE(occupancy_blocks_per_sm(hopper, kPrefillThreads, prefill_max_registers(split), cuda.total),
                prefill_min_blocks(split));
      const PrefillSmem hip = prefill_smem(D, kb, vb, split, 32, false);
      EXPECT_LE(hip.total, 64 * 1024);
    }
}

// ---- the kernel's arithmetic on the host ----

// Float64 causal attention of rows (position first_pos + r / group) over K, V.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                              int rows, int group, int tokens, int D, double scale) {
  std::vector<double> out(static_cast<size_t>(rows) * D, 0.0);
  const int n_queries = rows / group, first_pos = tokens - n_queries;
  for (int r = 0; r < rows; ++r) {
    const int visible = first_pos + r / group + 1;
    std::vector<double> s(visible);
    double mx = -INFINITY;
    for (int t = 0; t < visible; ++t) {
      double dot = 0.0;
      for (int d = 0; d < D; ++d) dot += static_cast<double>(q[r * D + d]) * k[static_cast<size_t>(t) * D + d];
      s[t] = dot * scale;
      mx = std::max(mx, s[t]);
    }
    double sum = 0.0;
    for (double& x : s) sum += x = std::exp(x - mx);
    for (int t = 0; t < visible; ++t)
      for (int d = 0; d < D; ++d) out[r * D + d] += s[t] / sum * v[static_cast<size_t>(t) * D + d];
  }
  return out;
}

// The prefill kernel's arithmetic for the same rows: the query scaled by scale x log2 e and split
// into f16 hi + lo terms, keys too (split_keys) or rounded to f16, S = q_hi k_hi + q_lo k_hi +
// q_hi k_lo, V and P rounded to f16, scores and outputs accumulated in f32, the online softmax in
// log2 units over 32-token sub-tiles with exp2, the output divided by the f32 row sum at the end.
std::vector<double> kernel_model(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                                 int rows, int group, int tokens, int D, float scale, bool split_keys) {
  std::vector<double> out(static_cast<size_t>(rows) * D);
  const int n_queries = rows / group, first_pos = tokens - n_queries;
  const float q_scale = scale * 1.4426950408889634f;
  std::vector<float> k_hi(k.size()), k_lo(k.size(), 0.0f);
  for (size_t i = 0; i < k.size(); ++i) {
    k_hi[i] = f16_round(k[i]);
    if (split_keys) k_lo[i] = f16_round(k[i] - k_hi[i]);
  }
  for (int r = 0; r < rows; ++r) {
    const int pos = first_pos + r / group;
    std::vector<float> q_hi(D), q_lo(D), o(D, 0.0f);
    for (int d = 0; d < D; ++d) {
      const float x = q[r * D + d] * q_scale;
      q_hi[d] = f16_round(x);
      q_lo[d] = f16_round(x - q_hi[d]);
    }
    float m = -INFINITY, l = 0.0f;
    for (int t0 = 0; t0 <= pos; t0 += kPrefillSubTokens) {
      const int t_end = std::min(pos + 1, t0 + kPrefillSubTokens);
      std::vector<float> s(t_end - t0);
      float mx = -INFINITY;
      for (int t = t0; t < t_end; ++t) {
        float dot = 0.0f;
        for (int d = 0; d < D; ++d) {
          const size_t e = static_cast<size_t>(t) * D + d;
          dot += q_lo[d] * k_hi[e] + q_hi[d] * k_lo[e] + q_hi[d] * k_hi[e];
        }
        s[t - t0] = dot;
        mx = std::max(mx, dot);
      }
      const float m_new = std::max(m, mx);
      const float correction = std::exp2(m - m_new);
      m = m_new;
      l *= correction;
      for (float& x : o) x *= correction;
      for (int t = t0; t < t_end; ++t) {
        const float w = std::exp2(s[t - t0] - m_new);
        l += w;
        const float wh = f16_round(w);
        for (int d = 0; d < D; ++d) o[d] += wh * f16_round(v[static_cast<size_t>(t) * D + d]);
      }
    }
    for (int d = 0; d < D; ++d) out[r * D + d] = o[d] / l;
  }
  return out;
}

// Rows of format F as the kernel's loader decodes them from the CPU codec's bytes (which
// kv_tile_test proves equal to the codec's values).
template <FormatId F>
std::vector<float> codec_values(int D, int tokens, uint64_t seed) {
  FormatOptions options;
  options.scale = testing::tensor_scale_for(F);
  const auto codec = make_codec(kv_format_name(F), D, options);
  const std::optional<TqConstants> tq = is_tq(F) ? make_tq_params(F, D, options) : std::nullopt;
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(tokens) * D), out(x.size());
  for (float& e : x) e = static_cast<float>(rng.normal());
  std::vector<uint8_t> bytes(codec->group_bytes() + 16);
  const RowArgs args{D, options.scale, tq ? &tq->params : nullptr, nullptr, 0};
  for (int t = 0; t < tokens; ++t) {
    codec->quantize_ref(x.data() + static_cast<size_t>(t) * D, bytes.data());
    for (int i0 = 0; i0 < D; i0 += 8) KvTile<typename RowsFor<F>::type>::template decode<8>(args, bytes.data(), i0,
                                                                                            out.data() + static_cast<size_t>(t) * D + i0);
  }
  return out;
}

template <size_t I>
void expect_pair_within_bound(int D, double& worst) {
  constexpr KvPair pair = kKernelPairs[I];
  if (!has_kernel(kPrefillKernel, pair.key, pair.value, D)) return;
  const int tokens = 301;
  const std::vector<float> k = codec_values<pair.key>(D, tokens, 3 + I);
  const std::vector<float> v = codec_values<pair.value>(D, tokens, 5 + I);
  for (const auto& [n_queries, group] : {std::pair{37, 3}}) {  // tests/gpu's shape (its 100 x 4: the same terms)
    const int rows = n_queries * group;
    Rng rng(41);
    std::vector<float> q(static_cast<size_t>(rows) * D);
    for (float& e : q) e = static_cast<float>(2.0 * rng.normal());  // as tests/gpu: peaked softmax
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    const std::vector<double> want = reference(q, k, v, rows, group, tokens, D, scale);
    const std::vector<double> got =
        kernel_model(q, k, v, rows, group, tokens, D, static_cast<float>(scale), pair.key != FormatId::f16);
    double err = 0.0, energy = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      err += (got[i] - want[i]) * (got[i] - want[i]);
      energy += want[i] * want[i];
    }
    const double nmse = err / energy;
    worst = std::max(worst, nmse);
    // A tenth of the device tests' bound: the kernel's own summation order differs from this
    // model's by f32 roundings, far below the f16 terms.
    EXPECT_LT(nmse, 1e-7) << kv_format_name(pair.key) << "/" << kv_format_name(pair.value) << " d" << D
                              << " rows " << rows;
  }
}

template <size_t... I>
void expect_every_prefill_pair(int D, double& worst, std::index_sequence<I...>) {
  (expect_pair_within_bound<I>(D, worst), ...);
}

TEST(PrefillTile, KernelArithmeticMeetsTheDeviceTestsBoundForEveryPair) {
  for (const KernelHeadDim& hd : kKernelHeadDims) {
    if (!(hd.kinds & kPrefillKernel)) continue;
    double worst = 0.0;
    expect_every_prefill_pair(hd.head_dim, worst, std::make_index_sequence<std::size(kKernelPairs)>{});
    std::printf("head_dim %d: worst NMSE of the f16 tensor-core arithmetic %.3g (bound 1e-6)\n", hd.head_dim, worst);
  }
}

// ---- the kernel's block on the host ----

// One block's rows as write_block_rows receives them: unnormalized outputs [kPrefillRows][D] and
// the rows' softmax states in natural-log units.
struct BlockRows {
  std::vector<float> acc, max, denom;
};

// The block (split, kv_head, row_block) of tile_prefill_kernel<KT, VT, D>, its 4 warps'
// 32 lanes run in lockstep: what one lane does is the kernel's code (prefill_tile.h) on that lane's
// registers; the mma is mma_model, the row max's two shuffles a max over the row's 4 lanes.
// `log2_scale` is the launcher's softmax scale x log2 e.
template <class KT, class VT, int D, bool kSplit>
BlockRows host_prefill_block(const KvLayerView& view, const RowArgs& ka, const RowArgs& va, const float* q, int n_heads,
                             int n_queries, int kv_head, int row_block, int split, int split_tokens, float log2_scale) {
  constexpr int BC = kPrefillTokens, R = kPrefillRows, KK = D / 16, NC = BC / 16, SC = kPrefillSubTokens / 16;
  constexpr int NJ = D / 8;
  const int group = n_heads / view.n_kv_heads;
  const BlockSpan span = block_span(n_queries, group, static_cast<int>(view.length), split_tokens, R, split, row_block);
  const int row0 = span.row0, n_rows = span.n_rows, first_pos = span.first_pos;
  const int split_begin = span.split_begin, split_end = span.split_end;

  std::vector<float> rows(static_cast<size_t>(R) * D, 0.0f);
  for (int r = 0; r < n_rows; ++r) {
    const int g = row0 + r, head = kv_head * group + g % group;
    for (int i = 0; i < D; ++i) rows[r * D + i] = q[(static_cast<size_t>(g / group) * n_heads + head) * D + i] * log2_scale;
  }
  struct Lane {
    float o[NJ][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    int pos[2] = {-1, -1};
    float s[SC][2][4];
  };
  struct Warp {
    uint32_t q_hi[KK][32][4], q_lo[KK][32][4];
    Lane lane[32];
    int max_pos = -1, min_pos = -1;
    bool full = false;
  };
  std::vector<Warp> warps(kPrefillWarps);
  for (int w = 0; w < kPrefillWarps; ++w) {
    Warp& W = warps[w];
    const int warp_row = kPrefillWarpRows * w;
    for (int lane = 0; lane < 32; ++lane) {
      for (int kk = 0; kk < KK; ++kk) query_frags(rows.data(), D, warp_row, lane, kk, W.q_hi[kk][lane], W.q_lo[kk][lane]);
      for (int i = 0; i < 2; ++i) {
        const int r = warp_row + mma_c_row(lane, 2 * i);
        W.lane[lane].pos[i] = r < n_rows ? first_pos + (row0 + r) / group : -1;
      }
    }
    const int last = std::min(warp_row + kPrefillWarpRows, n_rows) - 1;
    W.max_pos = last >= warp_row ? first_pos + (row0 + last) / group : -1;
    W.min_pos = last >= warp_row ? first_pos + (row0 + warp_row) / group : -1;
    W.full = warp_row + kPrefillWarpRows <= n_rows;
  }

  // The f16 tiles, poisoned (f16 NaN) so that a read of anything the decode did not write shows.
  std::vector<uint16_t> ks(static_cast<size_t>(BC) * prefill_key_stride(D)), ks_lo(ks.size()),
      vt(static_cast<size_t>(D) * prefill_value_stride(BC));
  for (int t0 = split_begin; t0 < split_end; t0 += BC) {
    const int n_tok = std::min(BC, split_end - t0);
    for (auto* tile : {&ks, &ks_lo, &vt}) std::fill(tile->begin(), tile->end(), uint16_t{0x7e00});
    decode_prefill_tile<KT, VT, D, kSplit>(
        ka, va, [&](int tok) { return view.key.group_at(kv_head, t0 + tok, view.page_tokens); },
        [&](int tok) { return view.value.group_at(kv_head, t0 + tok, view.page_tokens); }, n_tok, ks.data(),
        ks_lo.data(), vt.data(), 0, 1);
    for (Warp& W : warps)
      for (int c0 = 0; c0 < NC; c0 += SC) {
        const int u0 = t0 + 16 * c0;
        if (u0 > W.max_pos || u0 >= split_end) break;
        for (int c = 0; c < SC; ++c)
          for (int h = 0; h < 2; ++h) {
            float acc[32][4] = {};
            for (int kk = 0; kk < KK; ++kk) {
              uint32_t b[32][2], b_lo[32][2];
              for (int lane = 0; lane < 32; ++lane) {
                load_operand(ks.data(), key_operand(D, lane, c0 + c, h, kk), b[lane]);
                load_operand(ks_lo.data(), key_operand(D, lane, c0 + c, h, kk), b_lo[lane]);
              }
              mma_model(W.q_lo[kk], b, acc);
              if (kSplit) mma_model(W.q_hi[kk], b_lo, acc);
              mma_model(W.q_hi[kk], b, acc);
            }
            for (int lane = 0; lane < 32; ++lane)
              for (int i = 0; i < 4; ++i) W.lane[lane].s[c][h][i] = acc[lane][i];
          }
        if (!W.full || u0 + kPrefillSubTokens > split_end || u0 + kPrefillSubTokens - 1 > W.min_pos)
          for (int lane = 0; lane < 32; ++lane) mask_sub_tile(W.lane[lane].s, lane, u0, W.lane[lane].pos, split_end);
        for (int ri = 0; ri < 2; ++ri) {
          float mx[32], mx1[32];
          for (int lane = 0; lane < 32; ++lane) mx[lane] = lane_row_max(W.lane[lane].s, ri);
          for (int lane = 0; lane < 32; ++lane) mx1[lane] = std::fmax(mx[lane], mx[lane ^ 1]);
          for (int lane = 0; lane < 32; ++lane) mx[lane] = std::fmax(mx1[lane], mx1[lane ^ 2]);
          for (int lane = 0; lane < 32; ++lane) {
            Lane& L = W.lane[lane];
            softmax_sub_tile(L.s, L.o, L.m[ri], L.l[ri], ri, mx[lane], [](float x) { return std::exp2(x); });
          }
        }
        for (int c = 0; c < SC; ++c)
          for (int j = 0; j < NJ; ++j) {
            uint32_t a[32][4], b[32][2];
            float o[32][4];
            for (int lane = 0; lane < 32; ++lane) {
              score_frag(W.lane[lane].s[c][0], W.lane[lane].s[c][1], a[lane]);
              load_operand(vt.data(), value_operand(BC, lane, c0 + c, j), b[lane]);
              std::memcpy(o[lane], W.lane[lane].o[j], sizeof o[lane]);
            }
            mma_model(a, b, o);
            for (int lane = 0; lane < 32; ++lane) std::memcpy(W.lane[lane].o[j], o[lane], sizeof o[lane]);
          }
      }
  }

  BlockRows out{std::vector<float>(static_cast<size_t>(R) * D, 0.0f), std::vector<float>(R), std::vector<float>(R)};
  for (int w = 0; w < kPrefillWarps; ++w)
    for (int ri = 0; ri < 2; ++ri) {
      float l1[32];
      for (int lane = 0; lane < 32; ++lane) l1[lane] = warps[w].lane[lane].l[ri] + warps[w].lane[lane ^ 1].l[ri];
      for (int lane = 0; lane < 32; ++lane) {
        const Lane& L = warps[w].lane[lane];
        const int r = kPrefillWarpRows * w + mma_c_row(lane, 2 * ri);
        for (int j = 0; j < NJ; ++j) {
          out.acc[r * D + 8 * j + mma_c_col(lane, 0)] = L.o[j][2 * ri];
          out.acc[r * D + 8 * j + mma_c_col(lane, 1)] = L.o[j][2 * ri + 1];
        }
        out.max[r] = L.m[ri] == -INFINITY ? -INFINITY : L.m[ri] * 0.693147180559945309f;
        out.denom[r] = l1[lane] + l1[lane ^ 2];
      }
    }
  return out;
}

// Every block of a launch (row blocks x KV heads x splits of split_tokens), written and merged as
// write_block_rows and merge_splits_kernel do: the output [n_queries][n_heads][D].
template <class KT, class VT, int D, bool kSplit>
std::vector<float> host_prefill(const KvLayerView& view, const RowArgs& ka, const RowArgs& va, const std::vector<float>& q,
                                int n_heads, int n_queries, int split_tokens) {
  const int group = n_heads / view.n_kv_heads;
  const int splits = static_cast<int>((view.length + split_tokens - 1) / split_tokens);
  const size_t out_rows = static_cast<size_t>(n_queries) * n_heads;
  std::vector<float> out(out_rows * D), partial(static_cast<size_t>(splits) * out_rows * (D + 2));
  const float log2_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))) * 1.4426950408889634f;
  for (int kv_head = 0; kv_head < view.n_kv_heads; ++kv_head)
    for (int row_block = 0; row_block * kPrefillRows < n_queries * group; ++row_block)
      for (int split = 0; split < splits; ++split) {
        const BlockRows b = host_prefill_block<KT, VT, D, kSplit>(view, ka, va, q.data(), n_heads, n_queries, kv_head,
                                                                   row_block, split, split_tokens, log2_scale);
        const int row0 = row_block * kPrefillRows, n_rows = std::min(kPrefillRows, n_queries * group - row0);
        for (int r = 0; r < n_rows; ++r) {
          const int g = row0 + r;
          const size_t out_row = static_cast<size_t>(g / group) * n_heads + kv_head * group + g % group;
          for (int i = 0; i < D; ++i) {
            if (splits == 1) {
              out[out_row * D + i] = b.acc[r * D + i] * SoftmaxState{b.max[r], b.denom[r]}.normalizer();
            } else {
              float* part = &partial[(static_cast<size_t>(split) * out_rows + out_row) * (D + 2)];
              part[i] = b.acc[r * D + i];
              part[D] = b.max[r];
              part[D + 1] = b.denom[r];
            }
          }
        }
      }
  if (splits == 1) return out;
  for (size_t row = 0; row < out_rows; ++row) {
    auto state = [&](int s) {
      const float* part = &partial[(s * out_rows + row) * (D + 2)];
      return SoftmaxState{part[D], part[D + 1]};
    };
    const SoftmaxState merged = merge_in_order(splits, state);
    for (int i = 0; i < D; ++i) {
      float acc = 0.0f;
      for (int s = 0; s < splits; ++s) {
        const SoftmaxState st = state(s);
        if (st.max == -INFINITY) continue;
        acc = rn_add(acc, rn_mul(partial[(s * out_rows + row) * (D + 2) + i], st.merge_weight(merged.max)));
      }
      out[row * D + i] = acc * merged.normalizer();
    }
  }
  return out;
}

double nmse_against(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0.0, energy = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    energy += static_cast<double>(want[i]) * want[i];
  }
  return err / energy;
}

template <FormatId K, FormatId V, int D>
void expect_host_block_matches_cpu(const char* key_spec, const char* value_spec) {
  using KT = KvTile<typename RowsFor<K>::type>;
  using VT = KvTile<typename RowsFor<V>::type>;
  constexpr bool kSplit = !kF16ExactKeys<KT>;
  SCOPED_TRACE(std::string(key_spec) + "/" + value_spec + " d" + std::to_string(D));
  ASSERT_TRUE(has_kernel(kPrefillKernel, K, V, D));
  // 2 KV heads of a GQA group of 4, 70 queries at the end of a 300-token cache: 280 rows per KV
  // head, 5 row blocks (the last 24 rows), the causal edge inside tiles, a partial last tile.
  const int n_kv_heads = 2, n_heads = 8, n_tokens = 300, n_queries = 70;
  const LayerFormats formats{parse_format_spec(key_spec, false), parse_format_spec(value_spec, true)};
  PagedKvCache cache({formats}, {n_kv_heads, D, 32, 64});
  const SeqId seq = cache.create_sequence();
  const auto k = gaussian(static_cast<size_t>(n_tokens) * n_kv_heads * D, 7);
  const auto v = gaussian(static_cast<size_t>(n_tokens) * n_kv_heads * D, 9);
  std::vector<float> q = gaussian(static_cast<size_t>(n_queries) * n_heads * D, 13);
  for (float& x : q) x *= 2.0f;  // a peaked softmax, as tests/gpu's
  cache.append(seq, 0, k.data(), v.data(), n_tokens);
  std::vector<float> want(q.size());
  paged_attention(cache, seq, 0, {n_heads}, q.data(), n_queries, want.data());
  const KvLayerView view = cache.view(seq, 0);
  ASSERT_EQ(view.key.quantized, n_tokens);
  ASSERT_EQ(view.value.quantized, n_tokens);
  const RowArgs ka{D, formats.key.options.scale, nullptr, nullptr, 0};
  const RowArgs va{D, formats.value.options.scale, nullptr, nullptr, 0};
  // One split (the plan's at this length), and splits of 128 and 64 tokens merged.
  const TilePlan plan = plan_tile_prefill(n_tokens, n_kv_heads, n_queries * n_heads / n_kv_heads, 1, 132,
                                          prefill_min_blocks(kSplit), kPrefillTokens);
  for (int split_tokens : {plan.split_tokens, 128, 64}) {
    const std::vector<float> got = host_prefill<KT, VT, D, kSplit>(view, ka, va, q, n_heads, n_queries, split_tokens);
    const double e = nmse_against(got, want);
    std::printf("%s/%s d%d, splits of %d tokens: NMSE %.3g against the CPU attention\n", key_spec, value_spec, D,
                split_tokens, e);
    EXPECT_LT(e, 1e-6) << "splits of " << split_tokens << " tokens";
  }
}

TEST(PrefillTile, KernelBlocksOnTheHostEqualTheCpuAttention) {
  expect_host_block_matches_cpu<FormatId::f16, FormatId::f16, 128>("f16", "f16");
  expect_host_block_matches_cpu<FormatId::f16, FormatId::f16, 64>("f16", "f16");
  // ggml formats imply a rotation (Hadamard) that the host block does not model: plain blocks here.
  expect_host_block_matches_cpu<FormatId::q8_0, FormatId::q4_0, 128>("q8_0:rot=none", "q4_0:rot=none");
  expect_host_block_matches_cpu<FormatId::q4_0, FormatId::q4_0, 128>("q4_0:rot=none", "q4_0:rot=none");
  expect_host_block_matches_cpu<FormatId::q5_1, FormatId::q5_1, 64>("q5_1:rot=none", "q5_1:rot=none");
  expect_host_block_matches_cpu<FormatId::mxfp4, FormatId::mxfp4, 128>("mxfp4", "mxfp4");
}

}  // namespace
}  // namespace kvgate::kernels::gpu
