#include "harness/model_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "harness/backend.h"
#include "harness/inference.h"
#include "runtime/weights.h"
#if defined(KVGATE_HAVE_GPU_RUNTIME)
#include "kernels/gpu/gpu_kv.h"
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
// The GPU forward's own GEMM kernel on the model's FFN shape, timed around a device sync.
double measure_gpu_gemm_gflop_s(int rows, int cols, int n) {
  namespace gpu = kernels::gpu;
  gpu::DeviceMemory w(sizeof(float) * static_cast<size_t>(rows) * cols), x(sizeof(float) * static_cast<size_t>(n) * cols),
      y(sizeof(float) * static_cast<size_t>(n) * rows);
  std::vector<float> host(static_cast<size_t>(rows) * cols, 0.5f);
  w.upload(host.data(), host.size() * sizeof(float));
  host.assign(static_cast<size_t>(n) * cols, 0.25f);
  x.upload(host.data(), host.size() * sizeof(float));
  gpu::DeviceWeight weight;
  weight.data = w.bytes();
  weight.type = gpu::WeightType::f32;
  weight.rows = rows;
  weight.cols = cols;
  weight.row_bytes = sizeof(float) * static_cast<size_t>(cols);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    gpu::device_synchronize();
    const auto t0 = Clock::now();
    for (int k = 0; k < 10; ++k) gpu::gemm_xwt(x.floats(), n, weight, y.floats());
    gpu::device_synchronize();
    best = std::max(best, 10 * 2.0 * rows * cols * n / seconds_since(t0) / 1e9);
  }
  return best;
}
#endif

}  // namespace

ModelBenchReport run_model_bench(const ModelBenchOptions& o) {
  if (o.prefill_tokens < 1 || o.decode_steps < 1) throw_usage_error("bench model: token counts must be positive");
  LoadedModel lm = load_model(o.model);
  const runtime::Model& model = *lm.model;
  const runtime::ModelArch& a = model.arch();
  const std::unique_ptr<runtime::Engine> engine = make_engine(o.backend, model, o.threads);
  ModelBenchReport r;
  r.model = model.path();
  r.backend = engine->backend();
  r.device = engine->device();
  r.threads = o.threads > 0 ? o.threads : ThreadPool(0).size();
  r.weight_bytes = static_cast<double>(engine->weight_bytes());
  const double E = a.n_embd, F = a.n_ff, Q = static_cast<double>(a.n_heads) * a.head_dim,
               KV = static_cast<double>(a.n_kv_heads) * a.head_dim;
  // q, k, v, o projections + gate, up, down per layer, and the output head.
  r.flops_per_token = 2.0 * (a.n_layers * (E * Q + 2 * E * KV + Q * E + 3 * E * F) + E * a.n_vocab);
  if (r.backend == "cpu") {
    ThreadPool pool(o.threads);
    r.copy_gb_s = measure_copy_gb_s();
    r.sgemm_gflop_s = measure_sgemm_gflop_s(pool, static_cast<int>(a.n_ff), static_cast<int>(a.n_embd), o.prefill_tokens);
  } else {
#if defined(KVGATE_HAVE_GPU_RUNTIME)
    // Bytes read per second, as for the CPU: a device copy reads and writes each byte once.
    r.copy_gb_s = kernels::gpu::device_copy_gbps(size_t{1} << 30, 10) / 2;
    r.sgemm_gflop_s = measure_gpu_gemm_gflop_s(static_cast<int>(a.n_ff), static_cast<int>(a.n_embd), o.prefill_tokens);
#endif
  }

  const int max_ctx = *std::max_element(o.decode_contexts.begin(), o.decode_contexts.end());
  if (max_ctx + o.decode_steps > static_cast<int>(a.n_ctx_train))
    throw_usage_error("bench model: context " + std::to_string(max_ctx) + " exceeds the model's " +
                      std::to_string(a.n_ctx_train));
  std::vector<int32_t> filler(static_cast<size_t>(std::max(max_ctx, o.prefill_tokens)));
  Rng rng(7);
  for (int32_t& t : filler) t = static_cast<int32_t>(100 + rng.below(20000));
  std::vector<float> logits(static_cast<size_t>(a.n_vocab));

  for (const std::string& spec : o.kv) {
    const kernels::KvConfig config = kernels::parse_kv_config(spec);
    const kernels::KvShape shape{static_cast<int>(a.n_layers), static_cast<int>(a.n_kv_heads), static_cast<int>(a.head_dim)};
    ModelBenchRow row;
    row.kv = config.canonical();
    {
      const auto seq = engine->start(config, o.prefill_tokens);
      const auto t0 = Clock::now();
      engine->forward(*seq, std::span<const int32_t>(filler.data(), static_cast<size_t>(o.prefill_tokens)), false,
                      logits.data());
      const double s = seconds_since(t0);
      row.prefill_tok_s = o.prefill_tokens / s;
      row.prefill_gflop_s = row.prefill_tok_s * r.flops_per_token / 1e9;
    }
    for (int ctx : o.decode_contexts) {
      const auto seq = engine->start(config, ctx + o.decode_steps);
      for (int start = 0; start < ctx; start += 512) {
        const int len = std::min(512, ctx - start);
        engine->forward(*seq, std::span<const int32_t>(filler.data() + start, static_cast<size_t>(len)), false,
                        logits.data());
      }
      int32_t tok = 42;
      const auto t0 = Clock::now();
      for (int i = 0; i < o.decode_steps; ++i) engine->forward(*seq, std::span<const int32_t>(&tok, 1), false, logits.data());
      const double per_token = seconds_since(t0) / o.decode_steps;
      row.contexts.push_back(ctx);
      row.decode_tok_s.push_back(1.0 / per_token);
      const double bytes = r.weight_bytes + (ctx + o.decode_steps / 2.0) * config.bytes_per_token(shape);
      row.decode_gb_s.push_back(bytes / per_token / 1e9);
    }
    r.rows.push_back(std::move(row));
  }
  return r;
}

}  // namespace kvgate::harness
