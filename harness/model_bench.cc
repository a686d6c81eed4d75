#include "harness/model_bench.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/cpu_time.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "harness/backend.h"
#include "harness/inference.h"
#include "runtime/weights.h"
#if defined(KVGATE_HAVE_GPU_RUNTIME)
#include "kernels/gpu/gpu_ops.h"
#endif

namespace kvgate::harness {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Best of several copies of a buffer far larger than the last-level cache. Counts bytes read,
// the quantity decode is limited by.
double measure_copy_gb_s() {
  const size_t bytes = size_t{256} << 20;
  std::unique_ptr<char[]> a(new char[bytes]), b(new char[bytes]);
  std::memset(a.get(), 1, bytes);
  std::memset(b.get(), 2, bytes);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.get(), a.get(), bytes);
    best = std::max(best, static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  return best;
}

// The prefill path's own matmul (tiles over the pool, single-threaded sgemm per tile) on F32
// weights of the model's FFN shape, so no dequantization is in the bound.
double measure_sgemm_gflop_s(ThreadPool& pool, int rows, int cols, int n) {
  std::vector<float> w(static_cast<size_t>(rows) * cols), x(static_cast<size_t>(n) * cols), y(static_cast<size_t>(n) * rows);
  Rng rng(1);
  for (float& v : w) v = static_cast<float>(rng.normal());
  for (float& v : x) v = static_cast<float>(rng.normal());
  runtime::WeightMatrix m;
  m.type = runtime::GgmlType::F32;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = sizeof(float) * static_cast<size_t>(cols);
  m.data = reinterpret_cast<const uint8_t*>(w.data());
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    runtime::matmul(pool, m, x.data(), n, y.data());
    best = std::max(best, 2.0 * rows * cols * n / seconds_since(t0) / 1e9);
  }
  return best;
}

#if defined(KVGATE_HAVE_GPU_RUNTIME)
// The prefill bound on a GPU, on the model's FFN shape: one plain cuBLASLt f16 GEMM (what
// PyTorch's a @ w runs, bench/gpu-peers.py) where the build has it; else the project's own GEMM
// on F32 weights, timed around a device sync.
double measure_gpu_gemm_gflop_s(int rows, int cols, int n) {
  namespace gpu = kernels::gpu;
  if (gpu::have_tensor_core_gemm()) {
    double best = 0;
    for (int i = 0; i < 3; ++i) best = std::max(best, gpu::tensor_core_gemm_gflop_s(rows, cols, n, 10));
    return best;
  }
  gpu::DeviceMemory x(sizeof(float) * static_cast<size_t>(n) * cols), y(sizeof(float) * static_cast<size_t>(n) * rows);
  const std::vector<float> host(static_cast<size_t>(rows) * cols, 0.5f);
  const gpu::UploadedWeight w = gpu::upload_weight(gpu::WeightType::f32, reinterpret_cast<const uint8_t*>(host.data()),
                                                   rows, cols, sizeof(float) * static_cast<size_t>(cols));
  const std::vector<float> xs(static_cast<size_t>(n) * cols, 0.25f);
  x.upload(xs.data(), xs.size() * sizeof(float));
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    gpu::device_synchronize();
    const auto t0 = Clock::now();
    for (int k = 0; k < 10; ++k) gpu::gemm_xwt(x.floats(), n, w.view, y.floats());
    gpu::device_synchronize();
    best = std::max(best, 10 * 2.0 * rows * cols * n / seconds_since(t0) / 1e9);
  }
  return best;
}
#endif

}  // namespace

namespace {

// Random tokens as llama-bench uses (uniform over the vocabulary), from a fixed seed.
std::vector<int32_t> random_tokens(Rng& rng, size_t n, uint32_t vocab) {
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.below(vocab));
  return tokens;
}

void summarize(ModelBenchTest& t) {
  const double n = static_cast<double>(t.samples_tok_s.size());
  double sum = 0, sq = 0;
  for (double v : t.samples_tok_s) sum += v;
  t.avg_tok_s = sum / n;
  for (double v : t.samples_tok_s) sq += (v - t.avg_tok_s) * (v - t.avg_tok_s);
  t.stddev_tok_s = n > 1 ? std::sqrt(sq / (n - 1)) : 0.0;
  t.best_tok_s = *std::max_element(t.samples_tok_s.begin(), t.samples_tok_s.end());
}

}  // namespace

ModelBenchReport run_model_bench(const ModelBenchOptions& o) {
  if (o.prefill_tokens < 0 || o.decode_steps < 0) throw_usage_error("bench model: token counts must not be negative");
  if (o.prefill_tokens == 0 && (o.decode_steps == 0 || o.decode_contexts.empty()))
    throw_usage_error("bench model: nothing to measure (no prefill tokens and no decode steps)");
  if (o.repetitions < 1) throw_usage_error("bench model: --repetitions must be at least 1");
  for (int d : o.decode_contexts)
    if (d < 0) throw_usage_error("bench model: a decode context (depth) must not be negative");
  LoadedModel lm = load_model(o.model);
  const runtime::Model& model = *lm.model;
  const runtime::ModelArch& a = model.arch();
  const std::unique_ptr<runtime::Backend> backend = make_backend(o.backend, model, o.threads);
  ModelBenchReport r;
  r.model = model.path();
  r.backend = backend->name();
  r.device = backend->device();
  r.threads = o.threads > 0 ? o.threads : ThreadPool(0).size();
  r.repetitions = o.repetitions;
  r.weight_bytes = static_cast<double>(backend->weight_bytes());
  const double E = a.n_embd, F = a.n_ff, Q = static_cast<double>(a.n_heads) * a.head_dim,
               KV = static_cast<double>(a.n_kv_heads) * a.head_dim;
  // q, k, v, o projections + gate, up, down per layer, and the output head.
  r.flops_per_token = 2.0 * (a.n_layers * (E * Q + 2 * E * KV + Q * E + 3 * E * F) + E * a.n_vocab);
  const int bound_rows = std::max(o.prefill_tokens, 64);
  if (r.backend == "cpu") {
    ThreadPool pool(o.threads);
    r.copy_gb_s = measure_copy_gb_s();
    r.sgemm_gflop_s = measure_sgemm_gflop_s(pool, static_cast<int>(a.n_ff), static_cast<int>(a.n_embd), bound_rows);
    r.gemm_bound = "sgemm (prefill's tiled matmul on F32)";
  } else {
#if defined(KVGATE_HAVE_GPU_RUNTIME)
    // Bytes a read-only kernel reads per second over 1 GiB (far past L2), measured now: the one
    // convention of every GPU table (a copy's rate, read + write, halved, read 2x low).
    r.copy_gb_s = kernels::gpu::device_read_gbps(size_t{1} << 30, 10);
    r.sgemm_gflop_s = measure_gpu_gemm_gflop_s(static_cast<int>(a.n_ff), static_cast<int>(a.n_embd), bound_rows);
    r.gemm_bound = kernels::gpu::have_tensor_core_gemm() ? "cuBLASLt f16 GEMM (tensor cores, f32 accumulation)"
                                                         : "GEMM (the forward's own kernel, F32)";
#endif
  }

  const std::vector<int> depths = o.decode_steps > 0 ? o.decode_contexts : std::vector<int>();
  const int max_depth = depths.empty() ? 0 : *std::max_element(depths.begin(), depths.end());
  if (static_cast<int64_t>(max_depth) + o.decode_steps > static_cast<int64_t>(a.n_ctx_train) ||
      o.prefill_tokens > static_cast<int>(a.n_ctx_train))
    throw_usage_error("bench model: context " + std::to_string(std::max(max_depth + o.decode_steps, o.prefill_tokens)) +
                      " exceeds the model's " + std::to_string(a.n_ctx_train));
  Rng rng(7);
  const std::vector<int32_t> prompt = random_tokens(rng, static_cast<size_t>(o.prefill_tokens), a.n_vocab);
  const std::vector<int32_t> fill = random_tokens(rng, static_cast<size_t>(max_depth), a.n_vocab);
  const std::vector<int32_t> generated = random_tokens(rng, static_cast<size_t>(o.decode_steps), a.n_vocab);
  std::vector<float> logits(static_cast<size_t>(a.n_vocab));
  auto forward = [&](runtime::BackendSequence& seq, const int32_t* tokens, size_t n) {
    backend->forward(seq, std::span<const int32_t>(tokens, n), false, logits.data());
  };

  for (const std::string& spec : o.kv) {
    const kernels::KvConfig config = kernels::parse_kv_config(spec);
    const kernels::KvShape shape{static_cast<int>(a.n_layers), static_cast<int>(a.n_kv_heads), static_cast<int>(a.head_dim)};
    if (o.prefill_tokens > 0) {
      ModelBenchTest t;
      t.kv = config.canonical();
      t.n_prompt = o.prefill_tokens;
      t.name = "pp" + std::to_string(o.prefill_tokens);
      for (int rep = -1; rep < o.repetitions; ++rep) {  // rep -1: the warmup
        const auto seq = backend->start(config, o.prefill_tokens);
        const double cpu0 = process_cpu_seconds();
        const auto t0 = Clock::now();
        forward(*seq, prompt.data(), prompt.size());
        const double s = seconds_since(t0), cpu = process_cpu_seconds() - cpu0;
        if (rep < 0) continue;
        t.samples_tok_s.push_back(o.prefill_tokens / s);
        t.samples_cpu_s.push_back(cpu);
      }
      summarize(t);
      t.rate = t.avg_tok_s * r.flops_per_token / 1e9;
      t.ratio_to_bound = r.sgemm_gflop_s > 0 ? t.rate / r.sgemm_gflop_s : 0.0;
      r.tests.push_back(std::move(t));
    }
    for (int depth : depths) {
      ModelBenchTest t;
      t.kv = config.canonical();
      t.n_gen = o.decode_steps;
      t.n_depth = depth;
      t.name = "tg" + std::to_string(o.decode_steps) + (depth > 0 ? " @ d" + std::to_string(depth) : "");
      for (int rep = -1; rep < o.repetitions; ++rep) {
        const auto seq = backend->start(config, depth + o.decode_steps);
        if (rep < 0) {  // warmup: one step, as llama-bench's
          forward(*seq, generated.data(), 1);
          continue;
        }
        for (int start = 0; start < depth; start += 512)
          forward(*seq, fill.data() + start, static_cast<size_t>(std::min(512, depth - start)));
        const double cpu0 = process_cpu_seconds();
        const auto t0 = Clock::now();
        for (int i = 0; i < o.decode_steps; ++i) forward(*seq, generated.data() + i, 1);
        const double s = seconds_since(t0), cpu = process_cpu_seconds() - cpu0;
        t.samples_tok_s.push_back(o.decode_steps / s);
        t.samples_cpu_s.push_back(cpu);
      }
      summarize(t);
      const double bytes = r.weight_bytes + (depth + o.decode_steps / 2.0) * config.bytes_per_token(shape);
      t.rate = bytes * t.avg_tok_s / 1e9;
      t.ratio_to_bound = r.copy_gb_s > 0 ? t.rate / r.copy_gb_s : 0.0;
      r.tests.push_back(std::move(t));
    }
  }
  return r;
}

}  // namespace kvgate::harness
