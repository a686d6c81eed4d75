// The sliding-window paged cache (PagedKvCacheShape::window): attention sees (p - W, p] as
// llama.cpp's LLAMA_SWA_TYPE_STANDARD mask does, pages wholly behind every future query's
// window go back to the pool, and cutting into dropped pages is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kv_config.h"
#include "kernels/paged_kv_cache.h"
#include "tests/kernels/gaussian.h"

namespace kvgate::kernels {
namespace {

constexpr int kHeads = 4;
constexpr int kKvHeads = 2;
constexpr int kHeadDim = 32;
constexpr int kPageTokens = 32;

PagedKvCacheShape shape(int64_t window, int64_t pages = 64) {
  PagedKvCacheShape s;
  s.n_kv_heads = kKvHeads;
  s.head_dim = kHeadDim;
  s.page_tokens = kPageTokens;
  s.capacity_pages = pages;
  s.window = window;
  return s;
}

// Softmax attention in float64 of the last n_queries positions of [0, len) over keys in
// (pos - window, pos]; k, v: [len][kKvHeads][D].
std::vector<double> reference(const std::vector<float>& k, const std::vector<float>& v, int64_t len,
                              const std::vector<float>& q, int64_t n_queries, int64_t window) {
  const int D = kHeadDim, group = kHeads / kKvHeads;
  std::vector<double> out(static_cast<size_t>(n_queries) * kHeads * D, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t qi = 0; qi < n_queries; ++qi) {
    const int64_t pos = len - n_queries + qi;
    const int64_t first = std::max<int64_t>(0, pos - window + 1);
    for (int head = 0; head < kHeads; ++head) {
      const int kvh = head / group;
      const float* qv = &q[(static_cast<size_t>(qi) * kHeads + head) * D];
      std::vector<double> p;
      double mx = -INFINITY;
      for (int64_t t = first; t <= pos; ++t) {
        double s = 0.0;
        for (int i = 0; i < D; ++i) s += static_cast<double>(qv[i]) * k[(static_cast<size_t>(t) * kKvHeads + kvh) * D + i];
        p.push_back(s * scale);
        mx = std::max(mx, p.back());
      }
      double denom = 0.0;
      for (double& x : p) denom += (x = std::exp(x - mx));
      double* o = &out[(static_cast<size_t>(qi) * kHeads + head) * D];
      for (int64_t t = first; t <= pos; ++t)
        for (int i = 0; i < D; ++i) o[i] += p[static_cast<size_t>(t - first)] / denom * v[(static_cast<size_t>(t) * kKvHeads + kvh) * D + i];
    }
  }
  return out;
}

double max_error(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(got[i] - want[i]));
  return e;
}

// Prefill chunks and decode steps over a long sequence: every query row sees exactly its window,
// including chunks longer than the window and windows that start mid-page.
TEST(SlidingWindowCache, AttentionSeesExactlyTheWindow) {
  ThreadPool pool(2);
  for (int64_t window : {1, 17, 32, 50}) {
    PagedKvCache cache(parse_kv_config("f32"), 1, shape(window));
    const SeqId seq = cache.create_sequence();
    const int64_t total = 230;
    const std::vector<float> k = gaussian(static_cast<size_t>(total) * kKvHeads * kHeadDim, 1 + window);
    const std::vector<float> v = gaussian(static_cast<size_t>(total) * kKvHeads * kHeadDim, 100 + window);
    AttentionShape as;
    as.n_heads = kHeads;
    int64_t len = 0;
    for (int64_t chunk : {70, 1, 1, 45, 1, 100, 12}) {
      const size_t row = static_cast<size_t>(kKvHeads) * kHeadDim;
      cache.append(seq, 0, k.data() + len * row, v.data() + len * row, chunk);
      len += chunk;
      const std::vector<float> q = gaussian(static_cast<size_t>(chunk) * kHeads * kHeadDim, 7 * len + window);
      std::vector<float> out(q.size());
      paged_attention(cache, seq, 0, as, q.data(), chunk, out.data(), &pool);
      EXPECT_LT(max_error(out, reference(k, v, len, q, chunk, window)), 1e-5)
          << "window " << window << ", length " << len << ", chunk " << chunk;
    }
    ASSERT_EQ(len, total);
  }
}

TEST(SlidingWindowCache, PagesBehindTheWindowAreFreed) {
  const int64_t window = 40;
  // 8 pages of 32 tokens: a cache without a window could not hold the 1000 tokens below.
  PagedKvCache cache(parse_kv_config("q8_0"), 2, shape(window, 8));
  const SeqId seq = cache.create_sequence();
  const std::vector<float> kv = gaussian(static_cast<size_t>(kKvHeads) * kHeadDim, 3);
  for (int64_t t = 0; t < 1000; ++t)
    for (int layer = 0; layer < 2; ++layer) cache.append(seq, layer, kv.data(), kv.data(), 1);
  // Kept: the pages holding (length - window, length], at most ceil((W - 1) / P) + 1 of them
  // plus the one the next token's window still reaches back into.
  const auto& table = cache.block_table(seq);
  int64_t kept = 0;
  for (int32_t page : table) kept += page != kDroppedPage ? 1 : 0;
  EXPECT_LE(kept, (window - 1 + kPageTokens - 1) / kPageTokens + 1);
  EXPECT_EQ(cache.memory().pages_used, kept);
  EXPECT_EQ(table.front(), kDroppedPage);
  EXPECT_EQ(cache.free_pages(), 8 - kept);
}

TEST(SlidingWindowCache, ForkAtTheEndSharesTheWindowAndCutsIntoDroppedPagesAreRefused) {
  PagedKvCache cache(parse_kv_config("f16"), 1, shape(20));
  const SeqId seq = cache.create_sequence();
  const std::vector<float> kv = gaussian(static_cast<size_t>(100) * kKvHeads * kHeadDim, 5);
  cache.append(seq, 0, kv.data(), kv.data(), 100);
  cache.append(seq, 0, kv.data(), kv.data(), 1);  // the append that drops pages behind the window
  const SeqId child = cache.fork(seq, cache.length(seq));
  EXPECT_EQ(cache.length(child), 101);
  cache.append(child, 0, kv.data(), kv.data(), 3);
  EXPECT_EQ(cache.length(seq), 101);
  try {
    cache.truncate(seq, 40);
    FAIL() << "truncated into dropped pages";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("sliding window"), std::string::npos) << e.what();
  }
  cache.release(child);
  cache.release(seq);
  EXPECT_EQ(cache.free_pages(), 64);
}

TEST(SlidingWindowCache, WithoutAWindowNothingIsDropped) {
  PagedKvCache cache(parse_kv_config("f16"), 1, shape(0));
  const SeqId seq = cache.create_sequence();
  const std::vector<float> kv = gaussian(static_cast<size_t>(300) * kKvHeads * kHeadDim, 9);
  cache.append(seq, 0, kv.data(), kv.data(), 300);
  cache.append(seq, 0, kv.data(), kv.data(), 1);
  for (int32_t page : cache.block_table(seq)) EXPECT_NE(page, kDroppedPage);
}

}  // namespace
}  // namespace kvgate::kernels
