// The GPU forward pass (runtime/gpu_model.h) against the CPU runtime on the default model: the
// same prompt through both, per KV format. The CPU runtime is itself checked against llama.cpp
// (tests/runtime/golden_forward_test.cc). Skips without a device or the default model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/gpu/gpu_convert.h"
#include "kernels/kv_config.h"
#include "runtime/gpu_model.h"
#include "runtime/model.h"
#include "tests/cli/run_cli.h"
#include "tests/runtime/gguf_writer.h"

namespace kvgate::runtime {
namespace {

std::vector<int32_t> prompt_ids(int n, int vocab) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((1000 + 7919 * i) % vocab);
  return ids;
}

struct RowDiff {
  double max_logprob = 0;  // over each row's top-20 CPU tokens
  int top1_mismatch = 0;
};

double log_sum_exp(const float* row, size_t n) {
  double mx = row[0];
  for (size_t i = 1; i < n; ++i) mx = std::max<double>(mx, row[i]);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(row[i] - mx);
  return mx + std::log(sum);
}

RowDiff compare_rows(const std::vector<float>& cpu, const std::vector<float>& gpu, size_t vocab) {
  RowDiff d;
  for (size_t r = 0; r < cpu.size() / vocab; ++r) {
    const float* a = cpu.data() + r * vocab;
    const float* b = gpu.data() + r * vocab;
    for (size_t i = 0; i < vocab; ++i) EXPECT_FALSE(std::isnan(b[i])) << "row " << r << " token " << i;
    const double la = log_sum_exp(a, vocab), lb = log_sum_exp(b, vocab);
    std::vector<size_t> order(vocab);
    for (size_t i = 0; i < vocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 20, order.end(), [&](size_t x, size_t y) { return a[x] > a[y]; });
    for (int k = 0; k < 20; ++k)
      d.max_logprob = std::max(d.max_logprob, std::fabs((a[order[k]] - la) - (b[order[k]] - lb)));
    const size_t top_b = static_cast<size_t>(std::max_element(b, b + vocab) - b);
    if (top_b != order[0] && a[order[0]] - a[order[1]] > 0.05) ++d.top1_mismatch;
  }
  return d;
}

// A small random Llama written as GGUF (2 layers, embedding 256, 4 heads of 64 over 2 KV heads,
// FFN 512, vocabulary 300), so the GPU forward is checked on machines that cannot fetch the
// default model. Its weights come in several stored types (F32, F16, BF16, Q4_0, Q4_1, Q8_0,
// Q6_K), which the GPU multiplies with as stored. With `llama_cpp_groups`, the matrices that
// share an input share a type (Q4_0 Q/K/V, Q6_K gate/up), as @engine=llama.cpp's input
// rounding needs, and the inputs meet every dot type: q8_0 (Q/K/V), bf16 (output projection),
// q8_K (gate/up), q8_1 (down), f16 (the output head).
std::string write_small_llama(bool llama_cpp_groups = false) {
  using namespace kvgate::testing;
  constexpr uint32_t E = 256, H = 4, KV = 2, D = 64, F = 512, V = 300, L = 2;
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "small-random");
  w.add<uint32_t>("llama.block_count", kU32, L);
  w.add<uint32_t>("llama.context_length", kU32, 1024);
  w.add<uint32_t>("llama.embedding_length", kU32, E);
  w.add<uint32_t>("llama.feed_forward_length", kU32, F);
  w.add<uint32_t>("llama.attention.head_count", kU32, H);
  w.add<uint32_t>("llama.attention.head_count_kv", kU32, KV);
  w.add<float>("llama.rope.freq_base", kF32, 10000.0f);
  w.add<float>("llama.attention.layer_norm_rms_epsilon", kF32, 1e-5f);
  std::vector<std::string> tokens;
  for (uint32_t i = 0; i < V; ++i) {
    std::string token = "t";
    token += std::to_string(i);
    tokens.push_back(token);
  }
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  Rng rng(77);
  auto f32 = [&](size_t n, double mean, double sd) {
    std::vector<uint8_t> bytes(n * 4);
    for (size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(mean + sd * rng.normal());
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
    return bytes;
  };
  auto q8_0 = [&](size_t n, double sd) {  // n / 32 blocks: fp16 scale, 32 int8 codes
    std::vector<uint8_t> bytes;
    for (size_t b = 0; b < n / 32; ++b) {
      const uint16_t d = f32_to_f16(static_cast<float>(sd / 40.0));
      bytes.push_back(static_cast<uint8_t>(d));
      bytes.push_back(static_cast<uint8_t>(d >> 8));
      for (int j = 0; j < 32; ++j) bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(rng.below(161)) - 80));
    }
    return bytes;
  };
  auto half_bits = [&](size_t n, double sd, bool bf16) {
    std::vector<uint8_t> bytes;
    for (size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(sd * rng.normal());
      const uint16_t h = bf16 ? f32_to_bf16(v) : f32_to_f16(v);
      bytes.push_back(static_cast<uint8_t>(h));
      bytes.push_back(static_cast<uint8_t>(h >> 8));
    }
    return bytes;
  };
  auto push_half = [](std::vector<uint8_t>& bytes, float v) {
    const uint16_t h = f32_to_f16(v);
    bytes.push_back(static_cast<uint8_t>(h));
    bytes.push_back(static_cast<uint8_t>(h >> 8));
  };
  // 4-bit codes are uniform over 16 levels (sd 4.6 steps): q4_0 centres them with -8, q4_1 with
  // a block minimum of -7.5 steps.
  auto q4 = [&](size_t n, double sd, bool with_min) {
    std::vector<uint8_t> bytes;
    const float d = static_cast<float>(sd / 4.6);
    for (size_t b = 0; b < n / 32; ++b) {
      push_half(bytes, d);
      if (with_min) push_half(bytes, -7.5f * d);
      for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(rng.below(256)));
    }
    return bytes;
  };
  // Q6_K: random 6-bit codes (sd 18.5 steps) under random 8-bit sub-block scales of 8..15.
  auto q6_k = [&](size_t n, double sd) {
    std::vector<uint8_t> bytes;
    for (size_t b = 0; b < n / 256; ++b) {
      for (int j = 0; j < 192; ++j) bytes.push_back(static_cast<uint8_t>(rng.below(256)));
      for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(8 + rng.below(8)));
      push_half(bytes, static_cast<float>(sd / (18.5 * 11.5)));
    }
    return bytes;
  };
  const double s = 1.0 / std::sqrt(static_cast<double>(E));
  w.add_tensor("token_embd.weight", kTF32, {E, V}, f32(static_cast<size_t>(E) * V, 0.0, 1.0));
  w.add_tensor("output_norm.weight", kTF32, {E}, f32(E, 1.0, 0.1));
  w.add_tensor("output.weight", kTF16, {E, V}, half_bits(static_cast<size_t>(E) * V, 3.0 * s, false));
  for (uint32_t l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor(p + "attn_norm.weight", kTF32, {E}, f32(E, 1.0, 0.1));
    w.add_tensor(p + "attn_q.weight", kTQ4_0, {E, H * D}, q4(static_cast<size_t>(E) * H * D, 2.0 * s, false));
    if (llama_cpp_groups) {
      w.add_tensor(p + "attn_k.weight", kTQ4_0, {E, KV * D}, q4(static_cast<size_t>(E) * KV * D, 2.0 * s, false));
      w.add_tensor(p + "attn_v.weight", kTQ4_0, {E, KV * D}, q4(static_cast<size_t>(E) * KV * D, s, false));
      w.add_tensor(p + "attn_output.weight", kTBF16, {H * D, E}, half_bits(static_cast<size_t>(E) * H * D, s, true));
    } else {
      w.add_tensor(p + "attn_k.weight", kTF32, {E, KV * D}, f32(static_cast<size_t>(E) * KV * D, 0.0, 2.0 * s));
      w.add_tensor(p + "attn_v.weight", kTBF16, {E, KV * D}, half_bits(static_cast<size_t>(E) * KV * D, s, true));
      w.add_tensor(p + "attn_output.weight", kTF32, {H * D, E}, f32(static_cast<size_t>(E) * H * D, 0.0, s));
    }
    w.add_tensor(p + "ffn_norm.weight", kTF32, {E}, f32(E, 1.0, 0.1));
    if (llama_cpp_groups)
      w.add_tensor(p + "ffn_gate.weight", kTQ6_K, {E, F}, q6_k(static_cast<size_t>(E) * F, s));
    else
      w.add_tensor(p + "ffn_gate.weight", kTQ8_0, {E, F}, q8_0(static_cast<size_t>(E) * F, s));
    w.add_tensor(p + "ffn_up.weight", kTQ6_K, {E, F}, q6_k(static_cast<size_t>(E) * F, s));
    w.add_tensor(p + "ffn_down.weight", kTQ4_1, {F, E}, q4(static_cast<size_t>(E) * F, 1.0 / std::sqrt(F), true));
  }
  const std::string path =
      ::testing::TempDir() + (llama_cpp_groups ? "kvgate_small_llama_groups.gguf" : "kvgate_small_llama.gguf");
  write_file(path, w.finish());
  return path;
}

// A 150-token prompt in two chunks (the second attends to the first's cached K/V), all logits,
// then 8 greedy decode steps on a fork: the GPU matches the CPU up to float32 summation order,
// leaves the forked-from sequence alone, and repeats itself bit for bit.
void expect_gpu_matches_cpu(const Model& model, const GpuModel& gpu_model, const char* spec) {
  const kernels::KvConfig config = kernels::parse_kv_config(spec);
  const size_t vocab = model.arch().n_vocab;
  const std::vector<int32_t> ids = prompt_ids(150, static_cast<int>(vocab));
  const std::span<const int32_t> first(ids.data(), 100), second(ids.data() + 100, 50);

  ThreadPool pool(2);
  auto cache = model.make_cache(config, 200);
  const kernels::SeqId seq = cache->create_sequence();
  std::vector<float> cpu(ids.size() * vocab), gpu(ids.size() * vocab, NAN);
  model.forward(pool, *cache, seq, first, true, cpu.data());
  model.forward(pool, *cache, seq, second, true, cpu.data() + 100 * vocab);

  auto gseq = gpu_model.start(config, 200);
  gpu_model.forward(*gseq, first, true, gpu.data());
  gpu_model.forward(*gseq, second, true, gpu.data() + 100 * vocab);
  EXPECT_EQ(gseq->length(), 150);
  const RowDiff prefill = compare_rows(cpu, gpu, vocab);
  std::printf("%s prefill: max top-20 log-prob difference %.5f, top-1 mismatches %d\n", spec, prefill.max_logprob,
              prefill.top1_mismatch);
  EXPECT_LT(prefill.max_logprob, 0.02) << spec;
  EXPECT_EQ(prefill.top1_mismatch, 0) << spec;

  const kernels::SeqId cpu_fork = cache->fork(seq, 150);
  auto gfork = gseq->fork(150);
  std::vector<float> cpu_row(cpu.end() - static_cast<long>(vocab), cpu.end()), gpu_row(vocab);
  std::vector<float> cpu_steps, gpu_steps;
  for (int step = 0; step < 8; ++step) {
    const int32_t tok = static_cast<int32_t>(std::max_element(cpu_row.begin(), cpu_row.end()) - cpu_row.begin());
    model.forward(pool, *cache, cpu_fork, std::span<const int32_t>(&tok, 1), false, cpu_row.data());
    gpu_model.forward(*gfork, std::span<const int32_t>(&tok, 1), false, gpu_row.data());
    cpu_steps.insert(cpu_steps.end(), cpu_row.begin(), cpu_row.end());
    gpu_steps.insert(gpu_steps.end(), gpu_row.begin(), gpu_row.end());
  }
  EXPECT_EQ(gseq->length(), 150);
  EXPECT_EQ(gfork->length(), 158);
  const RowDiff decode = compare_rows(cpu_steps, gpu_steps, vocab);
  EXPECT_LT(decode.max_logprob, 0.02) << spec;
  EXPECT_EQ(decode.top1_mismatch, 0) << spec;

  auto again = gpu_model.start(config, 200);
  std::vector<float> repeat(100 * vocab);
  gpu_model.forward(*again, first, true, repeat.data());
  EXPECT_TRUE(std::equal(repeat.begin(), repeat.end(), gpu.begin())) << spec << ": not deterministic";
}

std::string test_name(const ::testing::TestParamInfo<const char*>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

class GpuSmallModel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (kernels::gpu::device_count() == 0) GTEST_SKIP() << "no " << kernels::gpu::vendor() << " device present";
    model_ = Model::load(write_small_llama());
    gpu_ = GpuModel::upload(*model_);
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<GpuModel> gpu_;
};

TEST_P(GpuSmallModel, MatchesTheCpuRuntime) { expect_gpu_matches_cpu(*model_, *gpu_, GetParam()); }

INSTANTIATE_TEST_SUITE_P(KvConfigs, GpuSmallModel,
                         ::testing::Values("f32", "f16", "bf16", "q8_0", "fp8", "fp8_e5m2", "q4_0/q4_1", "int8_pth",
                                           "int4_pth", "fp8_pth@0=f16", "k8v4", "tq3/4", "tq4:nc/u8", "u2/u3",
                                           "kivi4", "kivi2_k:residual=32/kivi2_v:residual=32", "q5_0/q5_1",
                                           "iq4_nl", "nvfp4", "q8_0:rot=hadamard/q4_0:rot=hadamard", "tq3.5/4",
                                           "tq2.5:outliers=5/4", "tqprod3/4", "tq3:rot=qr/4",
                                           // Engine arithmetic in attention (llama.cpp's CPU engine,
                                           // which also rounds matmul inputs: GpuSmallModelLlamaCpp).
                                           "q4_0@engine=llama.cpp-cuda", "f16@engine=llama.cpp-cuda",
                                           "fp8@engine=vllm-fa3"),
                         test_name);

// @engine=llama.cpp on the device: its attention arithmetic and every matmul input rounded to
// the weights' dot type, against the CPU runtime doing the same. The roundings are the same
// functions on both (checked on the host), so the backends differ by float summation order
// only, except where such a difference moves an input across a rounding boundary.
class GpuSmallModelLlamaCpp : public GpuSmallModel {
 protected:
  void SetUp() override {
    if (kernels::gpu::device_count() == 0) GTEST_SKIP() << "no " << kernels::gpu::vendor() << " device present";
    model_ = Model::load(write_small_llama(true));
    gpu_ = GpuModel::upload(*model_);
  }
};

TEST_P(GpuSmallModelLlamaCpp, MatchesTheCpuRuntime) { expect_gpu_matches_cpu(*model_, *gpu_, GetParam()); }

INSTANTIATE_TEST_SUITE_P(KvConfigs, GpuSmallModelLlamaCpp,
                         ::testing::Values("q8_0@engine=llama.cpp", "q4_1/f16@engine=llama.cpp", "f16@engine=llama.cpp",
                                           "bf16@engine=llama.cpp"),
                         test_name);

// The default model, or the GGUF named by $KVGATE_GPU_TEST_MODEL: ci/gpu-check.sh names the
// bundle's cut-down default model there, since a lent GPU machine cannot fetch the full one.
class GpuDefaultModel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (kernels::gpu::device_count() == 0) GTEST_SKIP() << "no " << kernels::gpu::vendor() << " device present";
    const char* named = std::getenv("KVGATE_GPU_TEST_MODEL");
    if (named && *named) {
      model_ = Model::load(named);
    } else {
      KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
      model_ = Model::load(kvgate::testing::default_model_file());
    }
    gpu_ = GpuModel::upload(*model_);
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<GpuModel> gpu_;
};

TEST_P(GpuDefaultModel, MatchesTheCpuRuntime) { expect_gpu_matches_cpu(*model_, *gpu_, GetParam()); }

INSTANTIATE_TEST_SUITE_P(KvConfigs, GpuDefaultModel,
                         ::testing::Values("f16", "q8_0", "q4_0", "tq3/4", "kivi4", "q8_0@engine=llama.cpp",
                                           "f16@engine=llama.cpp"),
                         test_name);

// A random weight matrix of `type` whose every block scale/minimum is a small finite f16, so
// all its values are finite while codes and K-quant sub-block scales are random bytes.
std::vector<uint8_t> random_weight_bytes(GgmlType type, int rows, int cols, Rng& rng) {
  namespace gpu = kernels::gpu;
  const gpu::WeightType t = gpu_weight_type(type, "probe");
  const int elems = gpu::weight_block_elems(t), block_bytes = gpu::weight_block_bytes(t);
  const size_t blocks = static_cast<size_t>(rows) * (cols / elems);
  std::vector<uint8_t> bytes(blocks * block_bytes);
  auto put_half = [&](uint8_t* at, double v) {
    const uint16_t h = f32_to_f16(static_cast<float>(v));
    at[0] = static_cast<uint8_t>(h);
    at[1] = static_cast<uint8_t>(h >> 8);
  };
  for (size_t b = 0; b < blocks; ++b) {
    uint8_t* block = bytes.data() + b * block_bytes;
    if (elems == 1) {  // one plain float per "block"
      const float v = static_cast<float>(rng.normal());
      if (t == gpu::WeightType::f32) {
        std::memcpy(block, &v, 4);
      } else {
        const uint16_t h = t == gpu::WeightType::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
        block[0] = static_cast<uint8_t>(h);
        block[1] = static_cast<uint8_t>(h >> 8);
      }
      continue;
    }
    for (int j = 0; j < block_bytes; ++j) block[j] = static_cast<uint8_t>(rng.below(256));
    const bool two = t == gpu::WeightType::q4_1 || t == gpu::WeightType::q5_1 || t == gpu::WeightType::q4_k;
    uint8_t* scale = block + (t == gpu::WeightType::q6_k ? 208 : 0);
    put_half(scale, 0.01 + 0.01 * rng.uniform());
    if (two) put_half(scale + 2, -0.05 * rng.uniform());
  }
  return bytes;
}

// The GEMV (up to kGemvMaxTokens rows) and the tiled GEMM against a float64 product of the
// CPU's decoded weights, for every weight type; and the embedding gather bit for bit.
TEST(GpuWeights, GemmAndGatherMatchTheCpuDecodeForEveryType) {
  namespace gpu = kernels::gpu;
  if (gpu::device_count() == 0) GTEST_SKIP() << "no " << gpu::vendor() << " device present";
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                            GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K};
  Rng rng(5);
  const int rows = 77, cols = 768;  // rows: not a multiple of the tile or the warps per block
  for (GgmlType type : types) {
    const std::vector<uint8_t> bytes = random_weight_bytes(type, rows, cols, rng);
    WeightMatrix w;
    w.name = "probe";
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = bytes.size() / rows;
    w.data = bytes.data();
    std::vector<float> dense(static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r) dequantize_weight_row(w, r, dense.data() + static_cast<size_t>(r) * cols);

    gpu::DeviceMemory wmem(bytes.size());
    wmem.upload(bytes.data(), bytes.size());
    gpu::DeviceWeight dw;
    dw.data = wmem.bytes();
    dw.type = gpu_weight_type(type, "probe");
    dw.rows = rows;
    dw.cols = cols;
    dw.row_bytes = w.row_bytes;

    for (int n : {1, 3, gpu::kGemvMaxTokens, gpu::kGemvMaxTokens + 1, 70}) {
      std::vector<float> x(static_cast<size_t>(n) * cols);
      for (float& v : x) v = static_cast<float>(rng.normal());
      gpu::DeviceMemory xd(x.size() * sizeof(float)), yd(static_cast<size_t>(n) * rows * sizeof(float));
      xd.upload(x.data(), x.size() * sizeof(float));
      std::vector<float> poison(static_cast<size_t>(n) * rows, NAN), y(poison.size()), again(poison.size());
      yd.upload(poison.data(), poison.size() * sizeof(float));
      gpu::gemm_xwt(xd.floats(), n, dw, yd.floats());
      yd.download(y.data(), y.size() * sizeof(float));
      gpu::gemm_xwt(xd.floats(), n, dw, yd.floats());
      yd.download(again.data(), again.size() * sizeof(float));
      EXPECT_EQ(std::memcmp(y.data(), again.data(), y.size() * sizeof(float)), 0) << ggml_type_name(type) << " n=" << n;
      for (int t = 0; t < n; ++t)
        for (int r = 0; r < rows; ++r) {
          double want = 0, scale = 0;
          for (int k = 0; k < cols; ++k) {
            const double p = static_cast<double>(dense[static_cast<size_t>(r) * cols + k]) * x[static_cast<size_t>(t) * cols + k];
            want += p;
            scale += std::fabs(p);
          }
          const float got = y[static_cast<size_t>(t) * rows + r];
          ASSERT_TRUE(std::isfinite(got)) << ggml_type_name(type) << " n=" << n << " token " << t << " row " << r;
          ASSERT_LE(std::fabs(got - want), 1e-5 * scale + 1e-30)
              << ggml_type_name(type) << " n=" << n << " token " << t << " row " << r << ": " << got << " vs " << want;
        }
    }

    const std::vector<int32_t> ids = {76, 0, 31, 31, 5};
    gpu::DeviceMemory idd(ids.size() * sizeof(int32_t)), out(ids.size() * cols * sizeof(float));
    idd.upload(ids.data(), ids.size() * sizeof(int32_t));
    gpu::gather_rows(dw, idd.ints(), static_cast<int>(ids.size()), out.floats());
    std::vector<float> got(ids.size() * cols);
    out.download(got.data(), got.size() * sizeof(float));
    for (size_t i = 0; i < ids.size(); ++i)
      EXPECT_EQ(std::memcmp(got.data() + i * cols, dense.data() + static_cast<size_t>(ids[i]) * cols, cols * sizeof(float)), 0)
          << ggml_type_name(type) << " gathered row " << ids[i];
  }
}

// Runs without a device: every weight type the CPU runtime multiplies with has a GPU decode,
// and any other type is a usage error naming the tensor.
TEST(GpuWeightTypes, EveryCpuWeightTypeMapsAndOthersAreUsageErrors) {
  int mapped = 0;
  for (const GgmlTypeTraits& t : ggml_type_table()) {
    if (weight_type_supported(t.type)) {
      EXPECT_NO_THROW(gpu_weight_type(t.type, "w")) << t.name;
      ++mapped;
      continue;
    }
    try {
      gpu_weight_type(t.type, "blk.0.attn_q.weight");
      ADD_FAILURE() << t.name << " mapped";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << t.name;
      EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(mapped, 10);
}

// Runs without a device: the fixtures the GPU comparison relies on are valid models whose
// logits are spread enough for top-1 comparisons to mean something (the llama.cpp variant under
// @engine=llama.cpp, whose input rounding needs its matrices grouped by type).
TEST(GpuSmallModelFixture, LoadsAndRunsOnTheCpu) {
  for (const bool groups : {false, true}) {
    const auto model = Model::load(write_small_llama(groups));
    const size_t vocab = model->arch().n_vocab;
    ASSERT_EQ(model->arch().head_dim, 64u);
    ThreadPool pool(2);
    auto cache = model->make_cache(kernels::parse_kv_config(groups ? "q8_0@engine=llama.cpp" : "f16"), 64);
    const kernels::SeqId seq = cache->create_sequence();
    const std::vector<int32_t> ids = prompt_ids(40, static_cast<int>(vocab));
    std::vector<float> logits(ids.size() * vocab);
    model->forward(pool, *cache, seq, ids, true, logits.data());
    for (size_t r = 0; r < ids.size(); ++r) {
      const float* row = logits.data() + r * vocab;
      const auto [lo, hi] = std::minmax_element(row, row + vocab);
      ASSERT_TRUE(std::isfinite(*lo) && std::isfinite(*hi)) << "row " << r;
      EXPECT_GT(*hi - *lo, 1.0f) << "row " << r << ": logits too flat to compare top-1";
    }
  }
}

// Runs without a device: a config the GPU kernels cannot store is a usage error naming it.
TEST(GpuKvShape, ConfigsWithoutGpuKernelsAreUsageErrors) {
  ModelArch arch;
  arch.n_layers = 2;
  arch.n_kv_heads = 3;
  arch.head_dim = 64;
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("q8_0/q4_0"), arch, 0).value.format, kernels::FormatId::q4_0);
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("fp8_e4m3:scale=0.5"), arch, 1).key.scale, 0.5f);
  EXPECT_TRUE(gpu_kv_shape(kernels::parse_kv_config("tq3/4"), arch, 0).key.tq.has_value());
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("tq3/4"), arch, 0).value.format, kernels::FormatId::u4);
  const auto kivi = gpu_kv_shape(kernels::parse_kv_config("kivi2_k:residual=64/kivi2_v:residual=64"), arch, 0);
  EXPECT_EQ(kivi.key.format, kernels::FormatId::kivi2_k);
  EXPECT_EQ(kivi.value.format, kernels::FormatId::kivi2_v);
  EXPECT_EQ(kivi.key.residual, 64);
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("nvfp4"), arch, 0).key.format, kernels::FormatId::nvfp4);
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("nvfp4:scale=0.25"), arch, 1).value.scale, 0.25f);
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("q5_0/iq4_nl"), arch, 0).value.format, kernels::FormatId::iq4_nl);
  EXPECT_TRUE(gpu_kv_shape(kernels::parse_kv_config("q4_0:rot=hadamard"), arch, 0).key.rotation.has_value());
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("tq3.5/4"), arch, 0).key.tq->params.outliers, 16);
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("tq2.5:nc:outliers=5/4"), arch, 0).key.tq->params.outliers, 5);
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("tq3:outliers=3/4"), arch, 1).key.tq->params.outliers, 3);
  EXPECT_NE(gpu_kv_shape(kernels::parse_kv_config("tqprod3:seed=9/4"), arch, 0).key.tq->sketch, nullptr);
  EXPECT_NE(gpu_kv_shape(kernels::parse_kv_config("tq3:rot=qr/4"), arch, 0).key.tq->rotation_matrix, nullptr);
  EXPECT_NE(gpu_kv_shape(kernels::parse_kv_config("tqprod2:rot=qr/4"), arch, 1).key.tq->params.rotation_matrix, nullptr);
  // Every KV format has GPU kernels; these options do not: KIVI key groups must divide the
  // 32-token page.
  for (const char* spec : {"kivi4_k:group=48/kivi4_v", "kivi2_k:group=64/kivi2_v"}) {
    try {
      gpu_kv_shape(kernels::parse_kv_config(spec), arch, 0);
      ADD_FAILURE() << spec << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2) << spec;
      EXPECT_NE(std::string(e.what()).find("GPU"), std::string::npos) << e.what();
    }
  }
  // Per-layer overrides map layer by layer.
  const auto mixed = kernels::parse_kv_config("q4_0@0=f16");
  EXPECT_EQ(gpu_kv_shape(mixed, arch, 0).key.format, kernels::FormatId::f16);
  EXPECT_EQ(gpu_kv_shape(mixed, arch, 1).key.format, kernels::FormatId::q4_0);
  // The engine comes along: its arithmetic runs on the device.
  const auto engine = gpu_kv_shape(kernels::parse_kv_config("q8_0@0=f16@engine=llama.cpp"), arch, 0);
  EXPECT_EQ(engine.arithmetic, kernels::Arithmetic::llama_cpp);
  EXPECT_EQ(engine.key.format, kernels::FormatId::f16);
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("fp8@engine=vllm-fa3"), arch, 1).arithmetic, kernels::Arithmetic::vllm_fa3);
  EXPECT_EQ(gpu_kv_shape(kernels::parse_kv_config("q8_0"), arch, 1).arithmetic, kernels::Arithmetic::exact);
}

}  // namespace
}  // namespace kvgate::runtime
