// The fused paged attention against its definition: dequantize the cache with the codec's
// reference (dequantize_ref), then plain softmax attention in float64. They must agree to float
// rounding for every registered format as K and as V, with odd lengths and partial pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/paged_kv_cache.h"
#include "tests/kernels/gaussian.h"

namespace kvgate::kernels {
namespace {

constexpr int kHeads = 9;
constexpr int kKvHeads = 3;
constexpr int kHeadDim = 64;
constexpr int kPageTokens = 32;

// Plain causal softmax attention in float64 over k, v: [len][kKvHeads][D]; queries are the last
// n_queries positions. Returns [n_queries][kHeads][D].
std::vector<double> reference_attention(const std::vector<float>& k, const std::vector<float>& v, int64_t len,
                                        const std::vector<float>& q, int64_t n_queries) {
  const int D = kHeadDim, group = kHeads / kKvHeads;
  std::vector<double> out(static_cast<size_t>(n_queries) * kHeads * D, 0.0);
  std::vector<double> p(static_cast<size_t>(len));
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t qi = 0; qi < n_queries; ++qi) {
    const int64_t pos = len - n_queries + qi;
    for (int head = 0; head < kHeads; ++head) {
      const int kvh = head / group;
      const float* qv = &q[(static_cast<size_t>(qi) * kHeads + head) * D];
      double mx = -INFINITY;
      for (int64_t t = 0; t <= pos; ++t) {
        const float* kv = &k[(static_cast<size_t>(t) * kKvHeads + kvh) * D];
        double s = 0.0;
        for (int i = 0; i < D; ++i) s += static_cast<double>(qv[i]) * kv[i];
        p[t] = s * scale;
        mx = std::max(mx, p[t]);
      }
      double denom = 0.0;
      for (int64_t t = 0; t <= pos; ++t) denom += (p[t] = std::exp(p[t] - mx));
      double* o = &out[(static_cast<size_t>(qi) * kHeads + head) * D];
      for (int64_t t = 0; t <= pos; ++t) {
        const float* vv = &v[(static_cast<size_t>(t) * kKvHeads + kvh) * D];
        for (int i = 0; i < D; ++i) o[i] += p[t] / denom * vv[i];
      }
    }
  }
  return out;
}

double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    ref += want[i] * want[i];
  }
  return err / ref;
}

struct Case {
  std::string name;
  LayerFormats formats;
};

// Every registry format in each role it allows, the other role f32, with default options; window
// formats also once with no window, so their multi-token groups are exercised on their own.
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const FormatInfo* f32 = find_format("f32");
  for (const FormatInfo* f : all_formats()) {
    std::vector<FormatOptions> variants = {FormatOptions{}};
    if (make_codec(*f, kHeadDim)->residual_tokens() > 0) {
      FormatOptions no_window;
      no_window.residual_tokens = 0;
      variants.push_back(no_window);
    }
    for (const FormatOptions& opt : variants) {
      const std::string suffix = opt.residual_tokens == 0 && variants.size() > 1 ? ":window=0" : "";
      if (f->for_keys) cases.push_back({"K=" + std::string(f->name) + suffix, {{f, opt}, {f32, {}}}});
      if (f->for_values) cases.push_back({"V=" + std::string(f->name) + suffix, {{f32, {}}, {f, opt}}});
    }
  }
  return cases;
}

TEST(PagedAttention, MatchesDequantizedReferenceForEveryFormat) {
  ThreadPool pool(2);
  for (const Case& c : all_cases()) {
    for (int64_t len : {1, 17, 33, 257}) {
      SCOPED_TRACE(c.name + " len=" + std::to_string(len));
      PagedKvCache cache({c.formats}, {kKvHeads, kHeadDim, kPageTokens, 64});
      const SeqId seq = cache.create_sequence();
      const auto k = gaussian(static_cast<size_t>(len) * kKvHeads * kHeadDim, 11 + len);
      const auto v = gaussian(static_cast<size_t>(len) * kKvHeads * kHeadDim, 23 + len);
      const auto q = gaussian(static_cast<size_t>(len) * kHeads * kHeadDim, 37 + len);
      // A prefill chunk of len - 1 tokens, then one decode step, each attending after its append.
      const int64_t chunks[2][2] = {{0, len - 1}, {len - 1, len}};
      for (const auto& chunk : chunks) {
        const int64_t n = chunk[1] - chunk[0];
        if (n == 0) continue;
        const size_t kv_off = static_cast<size_t>(chunk[0]) * kKvHeads * kHeadDim;
        cache.append(seq, 0, k.data() + kv_off, v.data() + kv_off, n);
        std::vector<float> out(static_cast<size_t>(n) * kHeads * kHeadDim);
        const float* qc = q.data() + static_cast<size_t>(chunk[0]) * kHeads * kHeadDim;
        paged_attention(cache, seq, 0, {kHeads}, qc, n, out.data(), &pool);
        std::vector<float> kd, vd;
        cache.dequantize_ref(seq, 0, kd, vd);
        const std::vector<float> q_chunk(qc, qc + out.size());
        const double e = nmse(out, reference_attention(kd, vd, chunk[1], q_chunk, n));
        EXPECT_LT(e, 1e-10) << "chunk [" << chunk[0] << ", " << chunk[1] << ")";
      }
    }
  }
}

TEST(PagedAttention, ResultDoesNotDependOnThreadCount) {
  const FormatInfo* f16 = find_format("f16");
  PagedKvCache cache({{{f16, {}}, {f16, {}}}}, {kKvHeads, kHeadDim, 16, 64});
  const SeqId seq = cache.create_sequence();
  const int64_t len = 100;
  const auto k = gaussian(len * kKvHeads * kHeadDim, 1), v = gaussian(len * kKvHeads * kHeadDim, 2);
  const auto q = gaussian(40 * kHeads * kHeadDim, 3);
  cache.append(seq, 0, k.data(), v.data(), len);
  std::vector<float> a(q.size()), b(q.size()), c(q.size());
  ThreadPool one(1), two(2), three(3);
  paged_attention(cache, seq, 0, {kHeads}, q.data(), 40, a.data(), &one);
  paged_attention(cache, seq, 0, {kHeads}, q.data(), 40, b.data(), &two);
  paged_attention(cache, seq, 0, {kHeads}, q.data(), 40, c.data(), &three);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
}

// Quantization error as the user sees it: fused output vs attention over the unquantized K/V.
// Wider formats must be more accurate, class by class.
TEST(PagedAttention, ErrorAgainstUnquantizedAttentionIsOrderedByBitWidth) {
  const int64_t len = 257;
  const auto k = gaussian(len * kKvHeads * kHeadDim, 101), v = gaussian(len * kKvHeads * kHeadDim, 102);
  const auto q = gaussian(len * kHeads * kHeadDim, 103);
  const std::vector<double> exact = reference_attention(k, v, len, q, len);
  const FormatInfo* f32 = find_format("f32");
  // Width classes in the order their error must grow: 32, 16, [8, 9), [4, 5) bits.
  auto width_class = [](double bits) {
    if (bits >= 32) return 0;
    if (bits >= 16) return 1;
    if (bits >= 8 && bits < 9) return 2;
    if (bits >= 4 && bits < 5) return 3;
    return -1;
  };
  for (KvRole role : {KvRole::key, KvRole::value}) {
    std::map<int, std::pair<double, double>> range;  // class -> (min, max) NMSE
    std::map<int, std::string> worst, best;
    for (const FormatInfo* f : all_formats()) {
      if (role == KvRole::key ? !f->for_keys : !f->for_values) continue;
      FormatOptions opt;
      if (make_codec(*f, kHeadDim)->residual_tokens() > 0)
        opt.residual_tokens = 0;  // the window would hide the format's own error
      const FormatSpec spec{f, opt};
      const LayerFormats lf = role == KvRole::key ? LayerFormats{spec, {f32, {}}} : LayerFormats{{f32, {}}, spec};
      PagedKvCache cache({lf}, {kKvHeads, kHeadDim, kPageTokens, 64});
      const int cls = width_class(cache.codec(0, role).bits_per_element());
      if (cls < 0) continue;
      const SeqId seq = cache.create_sequence();
      cache.append(seq, 0, k.data(), v.data(), len);
      std::vector<float> out(q.size());
      paged_attention(cache, seq, 0, {kHeads}, q.data(), len, out.data());
      const double e = nmse(out, exact);
      auto [it, fresh] = range.try_emplace(cls, e, e);
      if (fresh || e < it->second.first) best[cls] = f->name;
      if (fresh || e > it->second.second) worst[cls] = f->name;
      it->second.first = std::min(it->second.first, e);
      it->second.second = std::max(it->second.second, e);
    }
    ASSERT_TRUE(range.count(0) && range.count(1)) << "f32 and f16 are always registered";
    for (auto it = range.begin(); std::next(it) != range.end(); ++it) {
      const auto next = std::next(it);
      EXPECT_LT(it->second.second, next->second.first)
          << (role == KvRole::key ? "K: " : "V: ") << worst[it->first] << " (NMSE " << it->second.second
          << ") is not more accurate than " << best[next->first] << " (NMSE " << next->second.first << ")";
    }
  }
}

TEST(SoftmaxState, MergingTwoHalvesEqualsOnePass) {
  const std::vector<float> scores = {0.5f, -1.0f, 3.0f, 2.0f, -0.25f, 1.5f};
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  auto pass = [&](size_t b, size_t e, float& acc) {
    SoftmaxState st;
    for (size_t i = b; i < e; ++i) st.max = std::fmax(st.max, scores[i]);
    acc = 0.0f;
    for (size_t i = b; i < e; ++i) {
      const float w = std::exp(scores[i] - st.max);
      st.denom += w;
      acc += w * values[i];
    }
    return st;
  };
  float all_acc, lo_acc, hi_acc;
  const SoftmaxState all = pass(0, 6, all_acc);
  SoftmaxState lo = pass(0, 2, lo_acc);
  const SoftmaxState hi = pass(2, 6, hi_acc);
  lo.merge(hi, &lo_acc, &hi_acc, 1);
  EXPECT_FLOAT_EQ(lo.max, all.max);
  EXPECT_NEAR(lo_acc / lo.denom, all_acc / all.denom, 1e-6);
  SoftmaxState empty;
  float empty_acc = 0.0f;
  empty.merge(hi, &empty_acc, &hi_acc, 1);
  EXPECT_NEAR(empty_acc / empty.denom, hi_acc / hi.denom, 1e-6);
}

TEST(PagedAttention, RejectsMismatchedShapes) {
  const FormatInfo* f16 = find_format("f16");
  PagedKvCache cache({{{f16, {}}, {f16, {}}}}, {kKvHeads, kHeadDim, 16, 8});
  const SeqId seq = cache.create_sequence();
  std::vector<float> kv(kKvHeads * kHeadDim, 1.0f), q(kHeads * kHeadDim * 2), out(q.size());
  cache.append(seq, 0, kv.data(), kv.data(), 1);
  EXPECT_THROW(paged_attention(cache, seq, 0, {8}, q.data(), 1, out.data()), Error);  // 8 % 3 != 0
  EXPECT_THROW(paged_attention(cache, seq, 0, {kHeads}, q.data(), 2, out.data()), Error);  // 2 queries > 1 token
}

}  // namespace
}  // namespace kvgate::kernels
