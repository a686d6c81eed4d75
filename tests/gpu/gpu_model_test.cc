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
#include "tests/runtime/small_llama.h"

namespace kvgate::runtime {
namespace {

using namespace testing_small;

// The checks' script (small_llama.h cpu_trace) on both backends: the GPU matches the CPU within
// 0.02 in top-20 log-probs and on every clear top-1, or, where the config's noise floor on this
// model is higher, within twice that floor (the floor printed beside it); it leaves the
// forked-from sequence alone and repeats itself bit for bit.
void expect_gpu_matches_cpu(const std::string& path, const Model& model, const GpuModel& gpu_model, const char* spec) {
  const kernels::KvConfig config = kernels::parse_kv_config(spec);
  const size_t vocab = model.arch().n_vocab;
  const std::vector<int32_t> ids = prompt_ids(150, static_cast<int>(vocab));
  const std::span<const int32_t> first(ids.data(), 100), second(ids.data() + 100, 50);
  std::vector<int32_t> steps;
  const Trace cpu = cpu_trace(model, config, steps);

  Trace gpu;
  gpu.prefill.assign(ids.size() * vocab, NAN);
  auto gseq = gpu_model.start(config, 200);
  gpu_model.forward(*gseq, first, true, gpu.prefill.data());
  gpu_model.forward(*gseq, second, true, gpu.prefill.data() + 100 * vocab);
  EXPECT_EQ(gseq->length(), 150);
  auto gfork = gseq->fork(150);
  std::vector<float> row(vocab);
  for (const int32_t tok : steps) {
    gpu_model.forward(*gfork, std::span<const int32_t>(&tok, 1), false, row.data());
    gpu.decode.insert(gpu.decode.end(), row.begin(), row.end());
  }
  EXPECT_EQ(gseq->length(), 150);
  EXPECT_EQ(gfork->length(), 158);

  for (const bool decode : {false, true}) {
    const char* phase = decode ? "decode" : "prefill";
    const RowDiff d = compare_rows(decode ? cpu.decode : cpu.prefill, decode ? gpu.decode : gpu.prefill, vocab);
    RowDiff floor;
    const bool over = d.max_logprob >= 0.02 || d.top1_mismatch > 0;
    // A boundary crossing is a rare event per perturbation (two missed u2/u3's on an H200's host
    // CPU where they hit it here), so the floor is the largest of eight.
    if (over) floor = noise_floor(path, config, steps, cpu, decode, 8);
    const double bound = std::max(0.02, 2 * floor.max_logprob);
    std::printf("%s %s: max top-20 log-prob difference %.5f, top-1 mismatches %d", spec, phase, d.max_logprob,
                d.top1_mismatch);
    if (over) std::printf(" (noise floor %.5f, %d; bound %.5f)", floor.max_logprob, floor.top1_mismatch, bound);
    std::printf("\n");
    EXPECT_LT(d.max_logprob, bound) << spec << " " << phase;
    EXPECT_LE(d.top1_mismatch, 2 * floor.top1_mismatch) << spec << " " << phase;
  }

  auto again = gpu_model.start(config, 200);
  std::vector<float> repeat(100 * vocab);
  gpu_model.forward(*again, first, true, repeat.data());
  EXPECT_TRUE(std::equal(repeat.begin(), repeat.end(), gpu.prefill.begin())) << spec << ": not deterministic";
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
    path_ = write_small_llama();
    model_ = Model::load(path_);
    gpu_ = GpuModel::upload(*model_);
  }
  std::string path_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<GpuModel> gpu_;
};

TEST_P(GpuSmallModel, MatchesTheCpuRuntime) { expect_gpu_matches_cpu(path_, *model_, *gpu_, GetParam()); }

// A forward queues its work and waits for the device once, for its logits: no wait per matmul
// (the exact path's flag comes back with the logits), none to upload the token ids. The host
// test (tests/runtime gpu_forward_stub_test.cc) checks the forward's calls on the 8B shape;
// this counts the real library's waits (gpu_ops.h host_waits) on a device.
TEST(GpuForwardWaits, APrefillChunkAndADecodeStepWaitForTheDeviceOnceEach) {
  if (kernels::gpu::device_count() == 0) GTEST_SKIP() << "no " << kernels::gpu::vendor() << " device present";
  const auto model = Model::load(write_small_llama());
  const auto gpu = GpuModel::upload(*model);
  for (const char* config : {"f16", "q4_0@engine=llama.cpp-cuda"}) {
    const auto seq = gpu->start(kernels::parse_kv_config(config), 64);
    const std::vector<int32_t> ids = prompt_ids(40, static_cast<int>(model->arch().n_vocab));
    std::vector<float> logits(model->arch().n_vocab);
    // The first chunk sizes the buffers (stream-ordered: no wait either); count from the second.
    gpu->forward(*seq, std::span<const int32_t>(ids.data(), 20), false, logits.data());
    const uint64_t before = kernels::gpu::host_waits();
    gpu->forward(*seq, std::span<const int32_t>(ids.data() + 20, 19), false, logits.data());
    EXPECT_EQ(kernels::gpu::host_waits() - before, 1u) << config << ": a prefill chunk";
    const uint64_t mid = kernels::gpu::host_waits();
    gpu->forward(*seq, std::span<const int32_t>(ids.data() + 39, 1), false, logits.data());
    EXPECT_EQ(kernels::gpu::host_waits() - mid, 1u) << config << ": a decode step";
  }
}

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
    path_ = write_small_llama(true);
    model_ = Model::load(path_);
    gpu_ = GpuModel::upload(*model_);
  }
};

TEST_P(GpuSmallModelLlamaCpp, MatchesTheCpuRuntime) { expect_gpu_matches_cpu(path_, *model_, *gpu_, GetParam()); }

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
      path_ = named;
    } else {
      KVGATE_SKIP_UNLESS_DEFAULT_MODEL();
      path_ = kvgate::testing::default_model_file();
    }
    model_ = Model::load(path_);
    gpu_ = GpuModel::upload(*model_);
  }
  std::string path_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<GpuModel> gpu_;
};

TEST_P(GpuDefaultModel, MatchesTheCpuRuntime) { expect_gpu_matches_cpu(path_, *model_, *gpu_, GetParam()); }

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

    // As the forward uploads weights: repacked into the device's planes.
    const gpu::UploadedWeight uploaded =
        gpu::upload_weight(gpu_weight_type(type, "probe"), bytes.data(), rows, cols, w.row_bytes);
    const gpu::DeviceWeight& dw = uploaded.view;

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

// The prefill GEMM on tensor cores (matmul on the exact path: cuBLASLt where the build has it)
// against a float64 product of the CPU's decoded weights, for every weight type. x goes as 16-bit
// pieces riding as extra columns of one GEMM (split_columns.h: an f16 pair after a per-token
// power-of-two scale next to F16 weights, three bf16 pieces next to BF16), quantized weights as
// f16 hi/lo tiles too. The worst case is both operands as f16 pairs: what a pair misses of a
// factor is at most 2^-23 of it (half an f16 ulp of lo), and the dropped lo.lo term 2^-22 of the
// product, so each product w x carries at most 2^-21 relative error, plus, where a hi lands among
// the f16 subnormals, 2^-25 absolute times the other factor; the tensor cores' f32 sums add at
// most cols x 2^-23 of sum |w x| (truncating rather than rounding, as Hopper's MMA units may), and
// the combine two more f32 roundings. The bound below is that sum, 20 times below what plain f16
// inputs (2^-10 per product) reach. Batches of kGemvMaxTokens rows or fewer keep the GEMV (bit
// for bit). Runs twice: the same bits.
TEST(GpuWeights, TensorCoreGemmMatchesTheCpuDecodeWithinItsSplitF16Rounding) {
  namespace gpu = kernels::gpu;
  if (gpu::device_count() == 0) GTEST_SKIP() << "no " << gpu::vendor() << " device present";
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                            GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K};
  Rng rng(9);
  const int rows = 333, cols = 768;
  const double u = std::ldexp(1.0, -11);
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
    // As the forward uploads weights: repacked into the device's planes.
    const gpu::UploadedWeight uploaded =
        gpu::upload_weight(gpu_weight_type(type, "probe"), bytes.data(), rows, cols, w.row_bytes);
    const gpu::DeviceWeight& dw = uploaded.view;
    for (int n : {gpu::kGemvMaxTokens, gpu::kGemvMaxTokens + 1, 70, 257}) {
      std::vector<float> x(static_cast<size_t>(n) * cols);
      for (float& v : x) v = static_cast<float>(rng.normal());
      gpu::DeviceMemory xd(x.size() * sizeof(float)), yd(static_cast<size_t>(n) * rows * sizeof(float));
      xd.upload(x.data(), x.size() * sizeof(float));
      std::vector<float> poison(static_cast<size_t>(n) * rows, NAN), y(poison.size()), again(poison.size()),
          own(poison.size());
      yd.upload(poison.data(), poison.size() * sizeof(float));
      gpu::matmul(gpu::MatmulPath::exact, xd.floats(), n, dw, yd.floats());
      yd.download(y.data(), y.size() * sizeof(float));
      gpu::matmul(gpu::MatmulPath::exact, xd.floats(), n, dw, yd.floats());
      yd.download(again.data(), again.size() * sizeof(float));
      EXPECT_EQ(std::memcmp(y.data(), again.data(), y.size() * sizeof(float)), 0) << ggml_type_name(type) << " n=" << n;
      gpu::gemm_xwt(xd.floats(), n, dw, yd.floats());
      yd.download(own.data(), own.size() * sizeof(float));
      if (n <= gpu::kGemvMaxTokens || !gpu::have_tensor_core_gemm()) {
        EXPECT_EQ(std::memcmp(y.data(), own.data(), y.size() * sizeof(float)), 0)
            << ggml_type_name(type) << " n=" << n << ": not the project's own kernel";
        continue;
      }
      for (int t = 0; t < n; ++t)
        for (int r = 0; r < rows; ++r) {
          double want = 0, scale = 0, magnitudes = 0;
          for (int k = 0; k < cols; ++k) {
            const double xk = x[static_cast<size_t>(t) * cols + k];
            const double wk = dense[static_cast<size_t>(r) * cols + k];
            want += wk * xk;
            scale += std::fabs(wk * xk);
            magnitudes += (1 + u) * std::fabs(xk) + std::fabs(wk) + std::ldexp(1.0, -25);
          }
          const double bound =
              (std::ldexp(1.0, -21) + (cols + 2) * std::ldexp(1.0, -23)) * scale + std::ldexp(1.0, -25) * magnitudes;
          const float got = y[static_cast<size_t>(t) * rows + r];
          ASSERT_TRUE(std::isfinite(got)) << ggml_type_name(type) << " n=" << n << " token " << t << " row " << r;
          ASSERT_LE(std::fabs(got - want), bound)
              << ggml_type_name(type) << " n=" << n << " token " << t << " row " << r << ": " << got << " vs " << want;
        }
    }
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
