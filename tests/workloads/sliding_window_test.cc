// Sliding-window models in the capacity planner: per-sequence KV bytes (global layers x context
// + local layers x min(context, window)) and the simulator's per-request window reservation.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "kernels/kv_config.h"
#include "workloads/presets.h"
#include "workloads/simulator.h"

namespace kvgate::workloads {
namespace {

TEST(SlidingWindowCapacity, Gemma3PresetHoldsOnlyTheWindowInLocalLayers) {
  const ModelShape m = find_model_preset("Gemma-3-27B");
  ASSERT_EQ(m.layer_swa.size(), 62u);
  EXPECT_EQ(m.sliding_window, 1024);
  const auto f16 = kernels::parse_kv_config("f16");
  // Per layer and token: 16 KV heads x 128 x (K + V) x 2 bytes = 8192; 10 global layers, 52 local.
  EXPECT_DOUBLE_EQ(window_bytes_per_token(m, f16), 52.0 * 8192);
  EXPECT_DOUBLE_EQ(kv_bytes_for_context(m, f16, 32768), (10.0 * 32768 + 52.0 * 1024) * 8192);
  EXPECT_DOUBLE_EQ(kv_bytes_for_context(m, f16, 500), 62.0 * 500 * 8192);
  // A model without a window: every layer keeps every token.
  const ModelShape llama = find_model_preset("Llama-3.1-8B");
  EXPECT_DOUBLE_EQ(window_bytes_per_token(llama, f16), 0.0);
  EXPECT_DOUBLE_EQ(kv_bytes_for_context(llama, f16, 1000), 1000.0 * 32 * 8 * 128 * 2 * 2);
}

TEST(SlidingWindowCapacity, ARequestReservesOnlyItsWindowInLocalLayers) {
  ModelShape m;
  m.name = "toy-swa";
  m.n_layers = 6, m.n_heads = 2, m.n_kv_heads = 1, m.head_dim = 8, m.hidden = 16;
  m.n_params = 500, m.weight_bytes = 1000;
  // 50 kB of cache after the weights.
  const GpuSpec gpu{"toy-gpu", 51000, 1e9, 1e12};
  SimOptions opt;
  opt.mem_util = 1.0;
  const Trace t = parse_trace("{\"timestamp_ms\": 0, \"input_tokens\": 1000, \"output_tokens\": 1}\n", "t.jsonl");
  // f16, 32 bytes per layer and token: 192 in all, 160 of them in the 5 local layers.
  KvCandidate full{"f16", 192, 16, 1.0};
  const SimResult without = simulate_capacity(t, m, gpu, full, opt);
  EXPECT_EQ(without.kv_blocks, 50000 / (192 * 16));
  EXPECT_EQ(without.rejected, 1u);  // 63 blocks of 16 tokens needed
  KvCandidate windowed = full;
  windowed.window_bytes_per_token = 160;
  windowed.window = 16;
  const SimResult with = simulate_capacity(t, m, gpu, windowed, opt);
  EXPECT_EQ(with.kv_blocks, 50000 / (32 * 16));
  EXPECT_EQ(with.completed, 1u);
  EXPECT_EQ(with.sliding_window, 16);
  EXPECT_DOUBLE_EQ(with.kv_window_bytes_per_token, 160);
  // Every layer in a window is not something the block model can represent.
  windowed.window_bytes_per_token = 192;
  EXPECT_THROW(simulate_capacity(t, m, gpu, windowed, opt), Error);
}

}  // namespace
}  // namespace kvgate::workloads
