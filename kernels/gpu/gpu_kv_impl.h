#pragma once
// What the two halves of the GPU KV cache share (gpu_kv.cu: the paged cache and quantize on
// append; gpu_attention.cu: attention over it): device buffers, the per-side arguments the
// kernels read, and DevicePagedKv's state. Includes the vendor runtime: GPU sources only.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/gpu_timing.h"
#include "kernels/gpu/vendor.h"

namespace kvgate::kernels::gpu {

inline constexpr int kWarp = 32;
inline constexpr int kRowThreads = 128;  // quantize/append: one thread per row

inline void check(gpuError_t err, const char* what) {
  if (err != gpuSuccess)
    throw_environment_error(std::string("GPU ") + KVGATE_GPU_VENDOR + " " + what + ": " + gpuGetErrorString(err));
}

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // Stream-ordered (as gpu_ops.h DeviceMemory): growing a buffer inside a forward, as the
  // attention's split scratch does when the cache grows, does not wait for the device.
  void release() {
    if (ptr) (void)gpuFreeAsync(ptr, 0);  // nothing useful to do with a failure here
    ptr = nullptr;
    bytes = 0;
  }
  void resize(size_t n) {
    if (n <= bytes && ptr) return;
    release();
    check(gpuMallocAsync(&ptr, n ? n : 1, 0), "malloc");
    bytes = n;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
};


inline unsigned blocks_for(size_t items, int threads) { return static_cast<unsigned>((items + threads - 1) / threads); }

// A TurboQuant codec's constants in device memory: copies of its matrices, and of its params
// pointing at the copies.
struct DeviceTq {
  DeviceBuffer params, sketch, rotation;

  static void upload_matrix(DeviceBuffer& dst, const std::vector<float>& m, const float** ptr, const char* what) {
    dst.resize(m.size() * sizeof(float));
    check(gpuMemcpy(dst.ptr, m.data(), m.size() * sizeof(float), gpuMemcpyHostToDevice), what);
    *ptr = dst.as<float>();
  }
  void upload(const TqConstants& c) {
    TqParams p = c.params;
    if (c.sketch) upload_matrix(sketch, *c.sketch, &p.sketch, "upload QJL sketch");
    if (c.rotation_matrix) upload_matrix(rotation, *c.rotation_matrix, &p.rotation_matrix, "upload rotation matrix");
    params.resize(sizeof(TqParams));
    check(gpuMemcpy(params.ptr, &p, sizeof(TqParams), gpuMemcpyHostToDevice), "upload TurboQuant constants");
  }
  const TqParams* get() const { return params.as<TqParams>(); }
};

// ---- the paged cache ----

// A side's pool: each page holds page_tokens / group units per KV head (a unit is one row, or
// for KIVI keys one group of tokens).
struct PagedRows {
  uint8_t* pool;
  size_t unit_bytes;
  const int32_t* page_table;
  int n_kv_heads;
  int page_tokens;
  int group;

  __device__ __forceinline__ uint8_t* unit(int token, int kv_head) const {
    const size_t page = static_cast<size_t>(page_table[token / page_tokens]);
    const int units = page_tokens / group;
    return pool + ((page * n_kv_heads + kv_head) * units + (token % page_tokens) / group) * unit_bytes;
  }
};

// A side's format as the kernels see it: tq and rot point at the constants in device memory.
struct SideArgs {
  FormatId format;
  float scale;
  const TqParams* tq;
  const RotationParams* rot;  // null unless a ggml side stores rotated rows
  const uint16_t* window;  // KIVI: every token's f16 row, [token][kv_head][head_dim]; else null
  int quantized;           // KIVI: tokens below this are in the units, the rest in the window
};

// Where token t's row of one side is read from, and as what.
struct TokenRow {
  const uint8_t* ptr;
  FormatId format;
  int sub;  // the token's index inside its KIVI key group
};

__device__ __forceinline__ TokenRow token_row(const PagedRows& rows, const SideArgs& side, int t, int kv_head,
                                              int head_dim) {
  if (side.window && t >= side.quantized)
    return {reinterpret_cast<const uint8_t*>(side.window + (static_cast<size_t>(t) * rows.n_kv_heads + kv_head) * head_dim),
            FormatId::f16, 0};
  return {rows.unit(t, kv_head), side.format, t % rows.group};
}

// One side (K or V) of the cache: its pool of units, TurboQuant constants, and for KIVI the f16
// window of every token and how many tokens have left it into the units.
struct SideStore {
  KvSideFormat format;
  size_t unit_bytes = 0;
  int group = 1;     // tokens per unit
  int residual = 0;  // KIVI: the newest tokens kept in f16
  bool windowed = false;
  int quantized = 0;
  DeviceBuffer pool, rot, window;
  DeviceTq tq;

  // Tokens in units after n tokens: whole groups that left the R-token window (the CPU cache's
  // rule), or every token for the other formats.
  int quantized_for(int n) const { return !windowed ? n : n > residual ? (n - residual) / group * group : 0; }
};

struct DevicePagedKv::Impl {
  PagedKvShape shape;
  int capacity = 0;
  int length = 0;
  int pages = 0;
  SideStore key, value;
  DeviceBuffer page_table;
  DeviceBuffer staging_k, staging_v, staging_q, staging_out, partial;
  std::vector<int32_t> order;

  SideArgs args(const SideStore& s) const {
    return SideArgs{s.format.format, s.format.scale, s.format.tq ? s.tq.get() : nullptr,
                    s.format.rotation ? s.rot.as<RotationParams>() : nullptr,
                    s.windowed ? s.window.as<uint16_t>() : nullptr, s.quantized};
  }
  PagedRows rows(const SideStore& s) const {
    return PagedRows{s.pool.as<uint8_t>(), s.unit_bytes, page_table.as<int32_t>(), shape.n_kv_heads, shape.page_tokens,
                     s.group};
  }
  size_t unit_offset(const SideStore& s, int token, int kv_head) const {
    const size_t page = static_cast<size_t>(order[token / shape.page_tokens]);
    const int units = shape.page_tokens / s.group;
    return ((page * shape.n_kv_heads + kv_head) * units + (token % shape.page_tokens) / s.group) * s.unit_bytes;
  }
  // Units up to the side's new quantized count leave the window (KIVI); gpu_kv.cu.
  void flush_window(SideStore& s);
  // Attention under an engine's non-exact arithmetic (attention_device's arguments, checked);
  // gpu_attention_arithmetic.cu.
  void arithmetic_attention(const AttentionArithmetic& arithmetic, int n_heads, const float* q, int n_queries,
                            float softmax_scale, float* out);
  std::vector<uint8_t> download_unit(const SideStore& s, int token, int kv_head) const;
};

}  // namespace kvgate::kernels::gpu
