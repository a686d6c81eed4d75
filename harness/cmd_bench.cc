// `kvgate bench kernels`: quantize, dequantize and one-thread fused decode throughput per KV
// format, each next to the copy bandwidth measured in the same run (docs/design.md,
// "Performance": a ratio against a bound, never a bare number).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/kernel_bench.h"
#include "kernels/kv_config.h"
#include "harness/backend.h"
#include "harness/commands.h"
#include "harness/model_bench.h"
#if defined(KVGATE_HAVE_GPU_RUNTIME)
#include "kernels/gpu/gpu_bench.h"
#include "kernels/gpu/gpu_convert.h"
#include "kernels/gpu/gpu_kv.h"
#endif

namespace kvgate::harness {
namespace {

struct BenchFlags {
  std::string formats;  // comma separated; empty = all
  std::string tokens = "4096,32768";
  double min_time = 0.2;
  std::string backend = "cpu";
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> parse_tokens(const std::string& list) {
  std::vector<int64_t> tokens;
  for (const std::string& t : split_commas(list)) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != t.size() || v < 1)
      throw_usage_error("bench kernels: --tokens '" + echo_user_text(t) + "' is not a positive integer");
    tokens.push_back(v);
  }
  if (tokens.empty()) throw_usage_error("bench kernels: --tokens needs at least one length");
  return tokens;
}

// The GPU kernels of this build: decode attention per format over the paged device cache
// (kernels/gpu/gpu_bench.h), against the device copy bandwidth measured now.
void run_kernels_gpu(const BenchFlags& flags, bool as_json) {
  check_backend(flags.backend);
#if defined(KVGATE_HAVE_GPU_RUNTIME)
  namespace gpu = kernels::gpu;
  std::vector<kernels::FormatId> formats;
  for (const std::string& name : split_commas(flags.formats)) {
    const auto f = gpu::kv_format_named(name);
    if (!f) throw_usage_error("bench kernels: no GPU kernel for KV format '" + echo_user_text(name) + "'");
    formats.push_back(*f);
  }
  if (formats.empty())
    for (kernels::FormatId f : gpu::kv_formats())
      if (!gpu::is_kivi_value(f)) formats.push_back(f);  // KIVI once: its key/value pair
  const std::vector<int64_t> tokens = parse_tokens(flags.tokens);
  constexpr int kIterations = 50;
  const double copy = gpu::device_copy_gbps(size_t{1} << 30, 20);
  const gpu::DecodeBenchShape shape;
  std::vector<std::vector<gpu::DecodeBenchResult>> rows;
  for (kernels::FormatId f : formats) {
    rows.emplace_back();
    for (int64_t t : tokens) rows.back().push_back(gpu::bench_decode_attention(f, static_cast<int>(t), kIterations, shape));
  }
  if (as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& per_format : rows) {
      nlohmann::json decode = nlohmann::json::array();
      for (const auto& r : per_format)
        decode.push_back({{"tokens", r.tokens}, {"us_per_step", r.us_per_step}, {"gb_per_s", r.kv_gb_per_s},
                          {"ratio_to_copy", r.kv_gb_per_s / copy}});
      const auto& first = per_format.front();
      out.push_back({{"format", first.label}, {"key", gpu::kv_format_name(first.key)},
                     {"value", gpu::kv_format_name(first.value)}, {"bits_per_element", first.bits_per_element},
                     {"append_gb_per_s", first.append_gb_per_s}, {"decode", decode}});
    }
    const nlohmann::json j = {
        {"backend", flags.backend},
        {"device", gpu::device_name()},
        {"shape", {{"n_heads", shape.n_heads}, {"n_kv_heads", shape.n_kv_heads}, {"head_dim", shape.head_dim},
                   {"page_tokens", shape.page_tokens}}},
        {"copy", {{"buffer_bytes", size_t{1} << 30}, {"gb_per_s", copy}, {"counts", "bytes read + written"}}},
        {"formats", out}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("device %s (%s); copy bandwidth %.1f GB/s (1 GiB device-to-device, bytes read + written)\n",
              gpu::device_name().c_str(), flags.backend.c_str(), copy);
  std::printf("decode: %d query heads over %d KV heads x head_dim %d, %d-token pages; GB/s = KV bytes read\n",
              shape.n_heads, shape.n_kv_heads, shape.head_dim, shape.page_tokens);
  std::printf("%-10s %6s %9s", "K/V", "bits", "append");
  for (int64_t t : tokens) std::printf(" %10s %6s", ("dec@" + std::to_string(t)).c_str(), "ratio");
  std::printf("\n");
  for (const auto& per_format : rows) {
    std::printf("%-10s %6.3g %9.1f", per_format.front().label.c_str(), per_format.front().bits_per_element,
                per_format.front().append_gb_per_s);
    for (const auto& r : per_format) std::printf(" %10.1f %6.2f", r.kv_gb_per_s, r.kv_gb_per_s / copy);
    std::printf("\n");
  }
#else
  (void)as_json;
#endif
}

void run_kernels(const BenchFlags& flags, bool as_json) {
  if (flags.backend != "cpu") return run_kernels_gpu(flags, as_json);
  kernels::KernelBenchOptions o;
  o.formats = split_commas(flags.formats);
  o.tokens = parse_tokens(flags.tokens);
  if (!(flags.min_time > 0.0 && flags.min_time <= 60.0)) throw_usage_error("bench kernels: --min-time must be in (0, 60] seconds");
  o.min_time_s = flags.min_time;

  // One progress line per measurement on a terminal: a full run takes minutes.
  const bool progress = ::isatty(STDERR_FILENO) != 0;
  const kernels::KernelBenchReport r = kernels::run_kernel_benchmarks(o, [progress](const std::string& name, double gb_per_s) {
    if (progress) std::fprintf(stderr, "  %-40s %8.2f GB/s\n", name.c_str(), gb_per_s);
  });
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

void run_model(const ModelBenchOptions& o, bool as_json) {
  const ModelBenchReport r = run_model_bench(o);
  if (as_json) {
    // Per test, llama-bench's field names (n_prompt, n_gen, n_depth, avg_ts, stddev_ts,
    // samples_ts), so its JSON and this one line up.
    nlohmann::json tests = nlohmann::json::array();
    for (const ModelBenchTest& t : r.tests) {
      const bool prefill = t.n_prompt > 0;
      tests.push_back({{"kv", t.kv}, {"test", t.name}, {"n_prompt", t.n_prompt}, {"n_gen", t.n_gen},
                       {"n_depth", t.n_depth}, {"avg_ts", t.avg_tok_s}, {"stddev_ts", t.stddev_tok_s},
                       {"best_ts", t.best_tok_s}, {"samples_ts", t.samples_tok_s}, {"samples_cpu_s", t.samples_cpu_s},
                       {prefill ? "gflop_per_s" : "gb_per_s", t.rate},
                       {prefill ? "ratio_to_sgemm" : "ratio_to_copy", t.ratio_to_bound}});
    }
    const nlohmann::json j = {{"model", r.model},
                              {"backend", r.backend},
                              {"device", r.device},
                              {"threads", r.threads},
                              {"repetitions", r.repetitions},
                              {"weight_bytes", r.weight_bytes},
                              {"flops_per_token", r.flops_per_token},
                              {"sgemm_gflop_per_s", r.sgemm_gflop_s},
                              {"gemm_bound", r.gemm_bound},
                              {"copy_gb_per_s", r.copy_gb_s},
                              {"tests", tests}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  if (r.backend == "cpu") {
    std::printf("model %s, %d threads, %.1f MB of weights, %.3f GFLOP per token\n", r.model.c_str(), r.threads,
                r.weight_bytes / 1e6, r.flops_per_token / 1e9);
    std::printf("bounds measured now: %s %.1f GFLOP/s, memcpy %.2f GB/s\n", r.gemm_bound.c_str(), r.sgemm_gflop_s,
                r.copy_gb_s);
  } else {
    std::printf("model %s on %s (%s), %.1f MB of weights on the device (as stored), %.3f GFLOP per token\n",
                r.model.c_str(), r.device.c_str(), r.backend.c_str(), r.weight_bytes / 1e6, r.flops_per_token / 1e9);
    std::printf("bounds measured now: %s %.1f GFLOP/s at the FFN shape, device read %.1f GB/s (a read-only kernel)\n",
                r.gemm_bound.c_str(), r.sgemm_gflop_s, r.copy_gb_s);
  }
  std::printf("%d repetitions after one warmup; t/s = mean over repetitions (llama-bench's avg_ts), cpu ms/tok = "
              "process CPU time, all threads; /bound = FLOP/s over the GEMM's for pp, weight + KV bytes read per "
              "second over the copy's for tg\n",
              r.repetitions);
  std::printf("%-20s %-16s %16s %10s %12s %7s\n", "kv config", "test", "t/s", "best t/s", "cpu ms/tok", "/bound");
  for (const ModelBenchTest& t : r.tests) {
    std::vector<double> cpu = t.samples_cpu_s;
    std::sort(cpu.begin(), cpu.end());
    const double tokens = t.n_prompt > 0 ? t.n_prompt : t.n_gen;
    const std::string ts = fmt::format("{:.1f} ± {:.1f}", t.avg_tok_s, t.stddev_tok_s);
    std::printf("%-20s %-16s %16s %10.1f %12.2f %7.2f\n", t.kv.c_str(), t.name.c_str(), ts.c_str(), t.best_tok_s,
                1e3 * cpu[cpu.size() / 2] / tokens, t.ratio_to_bound);
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
  kernels->add_option("--min-time", flags->min_time, "Minimum seconds per measurement (default 0.2; CPU)");
  add_backend_option(kernels, flags->backend);
  kernels->add_flag("--json", *as_json, "Print one JSON object");
  kernels->callback([flags, as_json] { run_kernels(*flags, *as_json); });

  CLI::App* model = bench_cmd->add_subcommand(
      "model", "Prefill and decode tokens/s of the runtime vs sgemm GFLOP/s and copy bandwidth measured now");
  auto mo = std::make_shared<ModelBenchOptions>();
  auto kv_list = std::make_shared<std::string>("f16,q4_0");
  auto model_json = std::make_shared<bool>(false);
  model->add_option("--model", mo->model, "GGUF model (default: the fetched default model)");
  model->add_option("--kv", *kv_list, "Comma-separated KV configs (default f16,q4_0)");
  model->add_option("--contexts", mo->decode_contexts,
                    "Depths of the decode tests: tokens in the cache before the timed steps (default 1024,4096; 0 = "
                    "empty)")
      ->delimiter(',');
  model->add_option("--prefill-tokens", mo->prefill_tokens, "Prompt tokens of the prefill test, from an empty cache (default 512; 0 = none)");
  model->add_option("--decode-steps", mo->decode_steps, "Decode steps timed at each depth (default 16; 0 = none)");
  model->add_option("--repetitions", mo->repetitions, "Timed repetitions of each test, after one warmup (default 1)");
  model->add_option("--threads", mo->threads, "Cores in total, BLAS included (0 = all cores)")->check(thread_count_check());
  add_backend_option(model, mo->backend);
  model->add_flag("--json", *model_json, "Print one JSON object");
  model->callback([mo, kv_list, model_json] {
    mo->kv.clear();
    for (const kernels::KvConfig& c : kernels::parse_kv_config_list(*kv_list)) mo->kv.push_back(c.canonical());
    run_model(*mo, *model_json);
  });
}

}  // namespace kvgate::harness
