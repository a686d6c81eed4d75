#include "kernels/paged_kv_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string>

#include "core/error.h"
#include "core/float_convert.h"

namespace kvgate::kernels {

std::vector<LayerFormats> layer_formats(const KvConfig& config, int n_layers) {
  std::vector<LayerFormats> out;
  out.reserve(static_cast<size_t>(std::max(0, n_layers)));
  for (int layer = 0; layer < n_layers; ++layer)
    out.push_back({config.key_for_layer(layer, n_layers), config.value_for_layer(layer, n_layers), config.arithmetic});
  return out;
}

namespace {

// The pool is allocated up front; anything beyond this is certainly a mistaken flag.
constexpr size_t kMaxPoolBytes = size_t{1} << 40;

float round_to_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

PagedKvCache::PagedKvCache(const std::vector<LayerFormats>& layers, const PagedKvCacheShape& shape) : shape_(shape) {
  if (layers.empty()) throw_usage_error("paged KV cache: at least one layer is needed");
  if (shape.n_kv_heads <= 0 || shape.n_kv_heads > 1024)
    throw_usage_error("paged KV cache: n_kv_heads " + std::to_string(shape.n_kv_heads) + " is out of range (1..1024)");
  if (shape.page_tokens <= 0 || shape.page_tokens > 4096)
    throw_usage_error("paged KV cache: page_tokens " + std::to_string(shape.page_tokens) + " is out of range (1..4096)");
  if (shape.capacity_pages <= 0 || shape.capacity_pages > std::numeric_limits<int32_t>::max())
    throw_usage_error("paged KV cache: capacity of " + std::to_string(shape.capacity_pages) + " pages is out of range");
  if (shape.window < 0) throw_usage_error("paged KV cache: negative sliding window " + std::to_string(shape.window));
  size_t bytes_per_page = 0;
  layers_.resize(layers.size());
  for (size_t l = 0; l < layers.size(); ++l) {
    layers_[l].arithmetic = layers[l].arithmetic;
    for (KvRole role : {KvRole::key, KvRole::value}) {
      const FormatSpec& spec = role == KvRole::key ? layers[l].key : layers[l].value;
      RoleStore& rs = role == KvRole::key ? layers_[l].key : layers_[l].value;
      if (!spec.format) throw_usage_error("paged KV cache: layer " + std::to_string(l) + " has no format");
      rs.codec = make_codec(*spec.format, shape.head_dim, spec.options);
      rs.group = rs.codec->token_group();
      rs.residual = rs.codec->residual_tokens();
      if (rs.group <= 0 || shape.page_tokens % rs.group != 0)
        throw_usage_error("paged KV cache: page_tokens " + std::to_string(shape.page_tokens) +
                          " is not a multiple of format " + std::string(spec.format->name) + "'s token group " +
                          std::to_string(rs.group));
      rs.head_bytes = static_cast<size_t>(shape.page_tokens / rs.group) * rs.codec->group_bytes();
      rs.page_bytes = rs.head_bytes * static_cast<size_t>(shape.n_kv_heads);
      bytes_per_page += rs.page_bytes;
    }
  }
  if (bytes_per_page == 0 || static_cast<size_t>(shape.capacity_pages) > kMaxPoolBytes / bytes_per_page)
    throw_usage_error("paged KV cache: " + std::to_string(shape.capacity_pages) + " pages of " +
                      std::to_string(bytes_per_page) + " bytes exceed the 1 TiB limit");
  for (Layer& layer : layers_)
    for (RoleStore* rs : {&layer.key, &layer.value})
      rs->pool = std::make_unique_for_overwrite<uint8_t[]>(rs->page_bytes * static_cast<size_t>(shape.capacity_pages));
  refcount_.assign(static_cast<size_t>(shape.capacity_pages), 0);
  free_list_.reserve(static_cast<size_t>(shape.capacity_pages));
  for (int64_t p = shape.capacity_pages - 1; p >= 0; --p) free_list_.push_back(static_cast<int32_t>(p));
}

const Codec& PagedKvCache::codec(int layer, KvRole role) const { return *store(layer, role).codec; }

const PagedKvCache::RoleStore& PagedKvCache::store(int layer, KvRole role) const {
  check_layer(layer);
  const Layer& l = layers_[static_cast<size_t>(layer)];
  return role == KvRole::key ? l.key : l.value;
}

void PagedKvCache::check_layer(int layer) const {
  if (layer < 0 || layer >= n_layers())
    throw_usage_error("paged KV cache: layer " + std::to_string(layer) + " is out of range (0.." +
                      std::to_string(n_layers() - 1) + ")");
}

PagedKvCache::Sequence& PagedKvCache::seq_ref(SeqId seq) {
  return const_cast<Sequence&>(static_cast<const PagedKvCache*>(this)->seq_ref(seq));
}

const PagedKvCache::Sequence& PagedKvCache::seq_ref(SeqId seq) const {
  if (seq < 0 || static_cast<size_t>(seq) >= sequences_.size() || !sequences_[static_cast<size_t>(seq)].live)
    throw_usage_error("paged KV cache: no live sequence " + std::to_string(seq));
  return sequences_[static_cast<size_t>(seq)];
}

SeqId PagedKvCache::create_sequence() {
  Sequence s;
  s.live = true;
  s.lengths.assign(layers_.size(), 0);
  s.key_windows.resize(layers_.size());
  s.value_windows.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (KvRole role : {KvRole::key, KvRole::value}) {
      const RoleStore& rs = role == KvRole::key ? layers_[l].key : layers_[l].value;
      Window& w = role == KvRole::key ? s.key_windows[l] : s.value_windows[l];
      if (rs.windowed())
        w.tokens.assign(static_cast<size_t>(shape_.n_kv_heads) * rs.window_capacity() * shape_.head_dim, 0.0f);
    }
  }
  for (size_t i = 0; i < sequences_.size(); ++i) {
    if (!sequences_[i].live) {
      sequences_[i] = std::move(s);
      return static_cast<SeqId>(i);
    }
  }
  sequences_.push_back(std::move(s));
  return static_cast<SeqId>(sequences_.size() - 1);
}

int32_t PagedKvCache::allocate_page() {
  KVGATE_CHECK(!free_list_.empty(), "page allocation after the capacity check");
  const int32_t page = free_list_.back();
  free_list_.pop_back();
  refcount_[static_cast<size_t>(page)] = 1;
  return page;
}

void PagedKvCache::unref_page(int32_t page) {
  int32_t& rc = refcount_[static_cast<size_t>(page)];
  KVGATE_CHECK(rc > 0, "page released more often than referenced");
  if (--rc == 0) free_list_.push_back(page);
}

int32_t PagedKvCache::writable_page(Sequence& s, size_t index) {
  const int32_t page = s.pages[index];
  if (refcount_[static_cast<size_t>(page)] == 1) return page;
  const int32_t copy = allocate_page();
  for (Layer& layer : layers_)
    for (RoleStore* rs : {&layer.key, &layer.value})
      std::memcpy(rs->pool.get() + static_cast<size_t>(copy) * rs->page_bytes,
                  rs->pool.get() + static_cast<size_t>(page) * rs->page_bytes, rs->page_bytes);
  unref_page(page);
  s.pages[index] = copy;
  return copy;
}

int64_t PagedKvCache::pages_needed_for_append(const Sequence& s, int layer, int64_t n_tokens) const {
  const int64_t pt = shape_.page_tokens;
  const int64_t old_len = s.lengths[static_cast<size_t>(layer)];
  const int64_t new_len = old_len + n_tokens;
  const int64_t have = static_cast<int64_t>(s.pages.size());
  int64_t needed = std::max<int64_t>(0, ceil_div(new_len, pt) - have);
  // Existing pages this append writes into and that are shared must be copied first.
  std::set<int64_t> copies;
  const Layer& l = layers_[static_cast<size_t>(layer)];
  for (KvRole role : {KvRole::key, KvRole::value}) {
    const RoleStore& rs = role == KvRole::key ? l.key : l.value;
    const Window& w = role == KvRole::key ? s.key_windows[static_cast<size_t>(layer)] : s.value_windows[static_cast<size_t>(layer)];
    const int64_t first = rs.windowed() ? w.quantized : old_len;
    const int64_t last = rs.windowed() ? std::max(w.quantized, rs.quantized_for(new_len)) : new_len;
    if (last <= first) continue;
    for (int64_t idx = first / pt; idx <= (last - 1) / pt && idx < have; ++idx) {
      const int32_t page = s.pages[static_cast<size_t>(idx)];
      if (page != kDroppedPage && refcount_[static_cast<size_t>(page)] > 1) copies.insert(idx);
    }
  }
  return needed + static_cast<int64_t>(copies.size());
}

void PagedKvCache::append(SeqId seq, int layer, const float* k, const float* v, int64_t n_tokens) {
  check_layer(layer);
  Sequence& s = seq_ref(seq);
  if (n_tokens < 0) throw_usage_error("paged KV cache: negative token count");
  if (n_tokens == 0) return;
  drop_pages_behind_window(s);
  const int64_t needed = pages_needed_for_append(s, layer, n_tokens);
  if (needed > free_pages())
    throw_usage_error("KV cache is full: appending " + std::to_string(n_tokens) + " tokens to layer " +
                      std::to_string(layer) + " needs " + std::to_string(needed) + " more pages, " +
                      std::to_string(free_pages()) + " of " + std::to_string(shape_.capacity_pages) + " are free");
  const int64_t old_len = s.lengths[static_cast<size_t>(layer)];
  while (static_cast<int64_t>(s.pages.size()) * shape_.page_tokens < old_len + n_tokens) s.pages.push_back(allocate_page());
  Layer& l = layers_[static_cast<size_t>(layer)];
  append_role(s, l.key, s.key_windows[static_cast<size_t>(layer)], old_len, k, n_tokens);
  append_role(s, l.value, s.value_windows[static_cast<size_t>(layer)], old_len, v, n_tokens);
  s.lengths[static_cast<size_t>(layer)] = old_len + n_tokens;
}

void PagedKvCache::quantize_group(Sequence& s, RoleStore& rs, int h, int64_t first_token, const float* rows) {
  const int64_t pt = shape_.page_tokens;
  // A group that leaves a format's f16 window after its page fell out of the sliding window is
  // outside every future query's view: there is nothing to store.
  if (s.pages[static_cast<size_t>(first_token / pt)] == kDroppedPage) return;
  const int32_t page = writable_page(s, static_cast<size_t>(first_token / pt));
  uint8_t* dst = rs.pool.get() + static_cast<size_t>(page) * rs.page_bytes + static_cast<size_t>(h) * rs.head_bytes +
                 static_cast<size_t>((first_token % pt) / rs.group) * rs.codec->group_bytes();
  rs.codec->quantize(rows, dst);
}

void PagedKvCache::append_role(Sequence& s, RoleStore& rs, Window& w, int64_t old_len, const float* x, int64_t n_tokens) {
  const int H = shape_.n_kv_heads, D = shape_.head_dim;
  if (!rs.windowed()) {
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int h = 0; h < H; ++h)
        quantize_group(s, rs, h, old_len + t, x + (static_cast<size_t>(t) * H + h) * D);
    return;
  }
  const int64_t cap = rs.window_capacity();
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t pos = old_len + t;
    for (int h = 0; h < H; ++h) {
      const float* src = x + (static_cast<size_t>(t) * H + h) * D;
      float* dst = w.tokens.data() + (static_cast<size_t>(h) * cap + static_cast<size_t>(pos - w.quantized)) * D;
      for (int i = 0; i < D; ++i) dst[i] = round_to_f16(src[i]);
    }
    // The oldest whole group leaves the window once the window would exceed R + G - 1 tokens.
    if (pos + 1 - w.quantized >= cap) {
      for (int h = 0; h < H; ++h) {
        float* head = w.tokens.data() + static_cast<size_t>(h) * cap * D;
        quantize_group(s, rs, h, w.quantized, head);
        std::memmove(head, head + static_cast<size_t>(rs.group) * D, sizeof(float) * static_cast<size_t>(cap - rs.group) * D);
      }
      w.quantized += rs.group;
    }
  }
}

PagedKvCache::Window PagedKvCache::cut_window(const RoleStore& rs, const Window& src, const std::vector<int32_t>& pages,
                                              int64_t n_tokens) const {
  Window out;
  if (!rs.windowed()) return out;
  const int H = shape_.n_kv_heads, D = shape_.head_dim;
  const int64_t cap = rs.window_capacity();
  out.quantized = std::min(src.quantized, n_tokens / rs.group * rs.group);
  out.tokens.assign(static_cast<size_t>(H) * cap * D, 0.0f);
  std::vector<float> group(static_cast<size_t>(rs.group) * D);
  for (int h = 0; h < H; ++h) {
    const float* src_head = src.tokens.data() + static_cast<size_t>(h) * cap * D;
    float* dst_head = out.tokens.data() + static_cast<size_t>(h) * cap * D;
    if (out.quantized < src.quantized && out.quantized < n_tokens) {
      // The cut falls inside a group the source already quantized: recover its first tokens
      // from the dequantized group.
      const int64_t pt = shape_.page_tokens;
      const uint8_t* bytes = rs.pool.get() + static_cast<size_t>(pages[static_cast<size_t>(out.quantized / pt)]) * rs.page_bytes +
                             static_cast<size_t>(h) * rs.head_bytes +
                             static_cast<size_t>((out.quantized % pt) / rs.group) * rs.codec->group_bytes();
      rs.codec->dequantize_ref(bytes, group.data());
      for (int64_t p = out.quantized; p < std::min(n_tokens, src.quantized); ++p)
        for (int i = 0; i < D; ++i)
          dst_head[static_cast<size_t>(p - out.quantized) * D + i] = round_to_f16(group[static_cast<size_t>(p - out.quantized) * D + i]);
    }
    for (int64_t p = std::max(out.quantized, src.quantized); p < n_tokens; ++p)
      std::memcpy(dst_head + static_cast<size_t>(p - out.quantized) * D, src_head + static_cast<size_t>(p - src.quantized) * D,
                  sizeof(float) * D);
  }
  return out;
}

SeqId PagedKvCache::fork(SeqId parent, int64_t n_tokens) {
  Sequence child;
  {
    const Sequence& p = seq_ref(parent);
    const int64_t available = length(parent);
    if (n_tokens < 0 || n_tokens > available)
      throw_usage_error("paged KV cache: cannot fork " + std::to_string(n_tokens) + " tokens of sequence " +
                        std::to_string(parent) + ", which holds " + std::to_string(available));
    check_window_kept(p, n_tokens, "fork");
    child.live = true;
    child.pages.assign(p.pages.begin(), p.pages.begin() + ceil_div(n_tokens, shape_.page_tokens));
    child.lengths.assign(layers_.size(), n_tokens);
    for (size_t l = 0; l < layers_.size(); ++l) {
      child.key_windows.push_back(cut_window(layers_[l].key, p.key_windows[l], p.pages, n_tokens));
      child.value_windows.push_back(cut_window(layers_[l].value, p.value_windows[l], p.pages, n_tokens));
    }
  }
  for (int32_t page : child.pages)
    if (page != kDroppedPage) ++refcount_[static_cast<size_t>(page)];
  for (size_t i = 0; i < sequences_.size(); ++i) {
    if (!sequences_[i].live) {
      sequences_[i] = std::move(child);
      return static_cast<SeqId>(i);
    }
  }
  sequences_.push_back(std::move(child));
  return static_cast<SeqId>(sequences_.size() - 1);
}

void PagedKvCache::truncate(SeqId seq, int64_t n_tokens) {
  Sequence& s = seq_ref(seq);
  const int64_t available = length(seq);
  if (n_tokens < 0 || n_tokens > available)
    throw_usage_error("paged KV cache: cannot truncate sequence " + std::to_string(seq) + " to " +
                      std::to_string(n_tokens) + " tokens; it holds " + std::to_string(available));
  check_window_kept(s, n_tokens, "truncate");
  for (size_t l = 0; l < layers_.size(); ++l) {
    s.key_windows[l] = cut_window(layers_[l].key, s.key_windows[l], s.pages, n_tokens);
    s.value_windows[l] = cut_window(layers_[l].value, s.value_windows[l], s.pages, n_tokens);
    s.lengths[l] = n_tokens;
  }
  const size_t keep = static_cast<size_t>(ceil_div(n_tokens, shape_.page_tokens));
  for (size_t i = keep; i < s.pages.size(); ++i)
    if (s.pages[i] != kDroppedPage) unref_page(s.pages[i]);
  s.pages.resize(keep);
}

void PagedKvCache::release(SeqId seq) {
  Sequence& s = seq_ref(seq);
  for (int32_t page : s.pages)
    if (page != kDroppedPage) unref_page(page);
  s = Sequence{};
}

int64_t PagedKvCache::length(SeqId seq, int layer) const {
  check_layer(layer);
  return seq_ref(seq).lengths[static_cast<size_t>(layer)];
}

int64_t PagedKvCache::length(SeqId seq) const {
  const Sequence& s = seq_ref(seq);
  return *std::min_element(s.lengths.begin(), s.lengths.end());
}

const std::vector<int32_t>& PagedKvCache::block_table(SeqId seq) const { return seq_ref(seq).pages; }

KvLayerView PagedKvCache::view(SeqId seq, int layer) const {
  check_layer(layer);
  const Sequence& s = seq_ref(seq);
  const Layer& l = layers_[static_cast<size_t>(layer)];
  KvLayerView v;
  v.length = s.lengths[static_cast<size_t>(layer)];
  v.window = shape_.window;
  v.arithmetic = l.arithmetic;
  v.n_kv_heads = shape_.n_kv_heads;
  v.head_dim = shape_.head_dim;
  v.page_tokens = shape_.page_tokens;
  auto fill = [&](const RoleStore& rs, const Window& w, KvRoleView& out) {
    out.codec = rs.codec.get();
    out.quantized = rs.windowed() ? w.quantized : v.length;
    out.pool = rs.pool.get();
    out.page_bytes = rs.page_bytes;
    out.head_bytes = rs.head_bytes;
    out.pages = s.pages.data();
    out.window = rs.windowed() ? w.tokens.data() : nullptr;
    out.window_capacity = rs.windowed() ? rs.window_capacity() : 0;
  };
  fill(l.key, s.key_windows[static_cast<size_t>(layer)], v.key);
  fill(l.value, s.value_windows[static_cast<size_t>(layer)], v.value);
  return v;
}

void PagedKvCache::dequantize_ref(SeqId seq, int layer, std::vector<float>& k, std::vector<float>& v) const {
  const KvLayerView lv = view(seq, layer);
  const int H = lv.n_kv_heads, D = lv.head_dim;
  for (KvRole role : {KvRole::key, KvRole::value}) {
    const KvRoleView& rv = role == KvRole::key ? lv.key : lv.value;
    std::vector<float>& out = role == KvRole::key ? k : v;
    out.assign(static_cast<size_t>(lv.length) * H * D, 0.0f);
    const int g = rv.codec->token_group();
    std::vector<float> group(static_cast<size_t>(g) * D);
    for (int64_t t0 = 0; t0 < rv.quantized; t0 += g) {
      if (rv.pages[t0 / lv.page_tokens] == kDroppedPage) continue;  // left as zeros
      for (int h = 0; h < H; ++h) {
        rv.codec->dequantize_ref(rv.group_at(h, t0, lv.page_tokens), group.data());
        for (int j = 0; j < g; ++j)
          std::memcpy(&out[(static_cast<size_t>(t0 + j) * H + h) * D], &group[static_cast<size_t>(j) * D], sizeof(float) * D);
      }
    }
    for (int64_t t = rv.quantized; t < lv.length; ++t)
      for (int h = 0; h < H; ++h)
        std::memcpy(&out[(static_cast<size_t>(t) * H + h) * D], rv.window_row(h, t, D), sizeof(float) * D);
  }
}

void PagedKvCache::drop_pages_behind_window(Sequence& s) {
  if (shape_.window <= 0) return;
  // Every later query sits at or after the shortest layer's length, so it sees no token before
  // that length - window + 1; pages wholly before it are returned.
  const int64_t first_visible = *std::min_element(s.lengths.begin(), s.lengths.end()) - shape_.window + 1;
  const int64_t whole_pages = std::max<int64_t>(0, first_visible) / shape_.page_tokens;
  for (int64_t i = 0; i < whole_pages && i < static_cast<int64_t>(s.pages.size()); ++i) {
    int32_t& page = s.pages[static_cast<size_t>(i)];
    if (page == kDroppedPage) continue;
    unref_page(page);
    page = kDroppedPage;
  }
}

void PagedKvCache::check_window_kept(const Sequence& s, int64_t n_tokens, const char* what) const {
  if (shape_.window <= 0) return;
  const int64_t first = std::max<int64_t>(0, n_tokens - shape_.window + 1);
  for (int64_t t = first; t < n_tokens; t += shape_.page_tokens)
    if (s.pages[static_cast<size_t>(t / shape_.page_tokens)] == kDroppedPage)
      throw_usage_error("paged KV cache: cannot " + std::string(what) + " at " + std::to_string(n_tokens) +
                        " tokens: the sliding window's pages before that point were already dropped");
}

KvMemory PagedKvCache::memory() const {
  KvMemory m;
  m.pages_capacity = shape_.capacity_pages;
  m.pages_used = shape_.capacity_pages - free_pages();
  for (const Layer& l : layers_) m.bytes_per_page += l.key.page_bytes + l.value.page_bytes;
  m.page_bytes_used = static_cast<size_t>(m.pages_used) * m.bytes_per_page;
  m.capacity_bytes = static_cast<size_t>(m.pages_capacity) * m.bytes_per_page;
  for (const Sequence& s : sequences_) {
    if (!s.live) continue;
    for (size_t l = 0; l < layers_.size(); ++l) {
      if (layers_[l].key.windowed())
        m.window_bytes += static_cast<size_t>(s.lengths[l] - s.key_windows[l].quantized) * shape_.n_kv_heads * shape_.head_dim * 2;
      if (layers_[l].value.windowed())
        m.window_bytes += static_cast<size_t>(s.lengths[l] - s.value_windows[l].quantized) * shape_.n_kv_heads * shape_.head_dim * 2;
    }
  }
  return m;
}

}  // namespace kvgate::kernels
