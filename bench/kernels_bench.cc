// Standalone Google Benchmark binary for the KV kernels: every registered format's quantize,
// dequantize and one-thread fused decode attention, plus the copy-bandwidth bound. Accepts the
// usual --benchmark_* flags (e.g. --benchmark_filter=decode/q4_0). The measurements are the
// kernels module's own (kernels/kernel_bench.h); `kvgate bench kernels` runs the same ones and
// prints them as ratios against the copy bandwidth.
#include <benchmark/benchmark.h>

#include "kernels/kernel_bench.h"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  const kvgate::kernels::KernelBenchOptions options;
  kvgate::kernels::KernelBenchReport report;
  const auto measurements = kvgate::kernels::plan_kernel_benchmarks(options, report);
  for (const auto& m : measurements) {
    benchmark::RegisterBenchmark(m.name.c_str(), [&m](benchmark::State& state) {
      m.prepare();
      for (auto _ : state) m.iteration();
      state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * m.bytes_per_iteration));
    })->MinTime(options.min_time_s);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
