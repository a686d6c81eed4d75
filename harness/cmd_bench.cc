// `kvgate bench kernels`: quantize, dequantize and one-thread fused decode throughput per KV
// format, each next to the copy bandwidth measured in the same run (design.md: performance is
// reported as a ratio against a bound, never as a bare number).
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/kernel_benchmarks.h"
#include "core/error.h"
#include "harness/commands.h"

namespace kvgate::harness {
namespace {

struct BenchFlags {
  std::string formats;  // comma separated; empty = all
  std::string tokens = "4096,32768";
  double min_time = 0.2;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void run_kernels(const BenchFlags& flags, bool as_json) {
  bench::KernelBenchOptions o;
  o.formats = split_commas(flags.formats);
  o.tokens.clear();
  for (const std::string& t : split_commas(flags.tokens)) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size()) throw_usage_error("bench kernels: --tokens '" + t + "' is not an integer");
    o.tokens.push_back(v);
  }
  if (o.tokens.empty()) throw_usage_error("bench kernels: --tokens needs at least one length");
  if (!(flags.min_time > 0.0 && flags.min_time <= 60.0)) throw_usage_error("bench kernels: --min-time must be in (0, 60] seconds");
  o.min_time_s = flags.min_time;

  const bench::KernelBenchReport r = bench::run_kernel_benchmarks(o);
  if (as_json) {
    nlohmann::json formats = nlohmann::json::array();
    for (const auto& f : r.formats) {
      nlohmann::json decode = nlohmann::json::array();
      for (const auto& d : f.decode)
        decode.push_back({{"tokens", d.tokens}, {"kv_bytes", d.kv_bytes}, {"gb_per_s", d.gb_per_s},
                          {"ratio_to_copy", d.gb_per_s / r.copy_gb_per_s}});
      formats.push_back({{"format", f.format}, {"key", f.key}, {"value", f.value}, {"bits_per_element", f.bits_per_element},
                         {"quantize_gb_per_s", f.quantize_gb_per_s}, {"dequantize_gb_per_s", f.dequantize_gb_per_s},
                         {"decode", decode}});
    }
    const nlohmann::json j = {
        {"shape", {{"n_heads", o.n_heads}, {"n_kv_heads", o.n_kv_heads}, {"head_dim", o.head_dim}, {"page_tokens", o.page_tokens}}},
        {"threads", 1},
        {"copy", {{"buffer_bytes", r.copy_buffer_bytes}, {"gb_per_s", r.copy_gb_per_s}}},
        {"formats", formats}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("copy bandwidth: %.2f GB/s (memcpy of %zu MiB; bytes copied per second)\n", r.copy_gb_per_s,
              r.copy_buffer_bytes >> 20);
  std::printf("decode: one thread, %d query heads over %d KV heads x head_dim %d, %d-token pages; GB/s = KV bytes read\n",
              o.n_heads, o.n_kv_heads, o.head_dim, o.page_tokens);
  std::printf("%-10s %-16s %6s %9s %9s", "format", "decode K/V", "bits", "quant", "dequant");
  for (int64_t t : o.tokens) std::printf(" %10s %6s", ("dec@" + std::to_string(t)).c_str(), "ratio");
  std::printf("\n");
  for (const auto& f : r.formats) {
    std::printf("%-10s %-16s %6.3g %9.2f %9.2f", f.format.c_str(), (f.key + "/" + f.value).c_str(), f.bits_per_element,
                f.quantize_gb_per_s, f.dequantize_gb_per_s);
    for (const auto& d : f.decode) std::printf(" %10.2f %6.2f", d.gb_per_s, d.gb_per_s / r.copy_gb_per_s);
    std::printf("\n");
  }
}

}  // namespace

void add_bench_commands(CLI::App& app, CommandContext&) {
  CLI::App* bench_cmd = app.add_subcommand("bench", "Benchmarks reported against bounds measured in the same run");
  bench_cmd->require_subcommand(1);
  CLI::App* kernels = bench_cmd->add_subcommand(
      "kernels", "Per KV format: quantize/dequantize GB/s and one-thread fused decode GB/s vs copy bandwidth");
  auto flags = std::make_shared<BenchFlags>();
  auto as_json = std::make_shared<bool>(false);
  kernels->add_option("--formats", flags->formats, "Comma-separated formats (default: all registered)");
  kernels->add_option("--tokens", flags->tokens, "Comma-separated context lengths for decode (default 4096,32768)");
  kernels->add_option("--min-time", flags->min_time, "Minimum seconds per measurement (default 0.2)");
  kernels->add_flag("--json", *as_json, "Print one JSON object");
  kernels->callback([flags, as_json] { run_kernels(*flags, *as_json); });
}

}  // namespace kvgate::harness
