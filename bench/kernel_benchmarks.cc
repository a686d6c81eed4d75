#include "bench/kernel_benchmarks.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include <benchmark/benchmark.h>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/kv_format.h"
#include "kernels/paged_kv_cache.h"

namespace kvgate::bench {
namespace {

namespace kn = kvgate::kernels;

// Tokens quantized per (de)quantize iteration: 2 MiB of floats at head_dim 128, so the
// measurement is of the codec, not of DRAM.
constexpr int64_t kCodecTokens = 4096;

std::vector<float> gaussian(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(rng.normal());
  return x;
}

size_t copy_buffer_bytes() {
  // Twice the last-level cache, so the copy streams from DRAM; at least 64 MiB, at most 1 GiB.
  const long llc = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  const size_t want = llc > 0 ? 2 * static_cast<size_t>(llc) : size_t{64} << 20;
  return std::clamp(want, size_t{64} << 20, size_t{1} << 30);
}

// Storage one decode step reads for a role: quantized groups plus the f16 window.
double role_bytes(const kn::Codec& c, int64_t tokens) {
  const int64_t g = c.token_group(), r = c.residual_tokens();
  const int64_t quantized = (tokens > r ? (tokens - r) / g : 0) * g;
  return static_cast<double>(quantized) * c.bytes_per_token() + static_cast<double>(tokens - quantized) * c.head_dim() * 2.0;
}

// The cache under a decode benchmark is built once per (pair, tokens) and reused across
// Google Benchmark's repeated calls; only one is alive at a time.
struct DecodeFixture {
  std::string id;
  std::unique_ptr<kn::PagedKvCache> cache;
  kn::SeqId seq = 0;
  std::vector<float> q, out;
};
std::unique_ptr<DecodeFixture>& current_fixture() {
  static std::unique_ptr<DecodeFixture> fixture;
  return fixture;
}

DecodeFixture& decode_fixture(const KernelBenchOptions& o, const kn::LayerFormats& lf, int64_t tokens, const std::string& id) {
  auto& f = current_fixture();
  if (f && f->id == id) return *f;
  f.reset();
  auto fx = std::make_unique<DecodeFixture>();
  fx->id = id;
  const int64_t pages = (tokens + o.page_tokens - 1) / o.page_tokens;
  fx->cache = std::make_unique<kn::PagedKvCache>(std::vector<kn::LayerFormats>{lf},
                                                 kn::PagedKvCacheShape{o.n_kv_heads, o.head_dim, o.page_tokens, pages});
  fx->seq = fx->cache->create_sequence();
  constexpr int64_t kChunk = 1024;
  for (int64_t t = 0; t < tokens; t += kChunk) {
    const int64_t n = std::min(kChunk, tokens - t);
    const auto k = gaussian(static_cast<size_t>(n) * o.n_kv_heads * o.head_dim, 1000 + t);
    const auto v = gaussian(k.size(), 2000 + t);
    fx->cache->append(fx->seq, 0, k.data(), v.data(), n);
  }
  fx->q = gaussian(static_cast<size_t>(o.n_heads) * o.head_dim, 7);
  fx->out.assign(fx->q.size(), 0.0f);
  f = std::move(fx);
  return *f;
}

using Targets = std::map<std::string, double*>;

void register_all(const KernelBenchOptions& o, KernelBenchReport& report, Targets& targets) {
  if (o.n_kv_heads <= 0 || o.n_heads <= 0 || o.n_heads % o.n_kv_heads != 0)
    throw_usage_error("bench kernels: query heads must be a positive multiple of KV heads");
  for (int64_t t : o.tokens)
    if (t < 1 || t > (int64_t{1} << 20)) throw_usage_error("bench kernels: --tokens values must be in 1..1048576");
  std::vector<const kn::FormatInfo*> formats;
  if (o.formats.empty()) {
    formats.assign(kn::all_formats().begin(), kn::all_formats().end());
  } else {
    for (const std::string& name : o.formats) {
      const kn::FormatInfo* f = kn::find_format(name);
      if (!f) throw_usage_error("bench kernels: unknown format '" + name + "'; valid formats: " + kn::format_names_joined());
      formats.push_back(f);
    }
  }
  report.options = o;
  report.copy_buffer_bytes = copy_buffer_bytes();
  report.formats.clear();
  report.formats.reserve(formats.size());  // targets point into it: no reallocation after this
  const kn::FormatInfo* f16 = kn::find_format("f16");

  const size_t copy_bytes = report.copy_buffer_bytes;
  targets["copy"] = &report.copy_gb_per_s;
  benchmark::RegisterBenchmark("copy", [copy_bytes](benchmark::State& state) {
    std::vector<uint8_t> src(copy_bytes, 1), dst(copy_bytes, 0);
    for (auto _ : state) {
      std::memcpy(dst.data(), src.data(), copy_bytes);
      benchmark::DoNotOptimize(dst.data());
      benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(copy_bytes));
  })->MinTime(o.min_time_s);

  for (const kn::FormatInfo* f : formats) {
    const auto codec = std::shared_ptr<kn::Codec>(kn::make_codec(*f, o.head_dim));
    FormatResult& r = report.formats.emplace_back();
    r.format = std::string(f->name);
    r.bits_per_element = codec->bits_per_element();
    const kn::LayerFormats lf{{f->for_keys ? f : f16, {}}, {f->for_values ? f : f16, {}}};
    r.key = std::string(lf.key.format->name);
    r.value = std::string(lf.value.format->name);

    const int64_t groups = kCodecTokens / codec->token_group();
    const int64_t float_bytes = groups * codec->token_group() * o.head_dim * 4;
    // Filled on first use, so benchmarks a --benchmark_filter skips cost nothing.
    auto input = std::make_shared<std::vector<float>>();
    auto packed = std::make_shared<std::vector<uint8_t>>();
    auto prepare = [=] {
      if (!input->empty()) return;
      *input = gaussian(static_cast<size_t>(float_bytes / 4), 42);
      packed->resize(static_cast<size_t>(groups) * codec->group_bytes());
      for (int64_t g = 0; g < groups; ++g)
        codec->quantize(input->data() + g * codec->token_group() * codec->head_dim(), packed->data() + g * codec->group_bytes());
    };

    const std::string qname = "quantize/" + r.format;
    targets[qname] = &r.quantize_gb_per_s;
    benchmark::RegisterBenchmark(qname.c_str(), [=](benchmark::State& state) {
      prepare();
      const size_t in_stride = static_cast<size_t>(codec->token_group()) * codec->head_dim();
      for (auto _ : state) {
        for (int64_t g = 0; g < groups; ++g)
          codec->quantize(input->data() + g * in_stride, packed->data() + g * codec->group_bytes());
        benchmark::ClobberMemory();
      }
      state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * float_bytes);
    })->MinTime(o.min_time_s);

    const std::string dname = "dequantize/" + r.format;
    targets[dname] = &r.dequantize_gb_per_s;
    benchmark::RegisterBenchmark(dname.c_str(), [=](benchmark::State& state) {
      prepare();
      std::vector<float> output_buffer(input->size());
      float* output = output_buffer.data();
      const size_t out_stride = static_cast<size_t>(codec->token_group()) * codec->head_dim();
      for (auto _ : state) {
        for (int64_t g = 0; g < groups; ++g)
          codec->dequantize(packed->data() + g * codec->group_bytes(), output + g * out_stride);
        benchmark::DoNotOptimize(output);
        benchmark::ClobberMemory();
      }
      state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * float_bytes);
    })->MinTime(o.min_time_s);

    const auto kc = kn::make_codec(*lf.key.format, o.head_dim);
    const auto vc = kn::make_codec(*lf.value.format, o.head_dim);
    r.decode.resize(o.tokens.size());
    for (size_t i = 0; i < o.tokens.size(); ++i) {
      const int64_t tokens = o.tokens[i];
      DecodeResult& d = r.decode[i];
      d.tokens = tokens;
      d.kv_bytes = (role_bytes(*kc, tokens) + role_bytes(*vc, tokens)) * o.n_kv_heads;
      const std::string name = "decode/" + r.key + "/" + r.value + "/" + std::to_string(tokens);
      targets[name] = &d.gb_per_s;
      const double kv_bytes = d.kv_bytes;
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& state) {
        DecodeFixture& fx = decode_fixture(o, lf, tokens, name);
        for (auto _ : state) {
          // One thread, as a single decode stream of one layer would run on one core.
          kn::decode_attention(*fx.cache, fx.seq, 0, {o.n_heads}, fx.q.data(), fx.out.data(), nullptr);
          benchmark::DoNotOptimize(fx.out.data());
        }
        state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * kv_bytes));
      })->MinTime(o.min_time_s);
    }
  }
}

// Collects bytes/s of every run into the report; prints one progress line per run to a terminal.
class Collector : public benchmark::BenchmarkReporter {
 public:
  Collector(const Targets& targets, bool progress) : targets_(targets), progress_(progress) {}
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) {
        if (run.error_occurred) errors_ += run.benchmark_name() + ": " + run.error_message + "\n";
        continue;
      }
      // function_name is the registered name; benchmark_name() appends "/min_time:..." and the like.
      const auto it = targets_.find(run.run_name.function_name);
      const auto c = run.counters.find("bytes_per_second");
      if (it == targets_.end() || c == run.counters.end()) continue;
      *it->second = c->second.value / 1e9;
      if (progress_) std::fprintf(stderr, "  %-40s %8.2f GB/s\n", it->first.c_str(), *it->second);
    }
  }
  const std::string& errors() const { return errors_; }

 private:
  const Targets& targets_;
  bool progress_;
  std::string errors_;
};

}  // namespace

void register_kernel_benchmarks(const KernelBenchOptions& options, KernelBenchReport& report) {
  Targets targets;
  register_all(options, report, targets);
}

KernelBenchReport run_kernel_benchmarks(const KernelBenchOptions& options) {
  KernelBenchReport report;
  Targets targets;
  benchmark::ClearRegisteredBenchmarks();
  register_all(options, report, targets);
  Collector collector(targets, ::isatty(STDERR_FILENO) != 0);
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::ClearRegisteredBenchmarks();
  current_fixture().reset();
  if (!collector.errors().empty()) throw_internal_error("bench kernels: " + collector.errors());
  return report;
}

}  // namespace kvgate::bench
