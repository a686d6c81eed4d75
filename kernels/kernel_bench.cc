#include "kernels/kernel_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <memory>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/kv_format.h"
#include "kernels/paged_kv_cache.h"

namespace kvgate::kernels {
namespace {

// Tokens quantized per (de)quantize iteration: 2 MiB of floats at head_dim 128, so the
// measurement is of the codec, not of DRAM.
constexpr int64_t kCodecTokens = 4096;

// Tells the compiler that memory behind `p` is read and anything may have been written, so a
// measured loop whose results are never used is not optimized away.
inline void keep_memory(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

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
double role_bytes(const Codec& c, int64_t tokens) {
  const int64_t g = c.token_group(), r = c.residual_tokens();
  const int64_t quantized = (tokens > r ? (tokens - r) / g : 0) * g;
  return static_cast<double>(quantized) * c.bytes_per_token() + static_cast<double>(tokens - quantized) * c.head_dim() * 2.0;
}

// The cache under a decode measurement is built on first use and reused across batches; the
// measurements of one plan share a slot, so only one cache (up to ~1 GB at 32k tokens) is alive.
struct DecodeFixture {
  std::string id;
  std::unique_ptr<PagedKvCache> cache;
  SeqId seq = 0;
  std::vector<float> q, out;
};
using FixtureSlot = std::unique_ptr<DecodeFixture>;

void build_fixture(FixtureSlot& slot, const KernelBenchOptions& o, const LayerFormats& lf, int64_t tokens,
                   const std::string& id) {
  if (slot && slot->id == id) return;
  slot.reset();
  auto fx = std::make_unique<DecodeFixture>();
  fx->id = id;
  const int64_t pages = (tokens + o.page_tokens - 1) / o.page_tokens;
  fx->cache = std::make_unique<PagedKvCache>(std::vector<LayerFormats>{lf},
                                             PagedKvCacheShape{o.n_kv_heads, o.head_dim, o.page_tokens, pages});
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
  slot = std::move(fx);
}

void add_codec_measurements(const KernelBenchOptions& o, FormatResult& r, const std::shared_ptr<Codec>& codec,
                            std::vector<KernelMeasurement>& out) {
  const int64_t groups = kCodecTokens / codec->token_group();
  const int64_t float_bytes = groups * codec->token_group() * o.head_dim * 4;
  const size_t group_floats = static_cast<size_t>(codec->token_group()) * codec->head_dim();
  // Filled on first use, so measurements a --benchmark_filter skips cost nothing.
  auto input = std::make_shared<std::vector<float>>();
  auto packed = std::make_shared<std::vector<uint8_t>>();
  auto output = std::make_shared<std::vector<float>>();
  auto prepare = [=] {
    if (!input->empty()) return;
    *input = gaussian(static_cast<size_t>(float_bytes / 4), 42);
    packed->resize(static_cast<size_t>(groups) * codec->group_bytes());
    for (int64_t g = 0; g < groups; ++g) codec->quantize(input->data() + g * group_floats, packed->data() + g * codec->group_bytes());
    output->assign(input->size(), 0.0f);
  };
  out.push_back({"quantize/" + r.format, static_cast<double>(float_bytes), prepare,
                 [=] {
                   for (int64_t g = 0; g < groups; ++g)
                     codec->quantize(input->data() + g * group_floats, packed->data() + g * codec->group_bytes());
                   keep_memory(packed->data());
                 },
                 {},
                 &r.quantize_gb_per_s});
  out.push_back({"dequantize/" + r.format, static_cast<double>(float_bytes), prepare,
                 [=] {
                   for (int64_t g = 0; g < groups; ++g)
                     codec->dequantize(packed->data() + g * codec->group_bytes(), output->data() + g * group_floats);
                   keep_memory(output->data());
                 },
                 {},
                 &r.dequantize_gb_per_s});
}

double thread_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

std::vector<KernelMeasurement> plan_kernel_benchmarks(const KernelBenchOptions& o, KernelBenchReport& report) {
  if (o.n_kv_heads <= 0 || o.n_heads <= 0 || o.n_heads % o.n_kv_heads != 0)
    throw_usage_error("bench kernels: query heads must be a positive multiple of KV heads");
  for (int64_t t : o.tokens)
    if (t < 1 || t > (int64_t{1} << 20)) throw_usage_error("bench kernels: --tokens values must be in 1..1048576");
  const std::vector<const FormatInfo*> formats = formats_named(o.formats, "bench kernels");
  report.options = o;
  report.copy_buffer_bytes = copy_buffer_bytes();
  report.formats.clear();
  report.formats.reserve(formats.size());  // measurements point into it: no reallocation after this
  const FormatInfo* f16 = find_format("f16");
  std::vector<KernelMeasurement> out;

  const size_t copy_bytes = report.copy_buffer_bytes;
  auto src = std::make_shared<std::vector<uint8_t>>();
  auto dst = std::make_shared<std::vector<uint8_t>>();
  out.push_back({"copy", static_cast<double>(copy_bytes),
                 [=] {
                   if (!src->empty()) return;
                   src->assign(copy_bytes, 1);
                   dst->assign(copy_bytes, 0);
                 },
                 [=] {
                   std::memcpy(dst->data(), src->data(), copy_bytes);
                   keep_memory(dst->data());
                 },
                 [=] {  // up to 2 GiB: not held while the codecs run
                   *src = {};
                   *dst = {};
                 },
                 &report.copy_gb_per_s});

  auto fixture = std::make_shared<FixtureSlot>();
  for (const FormatInfo* f : formats) {
    const auto codec = std::shared_ptr<Codec>(make_codec(*f, o.head_dim));
    FormatResult& r = report.formats.emplace_back();
    r.format = std::string(f->name);
    r.bits_per_element = codec->bits_per_element();
    const LayerFormats lf{{f->for_keys ? f : f16, {}}, {f->for_values ? f : f16, {}}};
    r.key = std::string(lf.key.format->name);
    r.value = std::string(lf.value.format->name);
    add_codec_measurements(o, r, codec, out);

    const auto kc = make_codec(*lf.key.format, o.head_dim);
    const auto vc = make_codec(*lf.value.format, o.head_dim);
    r.decode.resize(o.tokens.size());
    for (size_t i = 0; i < o.tokens.size(); ++i) {
      const int64_t tokens = o.tokens[i];
      DecodeResult& d = r.decode[i];
      d.tokens = tokens;
      d.kv_bytes = (role_bytes(*kc, tokens) + role_bytes(*vc, tokens)) * o.n_kv_heads;
      const std::string name = "decode/" + r.key + "/" + r.value + "/" + std::to_string(tokens);
      out.push_back({name, d.kv_bytes, [=] { build_fixture(*fixture, o, lf, tokens, name); },
                     [=] {
                       // One thread, as a single decode stream of one layer would run on one core.
                       DecodeFixture& fx = **fixture;
                       decode_attention(*fx.cache, fx.seq, 0, {o.n_heads}, fx.q.data(), fx.out.data(), nullptr);
                       keep_memory(fx.out.data());
                     },
                     {},
                     &d.gb_per_s});
    }
  }
  return out;
}

double measure_gb_per_s(const KernelMeasurement& m, double min_time_s) {
  // Google Benchmark's schedule: one iteration, then grow the batch (10x while a batch takes
  // under a tenth of the minimum, else to 1.4x the predicted need) until a batch's CPU time
  // reaches the minimum, or its wall time five times the minimum on a crowded machine.
  constexpr int64_t kMaxIterations = 1'000'000'000'000;
  m.prepare();
  int64_t iterations = 1;
  for (;;) {
    const auto wall_start = std::chrono::steady_clock::now();
    const double cpu_start = thread_cpu_seconds();
    for (int64_t i = 0; i < iterations; ++i) m.iteration();
    const double cpu = thread_cpu_seconds() - cpu_start;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    if (cpu >= min_time_s || wall >= 5 * min_time_s || iterations >= kMaxIterations)
      return m.bytes_per_iteration * static_cast<double>(iterations) / std::max(cpu, 1e-9) / 1e9;
    const double multiplier = cpu / min_time_s > 0.1 ? min_time_s * 1.4 / std::max(cpu, 1e-9) : 10.0;
    const double next = std::max(multiplier * static_cast<double>(iterations), static_cast<double>(iterations) + 1.0);
    iterations = std::min(static_cast<int64_t>(std::llround(next)), kMaxIterations);
  }
}

KernelBenchReport run_kernel_benchmarks(const KernelBenchOptions& options,
                                        const std::function<void(const std::string& name, double gb_per_s)>& on_result) {
  KernelBenchReport report;
  const std::vector<KernelMeasurement> plan = plan_kernel_benchmarks(options, report);
  for (const KernelMeasurement& m : plan) {
    *m.gb_per_s = measure_gb_per_s(m, options.min_time_s);
    if (m.release) m.release();
    if (on_result) on_result(m.name, *m.gb_per_s);
  }
  return report;
}

}  // namespace kvgate::kernels
