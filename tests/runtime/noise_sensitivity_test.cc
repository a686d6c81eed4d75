// How far noise of the size of float32 summation order moves the CPU runtime's logits, per KV
// config, on the small random Llama the GPU forward is checked on (small_llama.h). The GPU test
// bounds its difference to the CPU by this floor where it passes 0.02 (tests/gpu/
// gpu_model_test.cc); this test runs everywhere and pins with numbers that the floor grows with
// the coarseness of what a config rounds to: an f32 cache moves by ~1e-5, an f16 one by ~1e-3,
// while caches and matmul inputs that round to a coarse grid (2- and 3-bit uniform codes,
// llama.cpp's q8 matmul inputs) move by whole rounding steps, so no backend can match another
// there to 0.02.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/runtime/small_llama.h"

namespace kvgate::runtime {
namespace {

using namespace testing_small;

RowDiff prefill_floor(const std::string& path, const char* spec) {
  const kernels::KvConfig config = kernels::parse_kv_config(spec);
  const auto model = Model::load(path);
  std::vector<int32_t> steps;
  const Trace base = cpu_trace(*model, config, steps);
  const RowDiff floor = noise_floor(path, config, steps, base, false, 2);
  std::printf("%-40s noise floor: max top-20 log-prob difference %.5f, top-1 mismatches %d\n", spec,
              floor.max_logprob, floor.top1_mismatch);
  return floor;
}

TEST(NoiseFloor, PerturbedCopyMovesOnlyTheNormWeightsByOneUlp) {
  const std::string path = write_small_llama();
  const std::string copy = perturbed_copy(path, 1, own_temp_file("noise_check"));
  const GgufFile a = GgufFile::open(path), b = GgufFile::open(copy);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  int moved = 0;
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const GgufTensor &ta = a.tensors()[i], &tb = b.tensors()[i];
    const bool norm = ta.type == GgmlType::F32 && ta.name.ends_with("norm.weight");
    if (!norm) {
      EXPECT_EQ(0, std::memcmp(ta.data, tb.data, ta.n_bytes)) << ta.name;
      continue;
    }
    for (uint64_t e = 0; e < ta.n_elements; ++e) {
      float x, y;
      std::memcpy(&x, ta.data + 4 * e, 4);
      std::memcpy(&y, tb.data + 4 * e, 4);
      EXPECT_TRUE(y == std::nextafter(x, INFINITY) || y == std::nextafter(x, -INFINITY)) << ta.name << " " << e;
      ++moved;
    }
  }
  EXPECT_EQ(moved, 256 * 5);  // attn_norm and ffn_norm of 2 layers, output_norm
}

TEST(NoiseFloor, GrowsWithTheCoarsenessOfTheRounding) {
  // Measured with this file's seeds (prefill, top-20 log-probs, one-ulp norm weights): f32 0.00002,
  // f16 0.0023, fp8 0.0196, llama.cpp's q8_0 inputs 0.108, u2/u3 1.377 with 3 top-1 flips; the
  // GPU differed from the CPU by 0.00003, 0.0052, 0.00002, 0.117 and 1.377 with the same 3 flips
  // (H200, 2026-12-04).
  const std::string path = write_small_llama();
  const RowDiff f32 = prefill_floor(path, "f32");
  EXPECT_LT(f32.max_logprob, 1e-4);
  EXPECT_EQ(f32.top1_mismatch, 0);
  const RowDiff f16 = prefill_floor(path, "f16");
  EXPECT_GT(f16.max_logprob, f32.max_logprob);
  EXPECT_LT(f16.max_logprob, 0.01);
  const RowDiff u2u3 = prefill_floor(path, "u2/u3");
  EXPECT_GT(u2u3.max_logprob, 0.1);
  EXPECT_GT(prefill_floor(write_small_llama(true), "q8_0@engine=llama.cpp").max_logprob, 0.02);
}

}  // namespace
}  // namespace kvgate::runtime
