#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/paged_kv_cache.h"
#include "tests/kernels/gaussian.h"

namespace kvgate::kernels {
namespace {

constexpr int kKvHeads = 2;
constexpr int kHeadDim = 64;

LayerFormats both(const char* name, FormatOptions options = {}) {
  return {{find_format(name), options}, {find_format(name), options}};
}

std::vector<float> tokens(int64_t n, uint64_t seed) { return gaussian(static_cast<size_t>(n) * kKvHeads * kHeadDim, seed); }

TEST(PagedKvCache, PagesHoldEachHeadContiguouslyAndAccountBytes) {
  PagedKvCache cache({both("f16"), both("f32")}, {kKvHeads, kHeadDim, 16, 10});
  const KvMemory empty = cache.memory();
  // Per page: layer 0 K and V in f16 (2 bytes), layer 1 in f32 (4 bytes), 16 tokens x 2 heads x 64.
  EXPECT_EQ(empty.bytes_per_page, 16u * kKvHeads * kHeadDim * (2 + 2 + 4 + 4));
  EXPECT_EQ(empty.capacity_bytes, 10 * empty.bytes_per_page);
  EXPECT_EQ(empty.used_bytes(), 0u);

  const SeqId seq = cache.create_sequence();
  const auto k = tokens(20, 1), v = tokens(20, 2);
  cache.append(seq, 0, k.data(), v.data(), 20);
  cache.append(seq, 1, k.data(), v.data(), 20);
  EXPECT_EQ(cache.block_table(seq).size(), 2u);
  EXPECT_EQ(cache.memory().pages_used, 2);
  EXPECT_EQ(cache.memory().used_bytes(), 2 * empty.bytes_per_page);

  // Token 17 of head 1 in the f32 layer: page 1, head 1's block, row 1.
  const KvLayerView view = cache.view(seq, 1);
  const float* stored = reinterpret_cast<const float*>(view.key.group_at(1, 17, 16));
  for (int i = 0; i < kHeadDim; ++i) EXPECT_EQ(stored[i], k[(17 * kKvHeads + 1) * kHeadDim + i]);
  EXPECT_EQ(view.key.group_at(1, 17, 16) - view.key.group_at(1, 16, 16), static_cast<ptrdiff_t>(kHeadDim * 4));
}

TEST(PagedKvCache, LayersKeepTheirOwnLengths) {
  PagedKvCache cache({both("f16"), both("f16")}, {kKvHeads, kHeadDim, 16, 10});
  const SeqId seq = cache.create_sequence();
  const auto x = tokens(5, 3);
  cache.append(seq, 0, x.data(), x.data(), 5);
  EXPECT_EQ(cache.length(seq, 0), 5);
  EXPECT_EQ(cache.length(seq, 1), 0);
  EXPECT_EQ(cache.length(seq), 0);
  cache.append(seq, 1, x.data(), x.data(), 5);
  EXPECT_EQ(cache.length(seq), 5);
}

TEST(PagedKvCache, ForkSharesPrefixPagesAndCopiesOnWrite) {
  PagedKvCache cache({both("f16")}, {kKvHeads, kHeadDim, 16, 16});
  const SeqId parent = cache.create_sequence();
  const auto a = tokens(40, 4);
  cache.append(parent, 0, a.data(), a.data(), 40);
  std::vector<float> parent_k, parent_v;
  cache.dequantize_ref(parent, 0, parent_k, parent_v);
  const std::vector<int32_t> parent_pages = cache.block_table(parent);
  ASSERT_EQ(parent_pages.size(), 3u);

  const SeqId child = cache.fork(parent, 36);
  EXPECT_EQ(cache.length(child), 36);
  EXPECT_EQ(cache.block_table(child), parent_pages);
  for (int32_t p : parent_pages) EXPECT_EQ(cache.page_refcount(p), 2);
  EXPECT_EQ(cache.memory().pages_used, 3) << "a fork allocates nothing";

  // The child writes into the shared partial page: it gets a private copy, the parent keeps its data.
  const auto b = tokens(3, 5);
  cache.append(child, 0, b.data(), b.data(), 3);
  EXPECT_NE(cache.block_table(child)[2], parent_pages[2]);
  EXPECT_EQ(cache.block_table(child)[0], parent_pages[0]);
  EXPECT_EQ(cache.page_refcount(parent_pages[2]), 1);
  EXPECT_EQ(cache.page_refcount(parent_pages[0]), 2);
  std::vector<float> k_now, v_now, child_k, child_v;
  cache.dequantize_ref(parent, 0, k_now, v_now);
  EXPECT_EQ(k_now, parent_k);
  cache.dequantize_ref(child, 0, child_k, child_v);
  const size_t row = kKvHeads * kHeadDim;
  EXPECT_TRUE(std::equal(child_k.begin(), child_k.begin() + 36 * row, parent_k.begin()));
  for (size_t i = 0; i < 3 * row; ++i) EXPECT_EQ(child_k[36 * row + i], f16_to_f32(f32_to_f16(b[i])));

  // Releasing the parent leaves the child's shared pages alive.
  cache.release(parent);
  for (int32_t p : cache.block_table(child)) EXPECT_EQ(cache.page_refcount(p), 1);
  EXPECT_EQ(cache.memory().pages_used, 3);
  cache.release(child);
  EXPECT_EQ(cache.free_pages(), 16);
}

TEST(PagedKvCache, ForkAtPageBoundaryNeverCopies) {
  PagedKvCache cache({both("f16")}, {kKvHeads, kHeadDim, 16, 8});
  const SeqId parent = cache.create_sequence();
  const auto a = tokens(40, 6);
  cache.append(parent, 0, a.data(), a.data(), 40);
  const SeqId child = cache.fork(parent, 32);
  EXPECT_EQ(cache.block_table(child).size(), 2u);
  cache.append(child, 0, a.data(), a.data(), 1);
  EXPECT_EQ(cache.memory().pages_used, 4) << "3 parent pages + 1 fresh page, no copy";
}

TEST(PagedKvCache, TruncateAndReleaseReuseFreedPagesFirst) {
  PagedKvCache cache({both("f16")}, {kKvHeads, kHeadDim, 16, 8});
  const SeqId s = cache.create_sequence();
  const auto a = tokens(64, 7);
  cache.append(s, 0, a.data(), a.data(), 64);
  const int32_t last = cache.block_table(s)[3];
  cache.truncate(s, 33);
  EXPECT_EQ(cache.length(s), 33);
  EXPECT_EQ(cache.block_table(s).size(), 3u);
  EXPECT_EQ(cache.free_pages(), 5);
  const SeqId t = cache.create_sequence();
  cache.append(t, 0, a.data(), a.data(), 1);
  EXPECT_EQ(cache.block_table(t)[0], last);
  cache.release(s);
  const SeqId u = cache.create_sequence();
  EXPECT_EQ(u, s) << "a released sequence id is reused";
  EXPECT_THROW(cache.length(99), Error);
  EXPECT_THROW(cache.truncate(t, 2), Error);
  EXPECT_THROW(cache.fork(t, 5), Error);
}

TEST(PagedKvCache, FullCacheIsAUsageErrorThatChangesNothing) {
  PagedKvCache cache({both("f16")}, {kKvHeads, kHeadDim, 16, 4});
  const SeqId s = cache.create_sequence();
  const auto a = tokens(65, 8);
  try {
    cache.append(s, 0, a.data(), a.data(), 65);
    FAIL() << "expected a capacity error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("KV cache is full"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(s), 0);
  EXPECT_EQ(cache.free_pages(), 4);
  cache.append(s, 0, a.data(), a.data(), 64);
  EXPECT_EQ(cache.free_pages(), 0);

  // Copy on write needs a page too: a fork of a full cache cannot write into the shared page.
  cache.truncate(s, 60);
  const SeqId child = cache.fork(s, 60);
  EXPECT_THROW(cache.append(child, 0, a.data(), a.data(), 1), Error);
  EXPECT_EQ(cache.length(child), 60);
}

TEST(PagedKvCache, RejectsShapesThatDoNotFit) {
  EXPECT_THROW(PagedKvCache({both("f16")}, {0, kHeadDim, 16, 4}), Error);
  EXPECT_THROW(PagedKvCache({both("f16")}, {kKvHeads, kHeadDim, 0, 4}), Error);
  EXPECT_THROW(PagedKvCache({both("f16")}, {kKvHeads, kHeadDim, 16, 0}), Error);
  EXPECT_THROW(PagedKvCache({both("f16")}, {kKvHeads, kHeadDim, 16, int64_t{1} << 40}), Error);
  EXPECT_THROW(PagedKvCache({}, {kKvHeads, kHeadDim, 16, 4}), Error);
}

// Window formats (KIVI): the newest tokens stay in f16, whole groups are quantized once they
// leave the window, and forks/truncations keep that invariant.
TEST(PagedKvCache, WindowFormatsQuantizeOnlyGroupsThatLeftTheWindow) {
  int tested = 0;
  for (const FormatInfo* f : all_formats()) {
    const auto probe = make_codec(*f, kHeadDim);
    const int G = probe->token_group(), R = probe->residual_tokens();
    if (G == 1 && R == 0) continue;
    ++tested;
    SCOPED_TRACE(std::string(f->name));
    const FormatInfo* f16 = find_format("f16");
    const LayerFormats lf = f->for_keys ? LayerFormats{{f, {}}, {f16, {}}} : LayerFormats{{f16, {}}, {f, {}}};
    const KvRole role = f->for_keys ? KvRole::key : KvRole::value;
    const int page = G * (G < 16 ? 16 / G : 1);
    PagedKvCache cache({lf}, {kKvHeads, kHeadDim, page, 64});
    const SeqId s = cache.create_sequence();
    const int64_t total = R + 3 * G + 5;
    const auto x = tokens(total, 9);
    auto quantized_for = [&](int64_t n) { return (n > R ? (n - R) / G : 0) * G; };
    for (int64_t n = 0; n < total; ++n) {
      const size_t off = static_cast<size_t>(n) * kKvHeads * kHeadDim;
      cache.append(s, 0, x.data() + off, x.data() + off, 1);
      const KvLayerView v = cache.view(s, 0);
      const KvRoleView& rv = role == KvRole::key ? v.key : v.value;
      ASSERT_EQ(rv.quantized, quantized_for(n + 1)) << "after " << n + 1 << " tokens";
    }
    std::vector<float> k, v;
    cache.dequantize_ref(s, 0, k, v);
    const std::vector<float>& got = role == KvRole::key ? k : v;
    const int64_t nq = quantized_for(total);
    for (size_t i = static_cast<size_t>(nq) * kKvHeads * kHeadDim; i < x.size(); ++i)
      ASSERT_EQ(got[i], f16_to_f32(f32_to_f16(x[i]))) << "window tokens are stored as f16";
    EXPECT_EQ(cache.memory().window_bytes, static_cast<size_t>(total - nq) * kKvHeads * kHeadDim * 2);

    // A fork inside an already quantized group recovers that group's tokens into the window.
    const int64_t cut = G > 1 ? G + G / 2 : nq - 1;
    const SeqId child = cache.fork(s, cut);
    std::vector<float> ck, cv;
    cache.dequantize_ref(child, 0, ck, cv);
    const std::vector<float>& child_got = role == KvRole::key ? ck : cv;
    ASSERT_EQ(child_got.size(), static_cast<size_t>(cut) * kKvHeads * kHeadDim);
    for (size_t i = 0; i < static_cast<size_t>(cut / G * G) * kKvHeads * kHeadDim; ++i)
      ASSERT_EQ(child_got[i], got[i]) << "whole quantized groups are shared as they are";
    for (size_t i = static_cast<size_t>(cut / G * G) * kKvHeads * kHeadDim; i < child_got.size(); ++i)
      ASSERT_EQ(child_got[i], f16_to_f32(f32_to_f16(got[i]))) << "the cut group comes from its dequantized values";
    // Appending to the child continues the window rule from the shared state.
    cache.append(child, 0, x.data(), x.data(), R + G);
    const KvLayerView cv2 = cache.view(child, 0);
    EXPECT_GE((role == KvRole::key ? cv2.key : cv2.value).quantized, quantized_for(cut + R + G));
  }
  if (tested == 0) GTEST_SKIP() << "no window format (KIVI) is registered";
}

TEST(PagedKvCache, PageSizeMustHoldWholeTokenGroups) {
  for (const FormatInfo* f : all_formats()) {
    const int G = make_codec(*f, kHeadDim)->token_group();
    if (G == 1) continue;
    const FormatInfo* f16 = find_format("f16");
    const LayerFormats lf = f->for_keys ? LayerFormats{{f, {}}, {f16, {}}} : LayerFormats{{f16, {}}, {f, {}}};
    EXPECT_THROW(PagedKvCache({lf}, {kKvHeads, kHeadDim, G + 1, 4}), Error) << f->name;
  }
}

}  // namespace
}  // namespace kvgate::kernels
