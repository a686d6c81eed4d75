#include "kernels/attention_arithmetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/thread_pool.h"
#include "kernels/arithmetic_rounding.h"
#include "kernels/quantized_codec.h"
#include "kernels/simd_avx2.h"
#include "kernels/softmax_state.h"

namespace kvgate::kernels {
namespace {

constexpr int64_t kQueryBlock = 16;

// Scratch for one worker, sized once per call.
struct Scratch {
  std::vector<float> q;         // [rows][D] the rounded query, key codec's basis
  std::vector<float> scores;    // [rows][page]
  std::vector<float> keys;      // [page][D] decoded keys, for key_to_f16
  std::vector<float> values;    // [page][D] decoded values, value codec's basis
  std::vector<float> acc;       // [rows][D] f32 accumulator
  std::vector<uint16_t> acc16;  // [rows][D] f16 accumulator (f16_accumulator)
  std::vector<float> max, sum;  // [rows] per-key softmax state
  std::vector<SoftmaxState> state;  // [rows] per-page softmax state
  std::vector<int64_t> position;    // [rows]
  Scratch(size_t rows, int d, int page)
      : q(rows * d), scores(rows * page), keys(static_cast<size_t>(page) * d), values(static_cast<size_t>(page) * d),
        acc(rows * d), acc16(rows * d), max(rows), sum(rows), state(rows), position(rows) {}
};

struct Job {
  const KvLayerView* view;
  const AttentionArithmetic* a;
  const float* q;
  float* out;
  int64_t n_queries;
  int n_heads;
  int group;
  float scale;
};

// One KV head, query positions [q_begin, q_end).
void attend_block(const Job& job, int kv_head, int64_t q_begin, int64_t q_end, Scratch& s) {
  const KvLayerView& v = *job.view;
  const AttentionArithmetic& a = *job.a;
  const int D = v.head_dim, pt = v.page_tokens;
  const Codec& kc = *v.key.codec;
  const Codec& vc = *v.value.codec;
  const int rows = static_cast<int>(q_end - q_begin) * job.group;
  const int64_t first_pos = v.length - job.n_queries;
  float rotated[kMaxHeadDim];
  for (int r = 0; r < rows; ++r) {
    const int64_t qi = q_begin + r / job.group;
    const int head = kv_head * job.group + r % job.group;
    // The engines rotate the unscaled query (llama.cpp does it in the graph, before attention).
    kc.prepare_query(job.q + (static_cast<size_t>(qi) * job.n_heads + head) * D, rotated);
    if (a.query_prescaled)
      for (int i = 0; i < D; ++i) rotated[i] = rn_mul(rotated[i], job.scale);
    round_query(a, rotated, &s.q[static_cast<size_t>(r) * D], D);
    s.position[r] = first_pos + qi;
    s.max[r] = -INFINITY;
    s.sum[r] = 0.0f;
    s.state[r] = SoftmaxState{};
  }
  std::fill_n(s.acc.begin(), static_cast<size_t>(rows) * D, 0.0f);
  std::fill_n(s.acc16.begin(), static_cast<size_t>(rows) * D, uint16_t{0});
  const float score_scale = a.query_prescaled ? 1.0f : job.scale;
  const size_t kb = kc.group_bytes(), vb = vc.group_bytes();

  const int64_t visible_end = first_pos + q_end;
  const int64_t oldest_visible = v.window > 0 ? std::max<int64_t>(0, first_pos + q_begin - v.window + 1) : 0;
  for (int64_t ps = oldest_visible / pt * pt; ps < visible_end; ps += pt) {
    const int n = static_cast<int>(std::min<int64_t>(ps + pt, v.length) - ps);
    const uint8_t* key_rows = v.key.group_at(kv_head, ps, pt);
    const uint8_t* value_rows = v.value.group_at(kv_head, ps, pt);
    float* scores = s.scores.data();
    if (a.key_to_f16) {
      for (int t = 0; t < n; ++t) {
        float* k = &s.keys[static_cast<size_t>(t) * D];
        kc.dequantize_stored_ref(key_rows + static_cast<size_t>(t) * kb, k);
        for (int i = 0; i < D; ++i) k[i] = f16_rounded(k[i]);
        for (int r = 0; r < rows; ++r)
          scores[static_cast<size_t>(r) * n + t] = simd::dot_f32(&s.q[static_cast<size_t>(r) * D], k, D);
      }
    } else {
      kc.dot_rows(s.q.data(), rows, key_rows, n, scores);
    }
    for (int t = 0; t < n; ++t) {
      float* val = &s.values[static_cast<size_t>(t) * D];
      vc.dequantize_stored_ref(value_rows + static_cast<size_t>(t) * vb, val);
      if (a.value_to_f16)
        for (int i = 0; i < D; ++i) val[i] = f16_rounded(val[i]);
    }

    for (int r = 0; r < rows; ++r) {
      float* row = scores + static_cast<size_t>(r) * n;
      const int64_t pos = s.position[r];
      // Visible keys of this page: (pos - window, pos], as the fast path masks them.
      const int64_t t_end = std::min<int64_t>(n, pos + 1 - ps);
      const int64_t t_begin = v.window > 0 ? std::max<int64_t>(0, pos - v.window + 1 - ps) : 0;
      if (t_end <= t_begin) continue;
      float* acc = &s.acc[static_cast<size_t>(r) * D];
      if (a.per_key_softmax) {
        uint16_t* acc16 = &s.acc16[static_cast<size_t>(r) * D];
        for (int64_t t = t_begin; t < t_end; ++t) {
          const OneRowStep step = one_row_step(rn_mul(row[t], score_scale), s.max[r], s.sum[r]);
          const float* val = &s.values[static_cast<size_t>(t) * D];
          if (a.f16_accumulator)
            for (int i = 0; i < D; ++i) acc16[i] = one_row_accumulate_f16(step, acc16[i], val[i]);
          else
            for (int i = 0; i < D; ++i) acc[i] = one_row_accumulate(step, acc[i], val[i]);
        }
        continue;
      }
      // Tile kernels: the page's maximum first, then its weights (FA's per-tile online softmax).
      float chunk_max = -INFINITY;
      for (int64_t t = t_begin; t < t_end; ++t) chunk_max = tile_max(chunk_max, rn_mul(row[t], score_scale));
      SoftmaxState& st = s.state[r];
      const float rescale = st.raise_max(chunk_max);
      if (rescale != 1.0f)
        for (int i = 0; i < D; ++i) acc[i] = rn_mul(acc[i], rescale);
      float weight_sum = 0.0f;
      for (int64_t t = t_begin; t < t_end; ++t) {
        const float w = st.weight(rn_mul(row[t], score_scale));
        weight_sum = rn_add(weight_sum, w);
        const float wr = round_weight(a.weights, w);
        const float* val = &s.values[static_cast<size_t>(t) * D];
        for (int i = 0; i < D; ++i) acc[i] = tile_accumulate(acc[i], wr, val[i]);
      }
      st.add(weight_sum);
    }
  }

  for (int r = 0; r < rows; ++r) {
    const int64_t qi = q_begin + r / job.group;
    const int head = kv_head * job.group + r % job.group;
    float* dst = job.out + (static_cast<size_t>(qi) * job.n_heads + head) * D;
    const float* acc = &s.acc[static_cast<size_t>(r) * D];
    if (a.f16_accumulator)
      for (int i = 0; i < D; ++i) dst[i] = f16_to_f32(s.acc16[static_cast<size_t>(r) * D + i]);
    else
      std::memcpy(dst, acc, sizeof(float) * D);
    // ggml: V /= S as a multiply by 1/S (0 for a row that saw nothing), then llama.cpp rotates
    // the output back (llama-graph.cpp:3003-3005).
    const float inv = softmax_normalizer(a.per_key_softmax ? s.sum[r] : s.state[r].denom);
    for (int i = 0; i < D; ++i) dst[i] = rn_mul(dst[i], inv);
    vc.finish_output(dst);
  }
}

}  // namespace

void round_query(const AttentionArithmetic& a, const float* x, float* y, int n) {
  round_query_row(a.query, a.query_scale, x, y, n);
}

void arithmetic_paged_attention(const KvLayerView& view, const AttentionShape& shape, const AttentionArithmetic& arithmetic,
                                const float* q, int64_t n_queries, float* out, ThreadPool* pool) {
  for (const KvRoleView* role : {&view.key, &view.value})
    KVGATE_CHECK(role->codec->token_group() == 1 && role->window == nullptr,
                 "arithmetic attention reached a windowed or grouped format (" + std::string(role->codec->info().name) + ")");
  KVGATE_CHECK(view.head_dim <= kMaxHeadDim, "arithmetic attention: head_dim over the row buffer");
  Job job{&view,
          &arithmetic,
          q,
          out,
          n_queries,
          shape.n_heads,
          shape.n_heads / view.n_kv_heads,
          shape.scale != 0.0f ? shape.scale : 1.0f / std::sqrt(static_cast<float>(view.head_dim))};
  const int64_t blocks = (n_queries + kQueryBlock - 1) / kQueryBlock;
  const size_t units = static_cast<size_t>(blocks) * view.n_kv_heads;
  const size_t max_rows = static_cast<size_t>(std::min(n_queries, kQueryBlock)) * job.group;
  auto run_units = [&](int, size_t begin, size_t end) {
    if (begin >= end) return;
    Scratch scratch(max_rows, view.head_dim, view.page_tokens);
    for (size_t u = begin; u < end; ++u) {
      const int kv_head = static_cast<int>(u % view.n_kv_heads);
      const int64_t b = static_cast<int64_t>(u / view.n_kv_heads);
      attend_block(job, kv_head, b * kQueryBlock, std::min(n_queries, (b + 1) * kQueryBlock), scratch);
    }
  };
  if (pool) pool->run(units, run_units);
  else run_units(0, 0, units);
}

}  // namespace kvgate::kernels
