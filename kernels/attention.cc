#include "kernels/attention.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention_engine.h"

namespace kvgate::kernels {
namespace {

// Query positions handled together: each page is loaded once for all of them and all query
// heads of the GQA group.
constexpr int64_t kQueryBlock = 16;

// Scratch for one worker, sized once per call so the page loop never allocates.
struct Scratch {
  std::vector<float> q_scaled;    // [rows][D] scale * q, original basis (dotted with window keys)
  std::vector<float> q_prepared;  // [rows][D] key codec's basis (dotted with quantized keys)
  std::vector<float> scores;      // [rows][chunk] scores, then softmax weights
  std::vector<float> compact;     // [rows][part of chunk] for page runs that stop mid-page
  std::vector<float> acc_stored;  // [rows][D] sum w * v over quantized values, value codec's basis
  std::vector<float> acc_window;  // [rows][D] sum w * v over window values, original basis
  std::vector<SoftmaxState> state;
  std::vector<int64_t> position;  // [rows] the query's own position
  Scratch(size_t rows, int head_dim, int page_tokens)
      : q_scaled(rows * head_dim), q_prepared(rows * head_dim), scores(rows * page_tokens), compact(rows * page_tokens),
        acc_stored(rows * head_dim), acc_window(rows * head_dim), state(rows), position(rows) {}
};

float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

struct Job {
  const KvLayerView* view;
  const AttentionShape* shape;
  const float* q;
  float* out;
  int64_t n_queries;
  int group;  // query heads per KV head
  float scale;
};

// One KV head, query positions [q_begin, q_end).
void attend_block(const Job& job, int kv_head, int64_t q_begin, int64_t q_end, Scratch& s) {
  const KvLayerView& v = *job.view;
  const int D = v.head_dim, pt = v.page_tokens, n_heads = job.shape->n_heads;
  const Codec& kc = *v.key.codec;
  const Codec& vc = *v.value.codec;
  const int rows = static_cast<int>(q_end - q_begin) * job.group;
  const int64_t first_pos = v.length - job.n_queries;
  for (int r = 0; r < rows; ++r) {
    const int64_t qi = q_begin + r / job.group;
    const int head = kv_head * job.group + r % job.group;
    const float* src = job.q + (static_cast<size_t>(qi) * n_heads + head) * D;
    float* qs = &s.q_scaled[static_cast<size_t>(r) * D];
    for (int i = 0; i < D; ++i) qs[i] = src[i] * job.scale;
    kc.prepare_query(qs, &s.q_prepared[static_cast<size_t>(r) * D]);
    s.position[r] = first_pos + qi;
    s.state[r] = SoftmaxState{};
  }
  std::fill_n(s.acc_stored.begin(), static_cast<size_t>(rows) * D, 0.0f);
  std::fill_n(s.acc_window.begin(), static_cast<size_t>(rows) * D, 0.0f);

  const int64_t visible_end = first_pos + q_end;  // no row sees a token at or past this
  // A sliding window hides keys at or before position - window from each row; the block's
  // first row sees the oldest ones, and pages before them may have been dropped.
  const int64_t oldest_visible = v.window > 0 ? std::max<int64_t>(0, first_pos + q_begin - v.window + 1) : 0;
  for (int64_t ps = oldest_visible / pt * pt; ps < visible_end; ps += pt) {
    // The chunk runs to the page's end (or the sequence's) even past visible_end, so a quantized
    // run always covers whole token groups; the causal mask removes what a row may not see.
    const int64_t pe = std::min<int64_t>(ps + pt, v.length);
    const int n = static_cast<int>(pe - ps);
    float* scores = s.scores.data();

    const int nk = static_cast<int>(std::clamp(v.key.quantized, ps, pe) - ps);
    if (nk == n) {
      kc.dot_rows(s.q_prepared.data(), rows, v.key.group_at(kv_head, ps, pt), n, scores);
    } else {
      if (nk > 0) {
        kc.dot_rows(s.q_prepared.data(), rows, v.key.group_at(kv_head, ps, pt), nk, s.compact.data());
        for (int r = 0; r < rows; ++r)
          std::memcpy(scores + static_cast<size_t>(r) * n, &s.compact[static_cast<size_t>(r) * nk], sizeof(float) * nk);
      }
      for (int t = nk; t < n; ++t) {
        const float* key = v.key.window_row(kv_head, ps + t, D);
        for (int r = 0; r < rows; ++r) scores[static_cast<size_t>(r) * n + t] = dot(&s.q_scaled[static_cast<size_t>(r) * D], key, D);
      }
    }

    for (int r = 0; r < rows; ++r) {
      float* row = scores + static_cast<size_t>(r) * n;
      const int64_t pos = s.position[r];
      for (int64_t t = std::max<int64_t>(pos + 1 - ps, 0); t < n; ++t) row[t] = -INFINITY;
      if (v.window > 0)
        for (int64_t t = 0; t < std::min<int64_t>(pos - v.window + 1 - ps, n); ++t) row[t] = -INFINITY;
      float chunk_max = -INFINITY;
      // A plain compare, not std::fmax: scores are never NaN here and fmax is a libm call per score.
      for (int t = 0; t < n; ++t) chunk_max = row[t] > chunk_max ? row[t] : chunk_max;
      if (chunk_max == -INFINITY) {
        std::fill_n(row, n, 0.0f);
        continue;
      }
      SoftmaxState& st = s.state[r];
      // Multiplying by a factor of exactly 1 would change no bit, so it is skipped.
      const float rescale = st.raise_max(chunk_max);
      if (rescale != 1.0f) {
        float* as = &s.acc_stored[static_cast<size_t>(r) * D];
        float* aw = &s.acc_window[static_cast<size_t>(r) * D];
        for (int i = 0; i < D; ++i) {
          as[i] *= rescale;
          aw[i] *= rescale;
        }
      }
      float sum = 0.0f;
      for (int t = 0; t < n; ++t) {
        row[t] = st.weight(row[t]);
        sum += row[t];
      }
      st.add(sum);
    }

    const int nv = static_cast<int>(std::clamp(v.value.quantized, ps, pe) - ps);
    if (nv == n) {
      vc.axpy_rows(scores, rows, v.value.group_at(kv_head, ps, pt), n, s.acc_stored.data());
    } else {
      if (nv > 0) {
        for (int r = 0; r < rows; ++r)
          std::memcpy(&s.compact[static_cast<size_t>(r) * nv], scores + static_cast<size_t>(r) * n, sizeof(float) * nv);
        vc.axpy_rows(s.compact.data(), rows, v.value.group_at(kv_head, ps, pt), nv, s.acc_stored.data());
      }
      for (int t = nv; t < n; ++t) {
        const float* value = v.value.window_row(kv_head, ps + t, D);
        for (int r = 0; r < rows; ++r) {
          const float w = scores[static_cast<size_t>(r) * n + t];
          if (w == 0.0f) continue;
          float* aw = &s.acc_window[static_cast<size_t>(r) * D];
          for (int i = 0; i < D; ++i) aw[i] += w * value[i];
        }
      }
    }
  }

  for (int r = 0; r < rows; ++r) {
    const int64_t qi = q_begin + r / job.group;
    const int head = kv_head * job.group + r % job.group;
    float* as = &s.acc_stored[static_cast<size_t>(r) * D];
    const float* aw = &s.acc_window[static_cast<size_t>(r) * D];
    vc.finish_output(as);
    const float inv = s.state[r].normalizer();
    float* dst = job.out + (static_cast<size_t>(qi) * n_heads + head) * D;
    for (int i = 0; i < D; ++i) dst[i] = (as[i] + aw[i]) * inv;
  }
}

}  // namespace

void paged_attention(const PagedKvCache& cache, SeqId seq, int layer, const AttentionShape& shape, const float* q,
                     int64_t n_queries, float* out, ThreadPool* pool) {
  const KvLayerView view = cache.view(seq, layer);
  if (shape.n_heads <= 0 || shape.n_heads % view.n_kv_heads != 0)
    throw_usage_error("attention: " + std::to_string(shape.n_heads) + " query heads are not a multiple of the cache's " +
                      std::to_string(view.n_kv_heads) + " KV heads");
  if (n_queries < 0 || n_queries > view.length)
    throw_usage_error("attention: " + std::to_string(n_queries) + " queries, but layer " + std::to_string(layer) +
                      " holds " + std::to_string(view.length) + " tokens (append a chunk's K/V before attending)");
  if (n_queries == 0) return;
  // An engine whose kernel rounds something goes to its own path; exact arithmetic stays here.
  if (view.engine != Engine::exact) {
    const Codec& kc = *view.key.codec;
    const AttentionArithmetic arithmetic =
        resolve_arithmetic(view.engine, kc.info(), view.value.codec->info(), n_queries, view.head_dim, kc.options().scale);
    if (!arithmetic.exact()) return engine_paged_attention(view, shape, arithmetic, q, n_queries, out, pool);
  }
  Job job{&view, &shape, q, out, n_queries, shape.n_heads / view.n_kv_heads,
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
  if (pool) {
    pool->run(units, run_units);
  } else {
    run_units(0, 0, units);
  }
}

}  // namespace kvgate::kernels
