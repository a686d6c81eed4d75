// Fused decode attention over the paged GPU cache, per KV format and context length, against the
// device's copy bandwidth measured in the same run (docs/perf.md, "GPU kernels and runtime"); the
// measurement is kernels/gpu/gpu_bench.h's, which `kvgate bench kernels --backend cuda` shares.
//
//   gpu_kv_bench [--tokens 8192,32768] [--seqs 1] [--formats f16,fp8_e4m3,...] [--iterations 50] [--json]
// --seqs: sequences per decode step (each its own cache, one attention launch each).
// --prefill-queries N: time the attention of N query positions (a prefill chunk at the end of the
// cache) instead of a decode step, and print TFLOP/s.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/gpu/gpu_bench.h"
#include "kernels/gpu/gpu_convert.h"
#include "kernels/gpu/gpu_kv.h"

namespace {

using namespace kvgate::kernels::gpu;
using kvgate::kernels::FormatId;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int parse_int(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  kvgate::throw_usage_error(flag + ": expected a positive integer, got '" + text + "'");
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<int> contexts = {8192, 32768};
  std::vector<int> seq_counts = {1};
  int prefill_queries = 1;
  std::vector<FormatId> formats;  // default: every GPU format, KIVI once (its key/value pair)
  for (FormatId f : kv_formats())
    if (!is_kivi_value(f)) formats.push_back(f);
  int iterations = 50;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) kvgate::throw_usage_error(arg + ": missing value");
      return argv[++i];
    };
    if (arg == "--tokens") {
      contexts.clear();
      for (const std::string& t : split_list(value())) contexts.push_back(parse_int(arg, t));
    } else if (arg == "--seqs") {
      seq_counts.clear();
      for (const std::string& t : split_list(value())) seq_counts.push_back(parse_int(arg, t));
    } else if (arg == "--prefill-queries") {
      prefill_queries = parse_int(arg, value());
    } else if (arg == "--formats") {
      formats.clear();
      for (const std::string& name : split_list(value())) {
        const auto f = kv_format_named(name);
        if (!f) kvgate::throw_usage_error("--formats: no GPU kernel for KV format '" + name + "'");
        formats.push_back(*f);
      }
    } else if (arg == "--iterations") {
      iterations = parse_int(arg, value());
    } else if (arg == "--json") {
      json = true;
    } else {
      kvgate::throw_usage_error("unknown argument '" + arg + "' (see the comment at the top of gpu_kv_bench.cc)");
    }
  }
  if (device_count() == 0) {
    std::fprintf(stderr, "gpu_kv_bench: no %s device present\n", vendor());
    return 3;
  }

  const double copy_gbps = device_copy_gbps(size_t{1} << 30, 20);
  if (!json) {
    std::printf("device %s (%s), copy bandwidth %.0f GB/s (1 GiB device-to-device, read + write)\n",
                device_name().c_str(), vendor(), copy_gbps);
    std::printf("decode: 32 query heads / 8 KV heads, head_dim 128, 16-token pages, %d steps timed\n\n", iterations);
    std::printf("| K/V | kernel | bits/elem | tokens | seqs | us/step | KV GB/s | / copy | speedup vs f16 | append GB/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  }
  // f16 first, so every other format's speedup has its baseline.
  std::vector<double> f16_us(contexts.size() * seq_counts.size(), 0.0);
  const bool f16_asked = std::find(formats.begin(), formats.end(), FormatId::f16) != formats.end();
  std::vector<FormatId> order = {FormatId::f16};
  for (FormatId f : formats)
    if (f != FormatId::f16) order.push_back(f);
  for (FormatId f : order) {
    for (size_t c = 0; c < contexts.size(); ++c)
      for (size_t n = 0; n < seq_counts.size(); ++n) {
        DecodeBenchShape shape;
        shape.n_seqs = seq_counts[n];
        shape.n_queries = prefill_queries;
        const DecodeBenchResult r = bench_decode_attention(f, contexts[c], iterations, shape);
        const size_t at = c * seq_counts.size() + n;
        if (f == FormatId::f16) f16_us[at] = r.us_per_step;
        if (f == FormatId::f16 && !f16_asked) continue;
        if (json) {
          std::printf(
              "{\"device\":\"%s\",\"format\":\"%s\",\"kernel\":\"%s\",\"bits\":%.3f,\"tokens\":%d,\"seqs\":%d,"
              "\"queries\":%d,\"us_per_step\":%.3f,\"kv_gbps\":%.2f,\"copy_gbps\":%.2f,\"ratio\":%.4f,"
              "\"speedup_vs_f16\":%.3f,\"append_gbps\":%.2f,\"tflops\":%.3f}\n",
              device_name().c_str(), r.label.c_str(), r.kernel, r.bits_per_element, r.tokens, r.n_seqs, prefill_queries,
              r.us_per_step, r.kv_gb_per_s, copy_gbps, r.kv_gb_per_s / copy_gbps, f16_us[at] / r.us_per_step,
              r.append_gb_per_s, r.tflops);
        } else {
          std::printf("| %s | %s | %.2f | %d | %d | %.1f | %.0f | %.2f | %.2fx | %.0f |", r.label.c_str(), r.kernel,
                      r.bits_per_element,
                      r.tokens, r.n_seqs, r.us_per_step, r.kv_gb_per_s, r.kv_gb_per_s / copy_gbps, f16_us[at] / r.us_per_step,
                      r.append_gb_per_s);
          if (prefill_queries > 1) std::printf(" %d queries: %.1f TFLOP/s |", prefill_queries, r.tflops);
          std::printf("\n");
        }
      }
  }
  return 0;
} catch (const kvgate::Error& e) {
  std::fprintf(stderr, "gpu_kv_bench: %s\n", e.what());
  return e.exit_code();
}
