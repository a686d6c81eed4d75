#pragma once
// The attention kernels' view of a KV format: a compile-time tile loader per format family, the
// copy schedule of a tile of tokens, and the table of key/value pairs that have kernels of their
// own. Host+device code (rows_common.h), so tests/kernels/kv_tile_test.cc runs the very same
// loaders on the host against the CPU codecs, and the launch plan's byte count
// (attention_plan.h) walks the very copy schedule the kernels issue.
//
// A tile is kTileTokens consecutive tokens of one KV head. Its rows lie in one or two pages of the
// paged pool (page-major, then head, then slot: gpu_kv_impl.h PagedRows), so a tile is a few
// runs of contiguous bytes. The kernel copies those runs into shared memory with 16-byte
// (asynchronous where the vendor has it) copies, whatever the format: the format is not known to
// the copy, only its row size. Then KvTile<Rows>::decode turns elements of a row in shared memory
// into floats in registers, each exactly the CPU codec's decoded value (in the stored basis:
// rotated formats stay rotated, and attention rotates the query and the output once per block).
#include <cstddef>
#include <cstdint>

#include "kernels/gpu/kv_rows.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define KVGATE_HW_FP8_CVT 1  // cvt.rn.f16x2.e4m3x2: Ada and Hopper convert two E4M3 codes at once
#endif

namespace kvgate::kernels::gpu {

inline constexpr int kTileTokens = 32;  // tokens per tile: split lengths are multiples of it
inline constexpr int kCopyBytes = 16;   // one copy instruction

// A tile's rows in shared memory: rows whose size is a multiple of 16 bytes (f16, bf16, fp8 at
// head_dim % 16 == 0, ...) get 16 bytes of padding each, so the 8 rows a quarter-warp reads in
// the score loop start in different banks; other rows are packed back to back as in the pool
// (their runs are still whole 16-byte copies: see tile_runs).
KVGATE_HD int tile_row_stride(int row_bytes) { return row_bytes % kCopyBytes == 0 ? row_bytes + kCopyBytes : row_bytes; }
// Shared-memory bytes of one side of a tile of `tokens` tokens (a multiple of 16).
KVGATE_HD int tile_bytes(int row_bytes, int tokens = kTileTokens) {
  return (tokens * tile_row_stride(row_bytes) + kCopyBytes - 1) / kCopyBytes * kCopyBytes;
}

// One contiguous run of a tile: `rows` rows starting at token `first` (all in one page), read
// from byte `src` of the pool (relative to its base) into byte `dst` of the tile, `bytes` bytes in
// whole 16-byte copies. A run that stops inside its page rounds its byte count up to the next 16
// (the bytes past its last row belong to rows of the same page and are never decoded); one that
// reaches the page's end ends on a 16-byte boundary, because pages hold a multiple of 16 rows
// and runs start on a multiple of 16 rows.
struct TileRun {
  int first, rows;
  size_t src;
  int dst, bytes;
};

// The runs of the tile of tokens [t0, t_end) (at most a tile's tokens, t0 a multiple of 16) of
// KV head `kv_head`, in token order; fn(TileRun) is called for each. page_tokens must be a
// multiple of 16 (the kernels' precondition, checked on the host).
template <class Fn>
KVGATE_HD void tile_runs(const int32_t* page_table, int n_kv_heads, int page_tokens, int row_bytes, int kv_head, int t0,
                         int t_end, Fn&& fn) {
  const int stride = tile_row_stride(row_bytes);
  for (int t = t0; t < t_end;) {
    const int slot = t % page_tokens;
    const int rows = (t_end - t < page_tokens - slot) ? t_end - t : page_tokens - slot;
    const size_t page = static_cast<size_t>(page_table[t / page_tokens]);
    const size_t src = ((page * n_kv_heads + kv_head) * page_tokens + slot) * static_cast<size_t>(row_bytes);
    const int rounded = (rows * row_bytes + kCopyBytes - 1) / kCopyBytes * kCopyBytes;
    const int to_page_end = (page_tokens - slot) * row_bytes;
    fn(TileRun{t, rows, src, (t - t0) * stride, rounded < to_page_end ? rounded : to_page_end});
    t += rows;
  }
}

// Where the c-th 16-byte copy of a run lands in the tile: packed rows copy straight through,
// padded rows skip their padding.
KVGATE_HD int tile_copy_dst(const TileRun& run, int row_bytes, int c) {
  if (row_bytes % kCopyBytes != 0) return run.dst + c * kCopyBytes;
  const int per_row = row_bytes / kCopyBytes;
  return run.dst + (c / per_row) * tile_row_stride(row_bytes) + (c % per_row) * kCopyBytes;
}

// ---- loaders ----
// KvTile<Rows>::decode<N>(args, row, i0, y): elements [i0, i0 + N) of a row in shared memory
// (i0 a multiple of N, N dividing 8: a run of N lies inside one ggml or nvfp4 block) into y, each
// the value Rows::element gives. The general loader is the family's span; the families below
// read their codes as words and convert them with the hardware where it can.
template <class Rows>
struct KvTile {
  using RowFunctions = Rows;
  template <int N>
  KVGATE_HD static void decode(const RowArgs& a, const uint8_t* row, int i0, float* y) {
    Rows::template span<N>(a, row, i0, N, y);
  }
};

// An f16's bits widened exactly: one convert instruction on NVIDIA devices.
KVGATE_HD float widen_half(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(h)));
  return f;
#else
  return f16_to_f32(h);
#endif
}

// Reads N bytes at p (N a power of two up to 16, p aligned to N) as one load.
template <int N>
KVGATE_HD void load_aligned(const uint8_t* p, uint8_t* out) {
#if defined(__CUDACC__) || defined(__HIPCC__)
  if constexpr (N == 16) {
    *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(p);
  } else if constexpr (N == 8) {
    *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(p);
  } else if constexpr (N == 4) {
    *reinterpret_cast<uint32_t*>(out) = *reinterpret_cast<const uint32_t*>(p);
  } else {
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) out[k] = p[k];
  }
#else
  for (int k = 0; k < N; ++k) out[k] = p[k];
#endif
}

// f16 and bf16: the row's halves in one 4-, 8- or 16-byte load (padded rows keep every run of
// N halves aligned), widened exactly.
template <bool kBf16>
struct KvTile<Half16Rows<kBf16>> {
  using RowFunctions = Half16Rows<kBf16>;
  template <int N>
  KVGATE_HD static void decode(const RowArgs&, const uint8_t* row, int i0, float* y) {
    alignas(16) uint16_t h[N];
    load_aligned<2 * N>(row + 2 * i0, reinterpret_cast<uint8_t*>(h));
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) y[k] = kBf16 ? bf16_to_f32(h[k]) : widen_half(h[k]);
  }
};

// E4M3 pairs to f16 pairs: the hardware convert on Ada/Hopper (exact: every E4M3 value is an f16),
// fp8_to_f32 elsewhere; then the per-tensor scale, one rounded multiply as the CPU's.
KVGATE_HD void e4m3_pair(uint32_t two_codes, float* y) {
#if defined(KVGATE_HW_FP8_CVT)
  uint32_t halves;
  const unsigned short in = static_cast<unsigned short>(two_codes);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(in));
  y[0] = widen_half(static_cast<uint16_t>(halves & 0xffffu));
  y[1] = widen_half(static_cast<uint16_t>(halves >> 16));
#else
  y[0] = fp8_to_f32(static_cast<uint8_t>(two_codes), Fp8Kind::e4m3fn);
  y[1] = fp8_to_f32(static_cast<uint8_t>(two_codes >> 8), Fp8Kind::e4m3fn);
#endif
}

template <Fp8Kind kKind>
struct KvTile<Fp8Rows<kKind>> {
  using RowFunctions = Fp8Rows<kKind>;
  template <int N>
  KVGATE_HD static void decode(const RowArgs& a, const uint8_t* row, int i0, float* y) {
    if constexpr (kKind == Fp8Kind::e4m3fn && N % 2 == 0) {
      alignas(16) uint8_t c[N];
      if constexpr (N >= 4) load_aligned<N>(row + i0, c);  // rows of head_dim % 16 == 0 are padded
      else
        for (int k = 0; k < N; ++k) c[k] = row[i0 + k];
      KVGATE_UNROLL
      for (int k = 0; k < N; k += 2) {
        e4m3_pair(c[k] | (static_cast<uint32_t>(c[k + 1]) << 8), y + k);
        y[k] = rn_mul(y[k], a.scale);
        y[k + 1] = rn_mul(y[k + 1], a.scale);
      }
    } else {
      Fp8Rows<kKind>::template span<N>(a, row, i0, N, y);
    }
  }
};

// q4_0 and q8_0: the block scale once, the codes of the run from its bytes; the value is the
// CPU's rn_mul(code, d). (The block's codes start 2 bytes in, and blocks are 18 or 34 bytes, so
// only 2-byte alignment holds: the bytes are read singly and the compiler merges what it can.)
template <>
struct KvTile<GgmlRows<ggml::Q4_0>> {
  using RowFunctions = GgmlRows<ggml::Q4_0>;
  template <int N>
  KVGATE_HD static void decode(const RowArgs&, const uint8_t* row, int i0, float* y) {
    const uint8_t* b = row + (i0 / 32) * ggml::Q4_0::kBytes;
    const float d = ggml::half_at(b);
    const int j0 = i0 % 32;
    KVGATE_UNROLL
    for (int k = 0; k < N; ++k) {
      const int j = j0 + k;
      const int code = j < 16 ? (b[2 + j] & 0x0f) : (b[2 + j - 16] >> 4);
      y[k] = rn_mul(static_cast<float>(code - 8), d);
    }
  }
};

// ---- the key/value pairs with kernels of their own ----
// The kernels a pair or head_dim has: the tile decode kernel (attention_tile.cuh: decode steps, up
// to kTileMaxRowsPerKvHead rows per KV head) and the tensor-core prefill kernel
// (attention_prefill.cuh: more rows).
enum KernelKinds : uint8_t { kDecodeKernel = 1, kPrefillKernel = 2, kBothKernels = 3 };
struct KvPair {
  FormatId key, value;
  uint8_t kinds = kBothKernels;
};
// Every format with itself (but f32, which no engine caches, and the formats stored through a
// window or scored against a sketch: KIVI, tqprod), TurboQuant keys with the u4 values of vLLM's
// presets (and u3, turboquant_3bit_nc), fp8 keys with u4 values (k8v4), and llama.cpp's common
// q8_0 keys over q4_0 values. The 4- and 5-bit ggml keys, mxfp4 and int4_pth keys have the
// prefill kernel only: their decode kernels spill 8-24 bytes under the 64-register bound, which
// the static check refuses, so their decode steps run the general kernel (gpu_attention.cu),
// which switches on the format at run time, as does any pair or shape not here.
inline constexpr KvPair kKernelPairs[] = {
    {FormatId::f16, FormatId::f16},
    {FormatId::bf16, FormatId::bf16},
    {FormatId::fp8_e4m3, FormatId::fp8_e4m3},
    {FormatId::fp8_e5m2, FormatId::fp8_e5m2},
    {FormatId::fp8_e4m3fnuz, FormatId::fp8_e4m3fnuz},
    {FormatId::fp8_e4m3, FormatId::u4},
    {FormatId::int8_pth, FormatId::int8_pth},
    {FormatId::fp8_pth, FormatId::fp8_pth},
    {FormatId::int4_pth, FormatId::int4_pth, kPrefillKernel},
    {FormatId::q8_0, FormatId::q8_0},
    {FormatId::iq4_nl, FormatId::iq4_nl},
    {FormatId::q8_0, FormatId::q4_0},
    {FormatId::q4_0, FormatId::q4_0, kPrefillKernel},
    {FormatId::q4_1, FormatId::q4_1, kPrefillKernel},
    {FormatId::q5_0, FormatId::q5_0, kPrefillKernel},
    {FormatId::q5_1, FormatId::q5_1, kPrefillKernel},
    {FormatId::mxfp4, FormatId::mxfp4, kPrefillKernel},
    {FormatId::nvfp4, FormatId::nvfp4},
    {FormatId::nvfp4_4over6, FormatId::nvfp4_4over6},
    {FormatId::tq1, FormatId::u4},
    {FormatId::tq2, FormatId::u4},
    {FormatId::tq2_5, FormatId::u4},
    {FormatId::tq3, FormatId::u4},
    {FormatId::tq3_5, FormatId::u4},
    {FormatId::tq4, FormatId::u4},
    {FormatId::tq3, FormatId::u3},
};
// The head_dims with kernels, and which. (Decode only at 128 so far: at 64, and at 256 with some
// value formats, the decode kernel spills a few registers under its 64-register bound, which the
// static check refuses; those decode steps take the general kernel.)
struct KernelHeadDim {
  int head_dim;
  uint8_t kinds;
};
inline constexpr KernelHeadDim kKernelHeadDims[] = {{64, kPrefillKernel}, {128, kBothKernels}};

// Host code: the tables are host constants (device code sees pairs only as template arguments).
constexpr bool has_kernel(KernelKinds kind, FormatId key, FormatId value, int head_dim) {
  bool pair = false, dim = false;
  for (const KvPair& p : kKernelPairs) pair = pair || (p.key == key && p.value == value && (p.kinds & kind));
  for (const KernelHeadDim& d : kKernelHeadDims) dim = dim || (d.head_dim == head_dim && (d.kinds & kind));
  return pair && dim;
}

// The format families, one translation unit of attention kernels each (attention_<family>.cu):
// a pair belongs to its key's family.
enum class KernelFamily : uint8_t { float16, fp8, per_token_head, ggml, nvfp4, turboquant };
KVGATE_HD constexpr KernelFamily kernel_family(FormatId key) {
  switch (key) {
    case FormatId::fp8_e4m3:
    case FormatId::fp8_e5m2:
    case FormatId::fp8_e4m3fnuz: return KernelFamily::fp8;
    case FormatId::int8_pth:
    case FormatId::fp8_pth:
    case FormatId::int4_pth: return KernelFamily::per_token_head;
    case FormatId::q8_0:
    case FormatId::q5_0:
    case FormatId::q5_1:
    case FormatId::q4_0:
    case FormatId::q4_1:
    case FormatId::iq4_nl:
    case FormatId::mxfp4: return KernelFamily::ggml;
    case FormatId::nvfp4:
    case FormatId::nvfp4_4over6: return KernelFamily::nvfp4;
    case FormatId::tq1:
    case FormatId::tq2:
    case FormatId::tq2_5:
    case FormatId::tq3:
    case FormatId::tq3_5:
    case FormatId::tq4: return KernelFamily::turboquant;
    default: return KernelFamily::float16;
  }
}

}  // namespace kvgate::kernels::gpu
