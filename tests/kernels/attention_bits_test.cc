// The fused attention's exact path, pinned bit for bit: a hash of paged_attention's output per
// registered format (as K and V where it may be both), for a prefill chunk and a decode step
// under two shapes (GQA group 3 at head_dim 64, the default model's; group 4 at head_dim 128).
// Speed work on the kernels must not move a bit of a metric (a gate compares tonight's numbers
// with last night's), and MatchesDequantizedReferenceForEveryFormat only checks the results to
// a tolerance. A change here is a change of results: make it deliberately and say so.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/hash.h"
#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/paged_kv_cache.h"
#include "tests/kernels/gaussian.h"

namespace kvgate::kernels {
namespace {

struct Shape {
  int heads, kv_heads, head_dim;
};

// Prefill of len - 1 tokens, then one decode step, on one thread; both outputs hashed.
uint64_t output_hash(const LayerFormats& formats, const Shape& shape, int64_t len, uint64_t seed) {
  PagedKvCache cache({formats}, {shape.kv_heads, shape.head_dim, 32, 8});
  const SeqId seq = cache.create_sequence();
  const size_t kv_row = static_cast<size_t>(shape.kv_heads) * shape.head_dim;
  const size_t q_row = static_cast<size_t>(shape.heads) * shape.head_dim;
  const auto k = gaussian(len * kv_row, seed), v = gaussian(len * kv_row, seed + 1);
  const auto q = gaussian(len * q_row, seed + 2);
  uint64_t h = 0;
  for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, len - 1}, {len - 1, len}}) {
    const int64_t n = end - begin;
    cache.append(seq, 0, k.data() + begin * kv_row, v.data() + begin * kv_row, n);
    std::vector<float> out(static_cast<size_t>(n) * q_row);
    paged_attention(cache, seq, 0, {shape.heads}, q.data() + begin * q_row, n, out.data(), nullptr);
    h = xxhash64(out.data(), out.size() * sizeof(float), h);
  }
  return h;
}

// Recorded at 11bd770 (before the kernels' 2026-12-04 speed work) and unchanged by it.
const std::map<std::string, std::string> kPinned = {
  {"f32", "8ef4ab69dd85f924"},
  {"f16", "c72b63214e5179ae"},
  {"bf16", "05d7e382413eae2f"},
  {"fp8_e4m3", "d4180e53513d6b7d"},
  {"fp8_e5m2", "3fb4732a5449dd27"},
  {"fp8_e4m3fnuz", "5b3715ff21e6eda8"},
  {"int8_pth", "5bb07acd8498c487"},
  {"fp8_pth", "b42eca7ef4da11e2"},
  {"int4_pth", "1200708e1f7bb091"},
  {"q8_0", "2a6e4ba0d3f154cb"},
  {"q5_0", "b1c4d6e8a5b41393"},
  {"q5_1", "36198b1b7624828b"},
  {"q4_0", "e940e0a005304058"},
  {"q4_1", "1183a71d7c45f899"},
  {"iq4_nl", "0c65429d744b5a4c"},
  {"mxfp4", "93d528de041a04c3"},
  {"nvfp4", "b6514fcc33f8bbfa"},
  {"nvfp4_4over6", "ece70f9d833035e2"},
  {"fp4_mx_block16", "254548b031350c65"},
  {"kivi2_k", "9b3edbf5f8c74a17"},
  {"kivi2_v", "810c99f9a110b825"},
  {"kivi4_k", "9b3edbf5f8c74a17"},
  {"kivi4_v", "810c99f9a110b825"},
  {"tq1", "09b20a097f64b263"},
  {"tq2", "5e559bb308d1ace9"},
  {"tq2.5", "3a5da972cc2bdf10"},
  {"tq3", "62aac26bf7e48203"},
  {"tq3.5", "dfb071cef21fc360"},
  {"tq4", "5f790c0937eaea62"},
  {"tqprod2", "c6a7e85950dc2ea1"},
  {"tqprod3", "c68a7fd832bcf239"},
  {"tqprod4", "fdf4e9aea2e0e21f"},
  {"u2", "1d83d97b4e79e7a4"},
  {"u3", "2d4ec3397c3e2ffc"},
  {"u4", "111c1df0e0135967"},
  {"u8", "393a1d4fc5cbf36a"},
  {"toy_i16", "63db9c9563aef52d"},
};

TEST(AttentionBits, OutputIsPinnedPerFormat) {
  if (!cpu_has_avx2_fma_f16c()) GTEST_SKIP() << "the pinned bits are the AVX2/AVX-512 paths'; this CPU has no AVX2";
  const FormatInfo* f16 = find_format("f16");
  std::string report;
  for (const FormatInfo* f : all_formats()) {
    const LayerFormats lf{{f->for_keys ? f : f16, {}}, {f->for_values ? f : f16, {}}};
    const uint64_t h = output_hash(lf, {9, 3, 64}, 77, 5) ^ output_hash(lf, {8, 2, 128}, 70, 9);
    const std::string got = hex_u64(h);
    report += "  {\"" + std::string(f->name) + "\", \"" + got + "\"},\n";
    const auto it = kPinned.find(std::string(f->name));
    if (it == kPinned.end())
      ADD_FAILURE() << f->name << ": no pinned hash";
    else
      EXPECT_EQ(got, it->second) << f->name;
  }
  if (HasFailure()) std::printf("hashes now:\n%s", report.c_str());
}

}  // namespace
}  // namespace kvgate::kernels
