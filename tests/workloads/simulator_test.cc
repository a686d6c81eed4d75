#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "core/error.h"
#include "tests/workloads/mooncake_traces.h"
#include "workloads/generate.h"
#include "workloads/presets.h"
#include "workloads/profile.h"
#include "workloads/simulator.h"

namespace kvgate::workloads {
namespace {

// Byte sizes from the format definitions, per KV head and token at head_dim 128: FP8 stores
// 128 + 128 bytes; TurboQuant tq4 keys 64 bytes of codes + a 2-byte fp16 norm, u4 values 64
// bytes + 2-byte scale + 2-byte zero: 134 bytes, 3.8x smaller than f16's 512.
KvCandidate kv_for(const ModelShape& m, const char* name, double bytes_per_head_token) {
  return KvCandidate{name, bytes_per_head_token * m.n_layers * m.n_kv_heads, 0, 1.0};
}

Trace small_trace(const std::string& text) { return parse_trace(text, "t.jsonl"); }

TEST(Simulator, OneRequestFollowsTheRooflineExactly) {
  ModelShape m;
  m.name = "toy";
  m.n_layers = 2, m.n_heads = 4, m.n_kv_heads = 2, m.head_dim = 8, m.hidden = 32;
  m.n_params = 1e6, m.weight_bytes = 2e6;
  const GpuSpec gpu{"toy-gpu", 1e9, 1e9, 1e12};
  const KvCandidate kv{"toy-kv", 64, 16, 1.0};
  SimOptions opt;
  opt.mem_util = 1.0;
  const Trace t = small_trace("{\"timestamp_ms\": 0, \"input_tokens\": 100, \"output_tokens\": 3}\n");
  const SimResult r = simulate_capacity(t, m, gpu, kv, opt);

  const double attn = 4.0 * 2 * 4 * 8;
  auto step = [&](double tokens, double pairs, double kv_tokens) {
    return std::max((2 * 1e6 * tokens + attn * pairs) / 1e12, (2e6 + 64 * kv_tokens) / 1e9);
  };
  const double prefill = step(100, 100 * (0 + 101.0 / 2), 200);
  const double decode1 = step(1, 101, 102);  // context 100, attends over 101
  const double decode2 = step(1, 102, 103);
  ASSERT_EQ(r.completed, 1u);
  EXPECT_DOUBLE_EQ(r.ttft_s.p50, prefill);
  EXPECT_DOUBLE_EQ(r.makespan_s, prefill + decode1 + decode2);
  EXPECT_DOUBLE_EQ(r.tpot_s.p50, (decode1 + decode2) / 2);
  EXPECT_EQ(r.steps, 3u);
  EXPECT_EQ(r.block_tokens, 16);
  EXPECT_EQ(r.kv_blocks, static_cast<int64_t>((1e9 - 2e6) / (64 * 16)));
  EXPECT_EQ(r.verdict, "weight-bound");  // 2 MB of weights dwarf 6 KB of cache
}

TEST(Simulator, OverheadFactorScalesOnlyTheCacheTraffic) {
  ModelShape m;
  m.name = "toy";
  m.n_layers = 2, m.n_heads = 4, m.n_kv_heads = 2, m.head_dim = 8, m.hidden = 32;
  m.n_params = 1e3, m.weight_bytes = 2e3;
  const GpuSpec gpu{"toy-gpu", 1e12, 1e9, 1e15};
  SimOptions opt;
  opt.mem_util = 1.0;
  const Trace t = small_trace("{\"timestamp_ms\": 0, \"input_tokens\": 100, \"output_tokens\": 2}\n");
  const SimResult plain = simulate_capacity(t, m, gpu, KvCandidate{"kv", 1e4, 0, 1.0}, opt);
  const SimResult slow = simulate_capacity(t, m, gpu, KvCandidate{"kv", 1e4, 0, 2.0}, opt);
  // Memory-bound steps: weights 2e3 B, cache traffic 200 then 102 tokens x 1e4 B, at 1 GB/s.
  EXPECT_DOUBLE_EQ(plain.makespan_s, (2e3 + 200e4) / 1e9 + (2e3 + 102e4) / 1e9);
  EXPECT_DOUBLE_EQ(slow.makespan_s, (2e3 + 2 * 200e4) / 1e9 + (2e3 + 2 * 102e4) / 1e9);
  EXPECT_EQ(slow.verdict, "KV-bound");
  EXPECT_GT(slow.time_kv_s, 0.0);
}

TEST(Simulator, TimeScaleStretchesArrivals) {
  // Two independent requests 10 s apart: at time scale 3 the second arrives at 30 s, and
  // nothing else changes because the GPU is idle in between.
  const Trace t = small_trace(
      "{\"timestamp_ms\": 0, \"input_tokens\": 100, \"output_tokens\": 5}\n"
      "{\"timestamp_ms\": 10000, \"input_tokens\": 100, \"output_tokens\": 5}\n");
  const ModelShape m = find_model_preset("SmolLM2-135M");
  const GpuSpec gpu = find_gpu_preset("H100");
  const KvCandidate kv{"f16", 23040, 16, 1.0};
  SimOptions opt;
  const SimResult base = simulate_capacity(t, m, gpu, kv, opt);
  opt.time_scale = 3;
  const SimResult slow = simulate_capacity(t, m, gpu, kv, opt);
  EXPECT_DOUBLE_EQ(slow.ttft_s.max, base.ttft_s.max);
  EXPECT_NEAR(slow.makespan_s - base.makespan_s, 20.0, 1e-9);
  EXPECT_EQ(base.queue_delay_s.max, 0.0);
}

TEST(Simulator, UnboundedMemoryReachesTheProfilesReuse) {
  AgenticOptions g;
  g.sessions = 12, g.concurrency = 4, g.rounds = 4, g.seed = 3;
  const Trace t = generate_agentic_trace(g);
  const ModelShape m = find_model_preset("Llama-3.1-8B");
  GpuSpec gpu = find_gpu_preset("MI355X");
  const SimResult r = simulate_capacity(t, m, gpu, kv_for(m, "fp8", 256), SimOptions{});
  const PrefixReuse reuse = unbounded_prefix_reuse(t);
  EXPECT_EQ(r.evicted_tokens, 0);
  EXPECT_EQ(r.hit_tokens, reuse.reusable_tokens);
  EXPECT_EQ(r.prompt_tokens, reuse.tokens);
  EXPECT_EQ(r.completed, t.requests.size());
}

TEST(Simulator, IsDeterministic) {
  AgenticOptions g;
  g.sessions = 20, g.concurrency = 8, g.rounds = 3;
  const Trace t = generate_agentic_trace(g);
  const ModelShape m = find_model_preset("Qwen2.5-7B");
  GpuSpec gpu = find_gpu_preset("H100");
  gpu.mem_bytes = 22e9;
  const SimResult a = simulate_capacity(t, m, gpu, kv_for(m, "f16", 512), SimOptions{});
  const SimResult b = simulate_capacity(t, m, gpu, kv_for(m, "f16", 512), SimOptions{});
  EXPECT_EQ(a.hit_tokens, b.hit_tokens);
  EXPECT_EQ(a.evicted_tokens, b.evicted_tokens);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.makespan_s, b.makespan_s);  // bit-identical, not merely close
  EXPECT_EQ(a.ttft_s.p99, b.ttft_s.p99);
}

TEST(Simulator, EvictionForcesRecomputation) {
  // Two sessions alternate; the cache holds one session's prefix at a time.
  std::string text;
  for (int i = 0; i < 6; ++i) {
    const int s = i % 2;
    text += "{\"session\": " + std::to_string(s) + ", \"timestamp_ms\": " + std::to_string(i * 10000) +
            ", \"input_tokens\": 64, \"output_tokens\": 2, \"block_tokens\": 16, \"hash_ids\": [" +
            std::to_string(100 * s + 1) + ", " + std::to_string(100 * s + 2) + ", " + std::to_string(100 * s + 3) +
            ", " + std::to_string(100 * s + 4) + "]}\n";
  }
  const Trace t = small_trace(text);
  ModelShape m = find_model_preset("SmolLM2-135M");
  GpuSpec gpu{"tiny", 0, 1e12, 1e14};
  const KvCandidate kv{"x", 1000, 0, 1.0};
  SimOptions opt;
  opt.mem_util = 1.0;
  gpu.mem_bytes = m.weight_bytes + 5 * 16 * 1000;  // 5 blocks: one 64+2-token request needs 5
  const SimResult small = simulate_capacity(t, m, gpu, kv, opt);
  EXPECT_EQ(small.kv_blocks, 5);
  EXPECT_EQ(small.hit_tokens, 0);
  EXPECT_EQ(small.recomputed_tokens, 4 * 64);  // every visit after the first of each session
  EXPECT_GT(small.evicted_tokens, 0);
  EXPECT_EQ(small.verdict, "KV-bound");

  gpu.mem_bytes = m.weight_bytes + 10 * 16 * 1000;
  const SimResult big = simulate_capacity(t, m, gpu, kv, opt);
  EXPECT_EQ(big.recomputed_tokens, 0);
  EXPECT_EQ(big.hit_tokens, 4 * 64);
}

TEST(Simulator, RequestsLargerThanTheCacheAreRejectedAndWeightsThatDoNotFitSaySo) {
  const Trace t = small_trace(
      "{\"timestamp_ms\": 0, \"input_tokens\": 100000, \"output_tokens\": 1}\n"
      "{\"timestamp_ms\": 5, \"input_tokens\": 10, \"output_tokens\": 1}\n");
  const ModelShape m = find_model_preset("Llama-3.1-8B");
  GpuSpec gpu = find_gpu_preset("H100");
  gpu.mem_bytes = m.weight_bytes + 2e9;
  SimOptions opt;
  opt.mem_util = 1.0;
  const SimResult r = simulate_capacity(t, m, gpu, kv_for(m, "f16", 512), opt);
  EXPECT_EQ(r.rejected, 1u);
  EXPECT_EQ(r.completed, 1u);
  EXPECT_EQ(r.verdict, "KV-bound");

  const ModelShape big = find_model_preset("Llama-3.1-70B");
  const SimResult w = simulate_capacity(t, big, find_gpu_preset("H100"), kv_for(big, "f16", 512), opt);
  EXPECT_FALSE(w.weights_fit);
  EXPECT_EQ(w.verdict, "weight-bound");
  EXPECT_EQ(w.completed, 0u);
  // Tensor parallelism adds the memory back.
  opt.tensor_parallel = 4;
  const SimResult tp = simulate_capacity(t, big, find_gpu_preset("H100"), kv_for(big, "f16", 512), opt);
  EXPECT_TRUE(tp.weights_fit);
  EXPECT_EQ(tp.completed, 2u);
}

TEST(Simulator, BadOptionsAreUsageErrors) {
  const Trace t = small_trace("{\"timestamp_ms\": 0, \"input_tokens\": 10, \"output_tokens\": 1}\n");
  const ModelShape m = find_model_preset("SmolLM2-135M");
  const GpuSpec gpu = find_gpu_preset("H100");
  auto expect_usage = [&](SimOptions o, KvCandidate kv) {
    try {
      simulate_capacity(t, m, gpu, kv, o);
      ADD_FAILURE() << "expected a usage error";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << e.what();
    }
  };
  const KvCandidate ok{"f16", 1000, 16, 1.0};
  SimOptions o;
  o.mem_util = 1.5;
  expect_usage(o, ok);
  o = {};
  o.time_scale = 0;
  expect_usage(o, ok);
  o = {};
  o.max_batch_tokens = 10;
  expect_usage(o, ok);
  expect_usage({}, KvCandidate{"bad", 0, 0, 1.0});
  expect_usage({}, KvCandidate{"bad", 100, 0, -1.0});
}

// AMD's ROCm TurboQuant study: 100 agentic conversations, 32 concurrent. With memory sized so
// FP8 cannot keep the 32 sessions resident but the 3.8x-smaller TurboQuant config can, FP8
// falls off a cliff: its cached prefixes are evicted between rounds, every round recomputes the
// whole context, the queue grows and TTFT goes to seconds.
AgenticOptions cliff_workload() {
  AgenticOptions g;
  g.sessions = 100, g.concurrency = 32, g.rounds = 6;
  g.system_tokens = 2000, g.session_prefix_tokens = 4500;
  g.input_tokens = 600, g.output_tokens = 200;
  g.round_interval_s = 30, g.seed = 7;
  return g;
}

TEST(Simulator, Fp8FallsOffTheCliffWhereTurboQuantStaysResident) {
  const Trace t = generate_agentic_trace(cliff_workload());
  const ModelShape m = find_model_preset("Llama-3.1-70B");
  const GpuSpec gpu = find_gpu_preset("MI300X");
  const SimResult fp8 = simulate_capacity(t, m, gpu, kv_for(m, "fp8", 256), SimOptions{});
  const SimResult tq = simulate_capacity(t, m, gpu, kv_for(m, "tq4/4", 134), SimOptions{});
  // The sizing premise: FP8's cache is smaller than 32 sessions at their mid-session context;
  // TurboQuant's keeps every session resident, so nothing it computed is ever computed again.
  EXPECT_LT(fp8.kv_token_capacity, 32 * (2000 + 4500 + 3 * (600 + 200)));
  EXPECT_EQ(tq.recomputed_tokens, 0);

  EXPECT_LT(fp8.hit_rate, 0.45) << fp8.verdict_reason;
  EXPECT_GT(tq.hit_rate, 0.8) << tq.verdict_reason;
  EXPECT_GT(fp8.ttft_s.p50, 2.0);
  EXPECT_LT(tq.ttft_s.p50, 0.5);
  EXPECT_LT(tq.ttft_s.p95, 1.0);
  EXPECT_GT(fp8.recomputed_tokens, 0);
  EXPECT_EQ(fp8.verdict, "KV-bound");
  EXPECT_EQ(fp8.completed, t.requests.size());
  EXPECT_EQ(tq.completed, t.requests.size());
}

// More cache can only help: hit rate never drops as the KV config gets smaller or memory
// larger. Checked over a grid of configs and memory sizes on generated and real traffic.
void expect_monotone_hit_rate(const Trace& t, const ModelShape& m, GpuSpec gpu, const std::vector<double>& mem_gb) {
  const double per_head_token[] = {1024, 512, 256, 134, 100};  // f32, f16, fp8, tq4/4, tq3/3
  for (double mem : mem_gb) {
    gpu.mem_bytes = mem * 1e9;
    double previous = -1;
    for (double b : per_head_token) {
      const SimResult r = simulate_capacity(t, m, gpu, kv_for(m, "x", b), SimOptions{});
      EXPECT_GE(r.hit_rate, previous) << "memory " << mem << " GB, " << b << " bytes/head/token";
      previous = r.hit_rate;
    }
  }
  for (double b : per_head_token) {
    double previous = -1;
    for (double mem : mem_gb) {
      gpu.mem_bytes = mem * 1e9;
      const SimResult r = simulate_capacity(t, m, gpu, kv_for(m, "x", b), SimOptions{});
      EXPECT_GE(r.hit_rate, previous) << "memory " << mem << " GB, " << b << " bytes/head/token";
      previous = r.hit_rate;
    }
  }
}

TEST(Simulator, HitRateNeverDropsWithMoreCacheOnGeneratedTraffic) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    AgenticOptions g = cliff_workload();
    g.seed = seed;
    g.sessions = 48;
    expect_monotone_hit_rate(generate_agentic_trace(g), find_model_preset("Llama-3.1-8B"), find_gpu_preset("H100"),
                             {20, 24, 28, 34, 45, 60, 80});
  }
}

TEST(Simulator, HitRateNeverDropsWithMoreCacheOnTheMooncakeSample) {
  const Trace t = load_trace(testing::kMooncakeSample);
  const ModelShape m = find_model_preset("Llama-3.1-8B");
  GpuSpec gpu = find_gpu_preset("H200");
  const std::vector<double> mem_gb = {18, 20, 24, 28, 34, 45, 80};
  expect_monotone_hit_rate(t, m, gpu, mem_gb);
  // The memory points span real cache pressure, or the monotonicity above would hold trivially.
  gpu.mem_bytes = mem_gb.front() * 1e9;
  const double tight = simulate_capacity(t, m, gpu, kv_for(m, "f16", 512), SimOptions{}).hit_rate;
  gpu.mem_bytes = mem_gb.back() * 1e9;
  const double roomy = simulate_capacity(t, m, gpu, kv_for(m, "f16", 512), SimOptions{}).hit_rate;
  EXPECT_LT(tight, roomy);
}

TEST(Simulator, HitRateNeverDropsWithMoreCacheOnTheMooncakeTrace) {
  if (!testing::have_real_mooncake()) GTEST_SKIP() << testing::real_mooncake_absent("the simulator's hit-rate monotonicity");
  const Trace t = load_trace(testing::kMooncakeReal);
  expect_monotone_hit_rate(t, find_model_preset("Llama-3.1-8B"), find_gpu_preset("H200"), {30, 45, 80, 141});
}

}  // namespace
}  // namespace kvgate::workloads
