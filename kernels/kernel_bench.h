#pragma once
// Kernel throughput of the CPU codecs, measured by the kernels module itself so that
// `kvgate bench kernels` and bench/kernels_bench share one definition of every measurement:
// per format, quantize and dequantize GB/s (float bytes), fused decode attention GB/s (KV bytes
// read) on one thread, and the machine's copy bandwidth measured in the same run, so every
// number can be read as a fraction of what memory allows.
//
// No Google Benchmark here: a library the CLI links must not pull in a benchmark framework, and
// the CLI needs `bench kernels` in every build (the GPU bundle is built without it). The timing
// loop follows Google Benchmark's rules (iterations grow until the thread's CPU time reaches the
// minimum; bytes per CPU-second), so bench/kernels_bench, which wraps the same measurements in
// Google Benchmark, and the CLI report the same figures.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvgate::kernels {

struct KernelBenchOptions {
  std::vector<std::string> formats;  // empty: every registered format
  std::vector<int64_t> tokens = {4096, 32768};
  int n_kv_heads = 8;  // a Llama-3-8B layer: 32 query heads over 8 KV heads of 128
  int n_heads = 32;
  int head_dim = 128;
  int page_tokens = 32;
  double min_time_s = 0.2;  // per measurement
};

struct DecodeResult {
  int64_t tokens = 0;
  double kv_bytes = 0;  // bytes one decode step reads (K and V, all KV heads)
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

// One measured operation. `prepare` builds its inputs (not timed; cheap after the first call);
// `iteration` does `bytes_per_iteration` bytes of work once; `release` (optional) frees what only
// this measurement needs; the rate belongs in `*gb_per_s`.
struct KernelMeasurement {
  std::string name;  // "copy", "quantize/q4_0", "dequantize/q4_0", "decode/q4_0/q4_0/4096"
  double bytes_per_iteration = 0;
  std::function<void()> prepare;
  std::function<void()> iteration;
  std::function<void()> release;
  double* gb_per_s = nullptr;  // points into the report the plan was made for
};

// The measurements for `options`, in run order; `report` gets the formats, sizes and byte counts
// now and the rates when the measurements run, so it must outlive them (and not be resized).
// Throws a usage error for an unknown format name or an impossible shape.
std::vector<KernelMeasurement> plan_kernel_benchmarks(const KernelBenchOptions& options, KernelBenchReport& report);

// Runs one measurement until the calling thread has spent `min_time_s` of CPU time in one batch
// of iterations and returns that batch's bytes per CPU-second, in GB/s.
double measure_gb_per_s(const KernelMeasurement& m, double min_time_s);

// Plans and runs everything on the calling thread; `on_result` (optional) sees each rate as it
// is measured, for progress output.
KernelBenchReport run_kernel_benchmarks(const KernelBenchOptions& options,
                                        const std::function<void(const std::string& name, double gb_per_s)>& on_result = {});

}  // namespace kvgate::kernels
