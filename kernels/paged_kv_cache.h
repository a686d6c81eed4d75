#pragma once
// Paged KV cache storage, as vLLM and llama.cpp keep it: token positions are grouped into pages
// of `page_tokens` tokens; a page id names the same token range in every layer's K and V pools,
// so one block table per sequence serves all layers. Tokens are quantized when appended (keys
// after RoPE), with each layer's own K and V codec from the KV config.
//
// Byte layout of one page of one layer and role (K or V):
//     [kv_head][group][group_bytes]      group = token_group() consecutive tokens
// so the tokens of one head in a page are contiguous and a fused kernel can hand a whole page
// run to Codec::dot_rows / axpy_rows.
//
// Window formats (Codec::residual_tokens() > 0, KIVI) and multi-token groups: the newest tokens
// live in a per-sequence f16 window and only whole groups that have left it are quantized into
// the pages: after n tokens, the quantized part is floor(max(0, n - R) / G) * G tokens.
//
// Prefix reuse: fork() makes a new sequence that shares the parent's pages (reference counted);
// the first write into a shared page copies it (copy on write). A fork or truncate inside a
// group that the source already quantized cannot recover that group's f16 tokens; they are
// re-created from the dequantized group (an engine's prefix cache would reuse the group as is).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/kv_config.h"
#include "kernels/kv_format.h"

namespace kvgate::kernels {

struct LayerFormats {
  FormatSpec key;
  FormatSpec value;
  Arithmetic arithmetic = Arithmetic::exact;  // the config's: how attention reads this layer (kernels/arithmetic.h)
};

// The per-layer formats a config resolves to (overrides applied), each with the config's engine.
std::vector<LayerFormats> layer_formats(const KvConfig& config, int n_layers);

struct PagedKvCacheShape {
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 32;        // must be a multiple of every layer codec's token_group
  int64_t capacity_pages = 0;  // pool size; every page covers all layers
  // Sliding-window cache (0: keep every token): a query at position p attends to positions
  // (p - window, p] only, and a page whose tokens all lie before every future query's window is
  // returned to the pool. Its block-table entry becomes kDroppedPage.
  int64_t window = 0;
};

// Block-table entry of a page a sliding-window cache has dropped.
constexpr int32_t kDroppedPage = -1;

using SeqId = int32_t;

enum class KvRole : uint8_t { key, value };

// What a fused kernel needs to read one layer and role of one sequence, without copying.
struct KvRoleView {
  const Codec* codec = nullptr;
  int64_t quantized = 0;             // tokens [0, quantized) are in pages
  const uint8_t* pool = nullptr;     // page p of this layer/role starts at pool + p * page_bytes
  size_t page_bytes = 0;
  size_t head_bytes = 0;             // one head's share of a page
  const int32_t* pages = nullptr;    // the sequence's block table
  const float* window = nullptr;     // [n_kv_heads][window_capacity][head_dim], tokens [quantized, length)
  int64_t window_capacity = 0;
  // Bytes of head `h`'s data for token `t` (a multiple of token_group) onwards within its page.
  const uint8_t* group_at(int h, int64_t t, int page_tokens) const {
    const int64_t page = pages[t / page_tokens];
    const int64_t in_page = t % page_tokens;
    return pool + static_cast<size_t>(page) * page_bytes + static_cast<size_t>(h) * head_bytes +
           static_cast<size_t>(in_page / codec->token_group()) * codec->group_bytes();
  }
  const float* window_row(int h, int64_t t, int head_dim) const {
    return window + (static_cast<size_t>(h) * window_capacity + static_cast<size_t>(t - quantized)) * head_dim;
  }
};

struct KvLayerView {
  int64_t length = 0;
  int64_t window = 0;  // PagedKvCacheShape::window
  Arithmetic arithmetic = Arithmetic::exact;  // LayerFormats::engine
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_tokens = 0;
  KvRoleView key;
  KvRoleView value;
};

struct KvMemory {
  int64_t pages_used = 0;
  int64_t pages_capacity = 0;
  size_t bytes_per_page = 0;    // all layers, K and V
  size_t page_bytes_used = 0;   // pages_used * bytes_per_page
  size_t window_bytes = 0;      // f16 bytes held in the sequences' windows
  size_t capacity_bytes = 0;    // pages_capacity * bytes_per_page
  size_t used_bytes() const { return page_bytes_used + window_bytes; }
};

class PagedKvCache {
 public:
  // Throws a usage error if a format does not fit the shape (head_dim, page_tokens) or the pool
  // would not fit in memory.
  PagedKvCache(const std::vector<LayerFormats>& layers, const PagedKvCacheShape& shape);
  PagedKvCache(const KvConfig& config, int n_layers, const PagedKvCacheShape& shape)
      : PagedKvCache(layer_formats(config, n_layers), shape) {}
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  int n_layers() const { return static_cast<int>(layers_.size()); }
  const PagedKvCacheShape& shape() const { return shape_; }
  const Codec& codec(int layer, KvRole role) const;

  SeqId create_sequence();
  // A new sequence holding the first n_tokens of `parent`, sharing its pages.
  SeqId fork(SeqId parent, int64_t n_tokens);
  // Drops every token at position >= n_tokens. In a sliding-window cache the cut must leave
  // the last window's tokens in kept pages (a usage error otherwise); the same holds for fork.
  void truncate(SeqId seq, int64_t n_tokens);
  void release(SeqId seq);

  // k, v: [n_tokens][n_kv_heads][head_dim]. Layers may be appended one after another (a forward
  // pass does), so each layer has its own length. Throws a usage error, changing nothing, when
  // the pool has too few free pages.
  void append(SeqId seq, int layer, const float* k, const float* v, int64_t n_tokens);
  int64_t length(SeqId seq, int layer) const;
  // Number of tokens present in every layer.
  int64_t length(SeqId seq) const;
  const std::vector<int32_t>& block_table(SeqId seq) const;

  KvLayerView view(SeqId seq, int layer) const;
  // The cache content as the definition sees it: every quantized group through dequantize_ref,
  // window tokens as stored. k, v: [length][n_kv_heads][head_dim], original basis.
  void dequantize_ref(SeqId seq, int layer, std::vector<float>& k, std::vector<float>& v) const;

  KvMemory memory() const;
  int64_t free_pages() const { return static_cast<int64_t>(free_list_.size()); }
  int32_t page_refcount(int32_t page) const { return refcount_.at(static_cast<size_t>(page)); }

 private:
  struct RoleStore {
    std::unique_ptr<Codec> codec;
    int group = 1;
    int residual = 0;
    size_t head_bytes = 0;
    size_t page_bytes = 0;
    std::unique_ptr<uint8_t[]> pool;  // left uninitialized: untouched pages cost no memory
    bool windowed() const { return group > 1 || residual > 0; }
    int64_t window_capacity() const { return residual + group; }
    int64_t quantized_for(int64_t n) const { return (n > residual ? (n - residual) / group : 0) * group; }
  };
  struct Layer {
    RoleStore key;
    RoleStore value;
    Arithmetic arithmetic = Arithmetic::exact;
  };
  struct Window {
    int64_t quantized = 0;
    std::vector<float> tokens;  // [n_kv_heads][window_capacity][head_dim]; empty for unwindowed roles
  };
  struct Sequence {
    bool live = false;
    std::vector<int32_t> pages;
    std::vector<int64_t> lengths;       // per layer
    std::vector<Window> key_windows;    // per layer
    std::vector<Window> value_windows;  // per layer
  };

  Sequence& seq_ref(SeqId seq);
  const Sequence& seq_ref(SeqId seq) const;
  const RoleStore& store(int layer, KvRole role) const;
  int32_t allocate_page();
  void unref_page(int32_t page);
  // Makes pages[index] private to `s` (copy on write). Returns the page id to write to.
  int32_t writable_page(Sequence& s, size_t index);
  int64_t pages_needed_for_append(const Sequence& s, int layer, int64_t n_tokens) const;
  void append_role(Sequence& s, RoleStore& rs, Window& w, int64_t old_len, const float* x, int64_t n_tokens);
  void quantize_group(Sequence& s, RoleStore& rs, int h, int64_t first_token, const float* rows);
  // Window of a sequence cut to n_tokens, from the source's pages and window.
  Window cut_window(const RoleStore& rs, const Window& src, const std::vector<int32_t>& pages, int64_t n_tokens) const;
  void check_layer(int layer) const;
  // Sliding-window caches: returns the pages no query at or after the sequence's length can see.
  void drop_pages_behind_window(Sequence& s);
  // Usage error when a cut at n_tokens would need a dropped page.
  void check_window_kept(const Sequence& s, int64_t n_tokens, const char* what) const;

  PagedKvCacheShape shape_;
  std::vector<Layer> layers_;
  std::vector<int32_t> refcount_;
  std::vector<int32_t> free_list_;  // a stack; the most recently freed page is reused first
  std::vector<Sequence> sequences_;
};

}  // namespace kvgate::kernels
