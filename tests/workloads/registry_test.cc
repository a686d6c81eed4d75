// The capacity simulator sizes a KV candidate from the registry's codecs (KvConfig's bytes per
// token), so a registered format (tests/kernels/toy_format.cc, linked into this binary too)
// needs nothing else to be simulated.
#include <gtest/gtest.h>

#include "kernels/kv_config.h"
#include "tests/kernels/toy_format.h"
#include "workloads/simulator.h"
#include "workloads/trace.h"

namespace kvgate::workloads {
namespace {

TEST(SimulatorRegistry, ARegisteredFormatSizesItsCandidate) {
  const kernels::KvConfig config = kernels::parse_kv_config(std::string(kernels::testing::kToyFormatName) + "/q8_0");
  ModelShape m;
  m.name = "toy";
  m.n_layers = 2, m.n_heads = 4, m.n_kv_heads = 2, m.head_dim = 32, m.hidden = 128;
  m.n_params = 1e6, m.weight_bytes = 2e6;
  const kernels::KvShape shape{m.n_layers, m.n_kv_heads, m.head_dim};
  // Per layer and KV head: toy_i16 keys [f32 scale][32 x int16] = 68 bytes, q8_0 values 34.
  const double bytes = config.bytes_per_token(shape);
  EXPECT_DOUBLE_EQ(bytes, 2.0 * 2.0 * (68.0 + 34.0));

  KvCandidate kv;
  kv.name = config.canonical();
  kv.bytes_per_token = bytes;
  kv.bits_per_element = config.bits_per_element(shape);
  const GpuSpec gpu{"toy-gpu", 1e9, 1e9, 1e12};
  SimOptions opt;
  opt.mem_util = 1.0;
  const Trace t = parse_trace("{\"timestamp_ms\": 0, \"input_tokens\": 100, \"output_tokens\": 3}\n", "t.jsonl");
  const SimResult r = simulate_capacity(t, m, gpu, kv, opt);
  EXPECT_EQ(r.kv_name, "toy_i16/q8_0:rot=wht");  // q8_0 values rotate as in llama.cpp
  EXPECT_DOUBLE_EQ(r.kv_bytes_per_token, bytes);
  EXPECT_EQ(r.kv_blocks, static_cast<int64_t>((1e9 - 2e6) / (bytes * r.block_tokens)));
  EXPECT_EQ(r.completed, 1u);
}

}  // namespace
}  // namespace kvgate::workloads
