#pragma once
// Host API of the GPU KV-cache kernels: quantize-on-append into a paged device cache, and fused
// attention (decode steps and prefill chunks) that reads the quantized pages directly.
//
// Formats are the registry's (kernels/kv_format.h), named by FormatId; those whose entry has GPU
// storage have kernels. Quantization is bit-identical to the CPU codecs' quantize_ref: the
// kernels run the per-row functions of kernels/gpu/kv_rows.h, which
// tests/kernels/gpu_rows_test.cc checks against the CPU codecs on the host and tests/gpu checks
// again on a device. Attention is float32 with an
// online softmax, split along the sequence (flash-decoding) and merged in a fixed order, so it
// is deterministic run to run; tests/gpu bounds its NMSE against a float64 reference.
//
// This header does not include the vendor runtime, so host code and tests build with any C++
// compiler; device pointers are plain pointers.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "kernels/arithmetic.h"
#include "kernels/gpu/kv_rows.h"
#include "kernels/gpu/tq_params.h"

namespace kvgate::kernels::gpu {

inline constexpr int kMaxKvHeadDim = 256;

// The registry's formats with GPU kernels, in registry order (kernels/gpu/kv_formats.cc, host
// code that builds without a GPU toolchain).
std::vector<FormatId> kv_formats();
// The registry's name of a format; a usage error for an id no entry has.
const char* kv_format_name(FormatId format);
// The format of that name, if it has GPU kernels.
std::optional<FormatId> kv_format_named(std::string_view name);
// Bytes of one row; throws kvgate::Error (usage) if head_dim does not fit the format: 1..256 and
// the registry entry's rules (even for int4_pth, a multiple of 32 for the ggml blocks, ...).
size_t kv_row_bytes(FormatId format, int head_dim);

// x: [n_rows][head_dim] floats -> out: n_rows * kv_row_bytes bytes. `scale` is the per-tensor
// scale of the fp8_e4m3/e5m2/e4m3fnuz formats (stored = fp8(x / scale)) and nvfp4's global
// scale; the others ignore it.
// Host buffers in and out; throws kvgate::Error (usage) on bad arguments, (environment) on a
// driver failure.
void quantize_rows(FormatId format, int head_dim, float scale, const float* x, size_t n_rows, uint8_t* out);
void dequantize_rows(FormatId format, int head_dim, float scale, const uint8_t* in, size_t n_rows, float* y);
// The same for TurboQuant keys with their codec constants (make_tq_params); rows are
// kv_row_bytes long unless the constants set another outlier count, and dequantize_rows gives
// them in the rotated basis (the CPU codec's dequantize_stored_ref).
void quantize_rows(FormatId format, int head_dim, const TqConstants& tq, const float* x, size_t n_rows, uint8_t* out);
void dequantize_rows(FormatId format, int head_dim, const TqConstants& tq, const uint8_t* in, size_t n_rows, float* y);

struct KvSideFormat {
  FormatId format = FormatId::f16;
  float scale = 1.0f;           // per-tensor scale (fp8_e4m3/e5m2/e4m3fnuz), global scale (nvfp4)
  std::optional<TqConstants> tq;  // the codec constants of TurboQuant keys (make_tq_params)
  int group = 0;                // KIVI keys: tokens per group (0 = 32; must divide page_tokens)
  int residual = 128;           // KIVI: the newest tokens kept in f16 (Codec::residual_tokens)
  // ggml formats with rot=hadamard (kernels/gpu/tq_params.h): rows are stored rotated, attention
  // rotates the query (keys) or its output back (values).
  std::optional<RotationParams> rotation = std::nullopt;
};

struct PagedKvShape {
  int head_dim = 128;
  int n_kv_heads = 8;
  int page_tokens = 32;
  KvSideFormat key, value;
  // Whose attention arithmetic reads the cache (the config's `@engine=`, as the CPU cache's
  // LayerFormats::arithmetic). Not exact: both sides must be formats the engine has (arithmetic_refusal),
  // stored row by row; attention resolves the arithmetic per call (kv_arithmetic) and runs the
  // engine path (gpu_attention_arithmetic.cu) unless it resolves to exact, as the CPU does.
  Arithmetic arithmetic = Arithmetic::exact;
};

// The arithmetic attention over a cache of `shape` runs for n_queries query positions: the
// shape's engine resolved for its key and value formats exactly as the CPU attention resolves
// it (kernels/arithmetic.h resolve_arithmetic, with the key's scale as vLLM's q_scale). Host code.
AttentionArithmetic kv_arithmetic(const PagedKvShape& shape, int n_queries);

// One sequence's KV cache for one layer, on the device. Rows live in a pool of pages, each page
// holding page_tokens rows per KV head (page-major, then head, then slot), and the sequence's
// page table maps logical page i (tokens [i * page_tokens, (i + 1) * page_tokens)) to a pool
// page, so a kernel reads the cache the way a paged serving engine lays it out.
class DevicePagedKv {
 public:
  // page_order: the pool page of each logical page (a permutation of 0..pages-1); empty means
  // in order. Throws kvgate::Error (usage) on a bad shape, (environment) when the device fails.
  DevicePagedKv(const PagedKvShape& shape, int capacity_tokens, std::vector<int32_t> page_order = {});
  ~DevicePagedKv();
  DevicePagedKv(const DevicePagedKv&) = delete;
  DevicePagedKv& operator=(const DevicePagedKv&) = delete;

  const PagedKvShape& shape() const;
  int length() const;
  int capacity() const;
  // Quantized K and V bytes of one token over all KV heads (what a decode step reads per token).
  size_t kv_bytes_per_token() const;

  // k, v: [n_new][n_kv_heads][head_dim]; quantized on the device into the next n_new slots.
  void append(const float* k, const float* v, int n_new);         // host buffers
  void append_device(const float* k, const float* v, int n_new);  // device buffers

  // q, out: [n_queries][n_heads][head_dim]. Query i sits at position length() - n_queries + i
  // and attends causally to tokens 0..its position; query head h reads KV head
  // h / (n_heads / n_kv_heads). split_tokens: tokens per sequence split (a multiple of 32;
  // 0 picks enough splits to fill the device). Under an engine whose arithmetic is not exact
  // for this call, the engine path runs instead (tokens in order, no splits; split_tokens is
  // still checked but has no effect) and agrees with the CPU's engine attention
  // (kernels/attention_arithmetic.h) to float rounding.
  void attention(int n_heads, const float* q, int n_queries, float softmax_scale, float* out,
                 int split_tokens = 0);  // host buffers
  void attention_device(int n_heads, const float* q, int n_queries, float softmax_scale, float* out,
                        int split_tokens = 0);  // device buffers

  // Which kernel attention() runs for a call of this many query heads and positions:
  // "tile-decode" or "tile-prefill" (the tile kernels of kernels/gpu/kv_tile.h's pairs),
  // "general" (the run-time format switch), or "arithmetic" (an @engine= arithmetic that rounds,
  // gpu_attention_arithmetic.cu); benchmarks print it and tests check it, so a silent
  // fallback shows.
  const char* attention_kernel(int n_heads, int n_queries) const;

  // Forgets every token from position n on (n <= length()); later appends overwrite them.
  void truncate(int n);
  // Makes this cache hold the first n tokens of `source` (same shape, n <= its length and this
  // capacity), e.g. to probe a continuation without disturbing the source sequence.
  void copy_prefix_from(const DevicePagedKv& source, int n);

  // The stored bytes of one row (tests compare them with the CPU codec's): for KIVI keys the
  // whole group holding the token; a token still in a KIVI window is a usage error.
  std::vector<uint8_t> key_row(int token, int kv_head) const;
  std::vector<uint8_t> value_row(int token, int kv_head) const;

  // Mean device milliseconds of one attention_device call (q and out allocated here), timed
  // with device events over `iterations` launches after a warm-up; for benchmarks.
  double time_attention_ms(int n_heads, int n_queries, int iterations, int split_tokens = 0);
  // Mean device milliseconds of appending n_new tokens from device buffers k, v to an empty
  // cache (the cache is emptied before each launch and left holding them); for benchmarks.
  double time_append_ms(const float* k, const float* v, int n_new, int iterations);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Device-to-device copy of a `bytes` buffer: (bytes read + bytes written) per second, in GB/s,
// the bound the attention benchmark compares against.
double device_copy_gbps(size_t bytes, int iterations);

}  // namespace kvgate::kernels::gpu
