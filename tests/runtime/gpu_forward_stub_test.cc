// The GPU forward pass (runtime/gpu_model.cc) over the recording stub of kernels/gpu
// (gpu_stub.h), on the Llama-3.1-8B shape: what one forward asks of the device, without one.
//   - a prefill chunk and a decode step each wait for the device exactly once, for the logits,
//     as the last call (no wait per matmul, no blocking upload of the token ids);
//   - the exact path's flag is reset before and fetched before that wait; raised, the pass is
//     redone on f32 matmuls from the same position (one more wait, not one per matmul);
//   - which matmul path each engine takes, and the residual adds riding on the matmuls.
// The real library's side of the contract (which calls wait) is stated in gpu_ops.h; on a
// device, tests/gpu counts host_waits() around a forward.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/kv_config.h"
#include "runtime/gpu_model.h"
#include "tests/runtime/gpu_stub.h"

namespace kvgate::runtime {
namespace {

// Views of an 8B-shaped model's weights: shapes and types only (the stub never reads bytes).
struct Shape8B {
  ModelArch arch;
  WeightMatrix embedding, output;
  std::vector<float> output_norm, inv_freq;
  std::vector<LayerWeights> layers;

  explicit Shape8B(GgmlType type) {
    arch.arch = "llama";
    arch.n_layers = 32;
    arch.n_heads = 32;
    arch.n_kv_heads = 8;
    arch.head_dim = arch.head_dim_v = 128;
    arch.n_embd = 4096;
    arch.n_ff = 14336;
    arch.n_vocab = 128256;
    arch.n_ctx_train = 131072;
    arch.n_rot = 128;
    const auto matrix = [&](const char* name, int64_t rows, int64_t cols) {
      WeightMatrix w;
      w.name = name;
      w.type = type;
      w.rows = rows;
      w.cols = cols;
      const GgmlTypeTraits* t = find_ggml_type(static_cast<uint32_t>(type));
      w.row_bytes = static_cast<size_t>(cols / t->block_size) * t->block_bytes;
      return w;
    };
    embedding = matrix("token_embd.weight", arch.n_vocab, arch.n_embd);
    output = matrix("output.weight", arch.n_vocab, arch.n_embd);
    output_norm.assign(arch.n_embd, 1.0f);
    inv_freq.assign(arch.n_rot / 2, 1.0f);
    const int64_t E = arch.n_embd, Q = 32 * 128, KV = 8 * 128, F = arch.n_ff;
    for (uint32_t l = 0; l < arch.n_layers; ++l) {
      LayerWeights w;
      w.attn_norm.assign(E, 1.0f);
      w.ffn_norm.assign(E, 1.0f);
      w.wq = matrix("attn_q", Q, E);
      w.wk = matrix("attn_k", KV, E);
      w.wv = matrix("attn_v", KV, E);
      w.wo = matrix("attn_output", E, Q);
      w.w_gate = matrix("ffn_gate", F, E);
      w.w_up = matrix("ffn_up", F, E);
      w.w_down = matrix("ffn_down", E, F);
      layers.push_back(std::move(w));
    }
  }
  GpuModelSource source() const {
    GpuModelSource s;
    s.arch = arch;
    s.n_rot = static_cast<int>(arch.n_rot);
    s.token_embedding = &embedding;
    s.output = &output;
    s.output_norm = &output_norm;
    s.rope_inv_freq = &inv_freq;
    s.layers = &layers;
    return s;
  }
};

struct Recorded {
  int waits = 0;
  int launches = 0;
  bool last_is_the_logits_download = false;
  std::vector<std::string> matmuls;  // detail of each matmul launch
  int truncates = 0;
};

Recorded forward(const GpuModel& model, GpuSequence& seq, int n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = (i * 7919) % 128256;
  std::vector<float> logits(128256);
  gpu_stub::calls().clear();
  model.forward(seq, tokens, false, logits.data());
  Recorded r;
  for (const gpu_stub::Call& c : gpu_stub::calls()) {
    r.waits += c.waits ? 1 : 0;
    r.launches += c.what.rfind("launch:", 0) == 0 ? 1 : 0;
    r.truncates += c.what == "truncate" ? 1 : 0;
    if (c.what == "launch:matmul") r.matmuls.push_back(c.detail);
  }
  r.last_is_the_logits_download = !gpu_stub::calls().empty() && gpu_stub::calls().back().what == "download";
  return r;
}

TEST(GpuForwardStub, PrefillAndDecodeOfThe8BShapeWaitForTheDeviceOnceEach) {
  for (GgmlType type : {GgmlType::F16, GgmlType::Q4_0}) {
    const Shape8B shape(type);
    const auto model = GpuModel::upload(shape.source());
    const auto seq = model->start(kernels::parse_kv_config("q4_0"), 4096);
    const Recorded prefill = forward(*model, *seq, 512);
    EXPECT_EQ(prefill.waits, 1) << ggml_type_name(type) << " prefill";
    EXPECT_TRUE(prefill.last_is_the_logits_download) << ggml_type_name(type);
    const Recorded decode = forward(*model, *seq, 1);
    EXPECT_EQ(decode.waits, 1) << ggml_type_name(type) << " decode";
    EXPECT_TRUE(decode.last_is_the_logits_download) << ggml_type_name(type);
    EXPECT_EQ(seq->length(), 513);
    // A decode step: 4 matmul launches per layer (Q/K/V in one, wo, gate/up in one, w_down) and
    // the head; the residual adds ride on wo and w_down. A prefill chunk: 7 per layer.
    ASSERT_EQ(decode.matmuls.size(), 32u * 4 + 1) << ggml_type_name(type);
    EXPECT_NE(decode.matmuls[0].find("(3 weights)"), std::string::npos) << decode.matmuls[0];
    EXPECT_NE(decode.matmuls[1].find("+="), std::string::npos) << decode.matmuls[1];
    EXPECT_NE(decode.matmuls[2].find("(2 weights)"), std::string::npos) << decode.matmuls[2];
    EXPECT_NE(decode.matmuls[3].find("+="), std::string::npos) << decode.matmuls[3];
    ASSERT_EQ(prefill.matmuls.size(), 32u * 7 + 1) << ggml_type_name(type);
    for (const std::string& m : prefill.matmuls) EXPECT_EQ(m.rfind("exact ", 0), 0u) << m;
    std::printf("%s weights: a decode step queues %d kernel launches (%.1f per layer), a 512-token chunk %d\n",
                ggml_type_name(type), decode.launches, decode.launches / 32.0, prefill.launches);
  }
}

TEST(GpuForwardStub, ARaisedMatmulFlagRedoesThePassInF32OnceFromTheSamePosition) {
  const Shape8B shape(GgmlType::F16);
  const auto model = GpuModel::upload(shape.source());
  const auto seq = model->start(kernels::parse_kv_config("f16"), 4096);
  gpu_stub::raise_matmul_flag(1);
  const Recorded r = forward(*model, *seq, 64);
  EXPECT_EQ(r.waits, 2);  // the first pass's logits, then the redo's
  EXPECT_EQ(r.truncates, 32);  // every layer's cache back to position 0
  EXPECT_EQ(seq->length(), 64);
  ASSERT_EQ(r.matmuls.size(), 2u * (32 * 7 + 1));
  EXPECT_EQ(r.matmuls.front().rfind("exact ", 0), 0u);
  EXPECT_EQ(r.matmuls.back().rfind("f32 ", 0), 0u) << r.matmuls.back();
  // Not raised: no redo.
  const Recorded again = forward(*model, *seq, 64);
  EXPECT_EQ(again.waits, 1);
  EXPECT_EQ(again.truncates, 0);
}

TEST(GpuForwardStub, EachEngineTakesItsMatmulPath) {
  const Shape8B shape(GgmlType::F16);
  const auto model = GpuModel::upload(shape.source());
  struct Case {
    const char* config;
    const char* path;
  };
  for (const Case& c : {Case{"f16", "exact "}, Case{"f16@engine=llama.cpp", "f32 "}, Case{"f16@engine=llama.cpp-cuda", "sixteen_bit "},
                        Case{"f16@engine=vllm-fa3", "sixteen_bit "}}) {
    const auto seq = model->start(kernels::parse_kv_config(c.config), 4096);
    const Recorded r = forward(*model, *seq, 100);
    EXPECT_EQ(r.waits, 1) << c.config;
    for (const std::string& m : r.matmuls) ASSERT_EQ(m.rfind(c.path, 0), 0u) << c.config << ": " << m;
  }
}

}  // namespace
}  // namespace kvgate::runtime
