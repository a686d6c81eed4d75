#pragma once
// Host API of the GPU KV-cache kernels: quantize-on-append, dequantize, and fused decode
// attention reading the quantized rows directly. Every kernel writes exactly the bytes of the
// CPU codec's quantize_ref for the same format (kernels/formats_pth.cc, formats_ggml.cc,
// formats_fp8.cc) because it runs the same scalar arithmetic in the same order; tests/gpu
// compares them byte for byte on a device.
//
// A row is one token of one KV head (head_dim elements), stored in the CPU codec's group layout;
// rows are back to back with no padding, so a row may start at any byte offset.
#include <cstddef>
#include <cstdint>

namespace kvgate::kernels::gpu {

// The formats with GPU kernels; names equal the CPU registry's (kernels::find_format).
enum class KvFormat : uint8_t { int8_pth, fp8_pth, q8_0, q4_0, q4_1, fp8_e4m3 };

inline constexpr int kMaxKvHeadDim = 256;  // one thread per element in the attention kernel

const char* kv_format_name(KvFormat format);
// Bytes of one row; throws kvgate::Error (usage) if head_dim does not fit the format
// (1..256, and a multiple of 32 for the ggml blocks).
size_t kv_row_bytes(KvFormat format, int head_dim);

// x: [n_rows][head_dim] floats -> out: n_rows * kv_row_bytes bytes. `scale` is the per-tensor
// scale of fp8_e4m3 (stored = fp8(x / scale)); the other formats ignore it. Host buffers in and
// out; throws kvgate::Error (usage) on bad arguments, (environment) on a driver failure.
void quantize_rows(KvFormat format, int head_dim, float scale, const float* x, size_t n_rows, uint8_t* out);
void dequantize_rows(KvFormat format, int head_dim, float scale, const uint8_t* in, size_t n_rows, float* y);

struct DecodeAttentionArgs {
  KvFormat key_format = KvFormat::q8_0;
  KvFormat value_format = KvFormat::q8_0;
  int head_dim = 128;
  float key_scale = 1.0f;     // per-tensor scales (fp8_e4m3 only)
  float value_scale = 1.0f;
  int n_tokens = 0;           // >= 1
  int n_query_heads = 1;      // the GQA group sharing this KV head
  float softmax_scale = 1.0f; // usually 1/sqrt(head_dim)
  int chunk_tokens = 64;      // the sequence is split into chunks of this many tokens, then merged
};

// One decode step for one KV head: out[h] = softmax(scale * q[h] . K) V for every query head h of
// the group. keys/values: n_tokens rows each; q, out: [n_query_heads][head_dim]. Host buffers.
void decode_attention(const DecodeAttentionArgs& args, const uint8_t* keys, const uint8_t* values, const float* q,
                      float* out);

}  // namespace kvgate::kernels::gpu
