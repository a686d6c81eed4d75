#pragma once
// The GPU decode-attention measurement shared by bench/gpu/gpu_kv_bench and `kvgate bench
// kernels --backend cuda|hip`: one sequence in a paged device cache with one Llama-3-8B layer's
// shape (32 query heads over 8 KV heads, head_dim 128, 16-token pages), one decode step timed
// with device events, against the device's copy bandwidth.
#include <string>

#include "kernels/gpu/kv_rows.h"

namespace kvgate::kernels::gpu {

struct DecodeBenchShape {
  int n_heads = 32, n_kv_heads = 8, head_dim = 128, page_tokens = 16;
  int n_seqs = 1;     // sequences per step, each its own cache and launch
  int n_queries = 1;  // query positions per sequence: 1 is a decode step, more a prefill chunk's attention
};

struct DecodeBenchResult {
  std::string label;        // "q4_0"; key-only formats pair up: "tq3/u4", "kivi4_k/kivi4_v"
  FormatId key, value;
  double bits_per_element;  // K and V averaged
  int tokens;
  int n_seqs;
  double us_per_step;       // all n_seqs sequences' attention
  double kv_gb_per_s;       // quantized K and V bytes one step reads (every sequence), per second
  double append_gb_per_s;   // quantize-on-append: float32 K and V bytes in, per second
  double tflops;            // attention's multiply-adds x 2 (QK and PV, causal) per second, in TFLOP/s
  const char* kernel;       // the attention kernel that ran (DevicePagedKv::attention_kernel)
};

// `format` stores both sides, except that tq{b} keys pair with u4 values and KIVI keys and
// values with each other (kivi{b}_v measures the same pair as kivi{b}_k).
DecodeBenchResult bench_decode_attention(FormatId format, int tokens, int iterations, const DecodeBenchShape& shape = {});

}  // namespace kvgate::kernels::gpu
