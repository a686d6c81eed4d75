#include "kernels/attention_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/thread_pool.h"
#include "kernels/ggml_blocks.h"
#include "kernels/quantized_codec.h"
#include "kernels/simd_avx2.h"
#include "kernels/softmax_state.h"

namespace kvgate::kernels {
namespace {

constexpr int64_t kQueryBlock = 16;

float to_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

float round_weight(WeightRounding r, float w) {
  switch (r) {
    case WeightRounding::none: return w;
    case WeightRounding::f16: return to_f16(w);
    case WeightRounding::fp8_e4m3_256:
      // P * 256 in E4M3 (exact scalings by powers of two); the denominator keeps the f32 P.
      return fp8_to_f32(f32_to_fp8(w * 256.0f, Fp8Kind::e4m3fn), Fp8Kind::e4m3fn) * (1.0f / 256.0f);
  }
  return w;
}

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

// ggml-cpu's one-row kernel for one query row and key (ops.cpp:8966-9031): a new maximum rescales
// the accumulator by exp(old - new) and adds the value with weight 1; otherwise the value enters
// with exp(s - max). An f16 accumulator is rounded after every scale and every fused add
// (ggml_vec_scale_f16, ggml_vec_mad_f16: f16 -> f32, FMA, back to f16).
void one_row_step(float s, const float* v, int d, bool f16_acc, float& max, float& sum, float* acc, uint16_t* acc16) {
  float ms = 1.0f, vs = 1.0f;
  if (s > max) {
    ms = std::exp(max - s);
    max = s;
    if (f16_acc)
      for (int i = 0; i < d; ++i) acc16[i] = f32_to_f16(f16_to_f32(acc16[i]) * ms);
    else
      for (int i = 0; i < d; ++i) acc[i] *= ms;
  } else {
    vs = std::exp(s - max);
  }
  if (f16_acc)
    for (int i = 0; i < d; ++i) acc16[i] = f32_to_f16(std::fma(v[i], vs, f16_to_f32(acc16[i])));
  else
    for (int i = 0; i < d; ++i) acc[i] = std::fma(v[i], vs, acc[i]);
  sum = sum * ms + vs;
}

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
      for (int i = 0; i < D; ++i) rotated[i] *= job.scale;
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
        for (int i = 0; i < D; ++i) k[i] = to_f16(k[i]);
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
        for (int i = 0; i < D; ++i) val[i] = to_f16(val[i]);
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
        for (int64_t t = t_begin; t < t_end; ++t)
          one_row_step(row[t] * score_scale, &s.values[static_cast<size_t>(t) * D], D, a.f16_accumulator, s.max[r],
                       s.sum[r], acc, acc16);
        continue;
      }
      // Tile kernels: the page's maximum first, then its weights (FA's per-tile online softmax).
      float chunk_max = -INFINITY;
      for (int64_t t = t_begin; t < t_end; ++t) chunk_max = std::max(chunk_max, row[t] * score_scale);
      SoftmaxState& st = s.state[r];
      const float rescale = st.raise_max(chunk_max);
      if (rescale != 1.0f)
        for (int i = 0; i < D; ++i) acc[i] *= rescale;
      float weight_sum = 0.0f;
      for (int64_t t = t_begin; t < t_end; ++t) {
        const float w = st.weight(row[t] * score_scale);
        weight_sum += w;
        const float wr = round_weight(a.weights, w);
        const float* val = &s.values[static_cast<size_t>(t) * D];
        for (int i = 0; i < D; ++i) acc[i] = std::fma(wr, val[i], acc[i]);
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
    const float denom = a.per_key_softmax ? s.sum[r] : s.state[r].denom;
    const float inv = denom == 0.0f ? 0.0f : 1.0f / denom;
    for (int i = 0; i < D; ++i) dst[i] *= inv;
    vc.finish_output(dst);
  }
}

}  // namespace

void round_query(const AttentionArithmetic& a, const float* x, float* y, int n) {
  uint8_t block[64];
  switch (a.query) {
    case QueryRounding::unsupported:
    case QueryRounding::none:
      if (y != x) std::memmove(y, x, sizeof(float) * n);
      return;
    case QueryRounding::f16:
      for (int i = 0; i < n; ++i) y[i] = to_f16(x[i]);
      return;
    case QueryRounding::bf16:
      for (int i = 0; i < n; ++i) y[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    case QueryRounding::q8_0:
      for (int i = 0; i < n; i += ggml::kBlock) {
        ggml::Q8_0::quantize_x86(x + i, block);
        ggml::Q8_0::dequantize(block, y + i);
      }
      return;
    case QueryRounding::q8_1:
      for (int i = 0; i < n; i += ggml::kBlock) {
        ggml::Q8_1::quantize_x86(x + i, block);
        ggml::Q8_1::dequantize(block, y + i);
      }
      return;
    case QueryRounding::q8_1_cuda:
      for (int i = 0; i < n; i += ggml::kBlock) ggml::q8_1_cuda_fattn_values(x + i, y + i);
      return;
    case QueryRounding::fp8_e4m3:
      for (int i = 0; i < n; ++i)
        y[i] = fp8_to_f32(f32_to_fp8(x[i] / a.query_scale, Fp8Kind::e4m3fn), Fp8Kind::e4m3fn) * a.query_scale;
      return;
  }
}

void engine_paged_attention(const KvLayerView& view, const AttentionShape& shape, const AttentionArithmetic& arithmetic,
                            const float* q, int64_t n_queries, float* out, ThreadPool* pool) {
  for (const KvRoleView* role : {&view.key, &view.value})
    KVGATE_CHECK(role->codec->token_group() == 1 && role->window == nullptr,
                 "engine attention reached a windowed or grouped format (" + std::string(role->codec->info().name) + ")");
  KVGATE_CHECK(view.head_dim <= kMaxHeadDim, "engine attention: head_dim over the row buffer");
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
