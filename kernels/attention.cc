#include "kernels/attention.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention_arithmetic.h"
#include "kernels/simd_avx2.h"

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
  std::vector<float> weight_sums;  // [rows] a page's weights summed, for the rows that see a key
  std::vector<uint8_t> sees_key;   // [rows] whether the row sees a key of the page
  Scratch(size_t rows, int head_dim, int page_tokens)
      : q_scaled(rows * head_dim), q_prepared(rows * head_dim), scores(rows * page_tokens), compact(rows * page_tokens),
        acc_stored(rows * head_dim), acc_window(rows * head_dim), state(rows), position(rows), weight_sums(rows),
        sees_key(rows) {}
};

// Asks for part of a head's share of a later page while this one is computed: one head's
// tokens of a page are a few KiB between other heads' data, too short a run for the hardware
// prefetcher to ramp up on, so without this each page starts with a stall on DRAM. The share is
// requested in `parts` pieces spread over the page's work (this call asks for piece `part`):
// all of it at once overflows the core's line fill buffers, and the prefetches that wait for one
// stall the core as a missing load would.
void prefetch_page(const KvRoleView& role, int kv_head, int64_t page_start, int64_t page_end, int page_tokens, int part,
                   int parts) {
  if (page_start >= std::min(page_end, role.quantized) || role.pages[page_start / page_tokens] == kDroppedPage) return;
  const char* p = reinterpret_cast<const char*>(role.group_at(kv_head, page_start, page_tokens));
  constexpr size_t kLine = 64;
  const size_t lines = (role.head_bytes + kLine - 1) / kLine;
  const size_t end = lines * static_cast<size_t>(part + 1) / static_cast<size_t>(parts);
  for (size_t line = lines * static_cast<size_t>(part) / static_cast<size_t>(parts); line < end; ++line)
    __builtin_prefetch(p + line * kLine);
}

// The largest of n scores in four independent chains (one serial chain waits out the compare's
// latency per score). Scores are never NaN here, so the order does not change the maximum; only
// the sign of a zero maximum could, and exp(score - max) does not see it.
float max_of(const float* x, int n) {
  float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int t = 0;
  for (; t + 4 <= n; t += 4)
    for (int k = 0; k < 4; ++k) m[k] = x[t + k] > m[k] ? x[t + k] : m[k];
  for (; t < n; ++t) m[0] = x[t] > m[0] ? x[t] : m[0];
  const float a = m[0] > m[1] ? m[0] : m[1], b = m[2] > m[3] ? m[2] : m[3];
  return a > b ? a : b;
}

// sums[r] = the n floats of row r (rows n apart) added in order from 0, as one row's serial
// loop would; up to eight rows side by side, so the adds' latency (a 32-add chain per row and
// page) is paid once per group of rows rather than once per row.
template <int kSide>
void row_sums_side_by_side(const float* x, int n, float* sums) {
  float s[kSide] = {};
  for (int t = 0; t < n; ++t)
    for (int k = 0; k < kSide; ++k) s[k] += x[static_cast<size_t>(k) * n + t];
  std::copy_n(s, kSide, sums);
}

void row_sums_in_order(const float* x, int rows, int n, float* sums) {
  for (int r = 0; r < rows; r += 8) {
    const float* at = x + static_cast<size_t>(r) * n;
    switch (std::min(rows - r, 8)) {
      case 8: row_sums_side_by_side<8>(at, n, sums + r); break;
      case 7: row_sums_side_by_side<7>(at, n, sums + r); break;
      case 6: row_sums_side_by_side<6>(at, n, sums + r); break;
      case 5: row_sums_side_by_side<5>(at, n, sums + r); break;
      case 4: row_sums_side_by_side<4>(at, n, sums + r); break;
      case 3: row_sums_side_by_side<3>(at, n, sums + r); break;
      case 2: row_sums_side_by_side<2>(at, n, sums + r); break;
      default: row_sums_side_by_side<1>(at, n, sums + r);
    }
  }
}

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

// Query positions [q_begin, q_end) of the query heads over one KV head: their rows' state.
void begin_rows(const Job& job, int kv_head, int64_t q_begin, int64_t q_end, Scratch& s) {
  const KvLayerView& v = *job.view;
  const int D = v.head_dim, n_heads = job.shape->n_heads;
  const Codec& kc = *v.key.codec;
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
}

// The page starting at token ps for those rows. The chunk runs to the page's end (or the
// sequence's) even past what the rows see, so a quantized run always covers whole token groups;
// the causal mask removes what a row may not see.
void attend_page(const Job& job, int kv_head, int64_t q_begin, int64_t q_end, int64_t ps, bool prefetch, Scratch& s) {
  const KvLayerView& v = *job.view;
  const int D = v.head_dim, pt = v.page_tokens;
  const Codec& kc = *v.key.codec;
  const Codec& vc = *v.value.codec;
  const int rows = static_cast<int>(q_end - q_begin) * job.group;
  const int64_t visible_end = v.length - job.n_queries + q_end;  // no row sees a token at or past this
  const int64_t pe = std::min<int64_t>(ps + pt, v.length);
  const int n = static_cast<int>(pe - ps);
  float* scores = s.scores.data();
  if (prefetch) prefetch_page(v.key, kv_head, ps + pt, visible_end, pt, 0, 2);

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

  if (prefetch) prefetch_page(v.key, kv_head, ps + pt, visible_end, pt, 1, 2);

  for (int r = 0; r < rows; ++r) {
    float* row = scores + static_cast<size_t>(r) * n;
    const int64_t pos = s.position[r];
    for (int64_t t = std::max<int64_t>(pos + 1 - ps, 0); t < n; ++t) row[t] = -INFINITY;
    if (v.window > 0)
      for (int64_t t = 0; t < std::min<int64_t>(pos - v.window + 1 - ps, n); ++t) row[t] = -INFINITY;
    const float chunk_max = max_of(row, n);
    s.sees_key[r] = chunk_max != -INFINITY;
    if (!s.sees_key[r]) {
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
    // st.weight for each score (the max is finite now), 8 at a time.
    simd::softmax_weights(row, n, st.max, row);
  }
  row_sums_in_order(scores, rows, n, s.weight_sums.data());
  for (int r = 0; r < rows; ++r)
    if (s.sees_key[r]) s.state[r].add(s.weight_sums[r]);

  if (prefetch) prefetch_page(v.value, kv_head, ps + pt, visible_end, pt, 0, 2);
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
  if (prefetch) prefetch_page(v.value, kv_head, ps + pt, visible_end, pt, 1, 2);
}

// The rows' outputs once every page is in.
void finish_rows(const Job& job, int kv_head, int64_t q_begin, int64_t q_end, Scratch& s) {
  const KvLayerView& v = *job.view;
  const int D = v.head_dim, n_heads = job.shape->n_heads;
  const Codec& vc = *v.value.codec;
  const int rows = static_cast<int>(q_end - q_begin) * job.group;
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

// KV heads [h_begin, h_end) for query positions [q_begin, q_end), page by page and, within a
// page, head by head. The heads' shares of a page lie next to each other, so the walk reads the
// cache in runs of several heads that the hardware prefetcher follows; one head at a time, the
// runs are a few KiB apart and need the software prefetch, which competes for the line fill
// buffers. A head's arithmetic does not depend on which heads share the walk.
void attend_heads(const Job& job, int h_begin, int h_end, int64_t q_begin, int64_t q_end, std::vector<Scratch>& s) {
  const KvLayerView& v = *job.view;
  const int pt = v.page_tokens;
  for (int h = h_begin; h < h_end; ++h) begin_rows(job, h, q_begin, q_end, s[static_cast<size_t>(h - h_begin)]);
  const int64_t first_pos = v.length - job.n_queries;
  const int64_t visible_end = first_pos + q_end;
  // A sliding window hides keys at or before position - window from each row; the block's
  // first row sees the oldest ones, and pages before them may have been dropped.
  const int64_t oldest_visible = v.window > 0 ? std::max<int64_t>(0, first_pos + q_begin - v.window + 1) : 0;
  for (int64_t ps = oldest_visible / pt * pt; ps < visible_end; ps += pt)
    for (int h = h_begin; h < h_end; ++h)
      attend_page(job, h, q_begin, q_end, ps, h_end - h_begin == 1, s[static_cast<size_t>(h - h_begin)]);
  for (int h = h_begin; h < h_end; ++h) finish_rows(job, h, q_begin, q_end, s[static_cast<size_t>(h - h_begin)]);
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
  if (view.arithmetic != Arithmetic::exact) {
    const Codec& kc = *view.key.codec;
    const AttentionArithmetic arithmetic =
        resolve_arithmetic(view.arithmetic, kc.info(), view.value.codec->info(), n_queries, view.head_dim, kc.options().scale);
    if (!arithmetic.exact()) return arithmetic_paged_attention(view, shape, arithmetic, q, n_queries, out, pool);
  }
  Job job{&view, &shape, q, out, n_queries, shape.n_heads / view.n_kv_heads,
          shape.scale != 0.0f ? shape.scale : 1.0f / std::sqrt(static_cast<float>(view.head_dim))};
  const int64_t blocks = (n_queries + kQueryBlock - 1) / kQueryBlock;
  // A decode step (one query block) walks several heads per unit, as few units as keep every
  // thread busy; longer chunks keep one head per unit, whose rows' state is already large.
  const int threads = pool ? pool->size() : 1;
  const int heads_per_unit = blocks == 1 ? (view.n_kv_heads + threads - 1) / threads : 1;
  const int head_units = (view.n_kv_heads + heads_per_unit - 1) / heads_per_unit;
  const size_t units = static_cast<size_t>(blocks) * head_units;
  const size_t max_rows = static_cast<size_t>(std::min(n_queries, kQueryBlock)) * job.group;
  auto run_units = [&](int, size_t begin, size_t end) {
    if (begin >= end) return;
    std::vector<Scratch> scratch(static_cast<size_t>(heads_per_unit), Scratch(max_rows, view.head_dim, view.page_tokens));
    for (size_t u = begin; u < end; ++u) {
      const int h_begin = static_cast<int>(u % head_units) * heads_per_unit;
      const int64_t b = static_cast<int64_t>(u / head_units);
      attend_heads(job, h_begin, std::min(view.n_kv_heads, h_begin + heads_per_unit), b * kQueryBlock,
                   std::min(n_queries, (b + 1) * kQueryBlock), scratch);
    }
  };
  if (pool) {
    pool->run(units, run_units);
  } else {
    run_units(0, 0, units);
  }
}

}  // namespace kvgate::kernels
