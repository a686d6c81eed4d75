// Standalone Google Benchmark binary for the KV kernels: every registered format's quantize,
// dequantize and one-thread fused decode attention, plus the copy-bandwidth bound. Accepts the
// usual --benchmark_* flags (e.g. --benchmark_filter=decode/q4_0). `kvgate bench kernels` runs
// the same benchmarks and prints them as ratios against the copy bandwidth.
#include <benchmark/benchmark.h>

#include "bench/kernel_benchmarks.h"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  kvgate::bench::KernelBenchReport report;
  kvgate::bench::register_kernel_benchmarks(kvgate::bench::KernelBenchOptions{}, report);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
