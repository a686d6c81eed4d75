#pragma once
// Kernel throughput measured with Google Benchmark, shared by the standalone bench/kernels_bench
// binary and `kvgate bench kernels`: per format, quantize and dequantize GB/s (float bytes), fused
// decode attention GB/s (KV bytes read) on one thread, and the machine's copy bandwidth measured
// in the same run, so every number can be read as a fraction of what memory allows.
#include <cstdint>
#include <string>
#include <vector>

namespace kvgate::bench {

struct KernelBenchOptions {
  std::vector<std::string> formats;  // empty: every registered format
  std::vector<int64_t> tokens = {4096, 32768};
  int n_kv_heads = 8;  // a Llama-3-8B layer: 32 query heads over 8 KV heads of 128
  int n_heads = 32;
  int head_dim = 128;
  int page_tokens = 32;
  double min_time_s = 0.2;  // per benchmark
};

struct DecodeResult {
  int64_t tokens = 0;
  double kv_bytes = 0;   // bytes one decode step reads (K and V, all KV heads)
  double gb_per_s = 0;
};

struct FormatResult {
  std::string format;
  std::string key, value;  // the pair used for decode (key- or value-only formats are paired with f16)
  double bits_per_element = 0;
  double quantize_gb_per_s = 0;    // float32 bytes in per second
  double dequantize_gb_per_s = 0;  // float32 bytes out per second
  std::vector<DecodeResult> decode;
};

struct KernelBenchReport {
  KernelBenchOptions options;
  size_t copy_buffer_bytes = 0;
  double copy_gb_per_s = 0;  // bytes copied per second by memcpy (each byte is read once and written once)
  std::vector<FormatResult> formats;
};

// Registers the benchmarks with Google Benchmark; `report` is filled while they run and must
// outlive benchmark::RunSpecifiedBenchmarks. Throws a usage error for an unknown format name.
void register_kernel_benchmarks(const KernelBenchOptions& options, KernelBenchReport& report);

// Registers and runs everything in-process (used by the CLI); output goes only to the report.
KernelBenchReport run_kernel_benchmarks(const KernelBenchOptions& options);

}  // namespace kvgate::bench
