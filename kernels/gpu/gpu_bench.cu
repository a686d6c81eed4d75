// Host code only; a .cu file so both GPU toolchains build it with the kernels (see vendor.h).
#include "kernels/gpu/gpu_bench.h"

#include <algorithm>
#include <vector>

#include "core/rng.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/gpu_ops.h"
#include "kernels/gpu/tq_params.h"

namespace kvgate::kernels::gpu {

DecodeBenchResult bench_decode_attention(FormatId format, int tokens, int iterations, const DecodeBenchShape& s) {
  DecodeBenchResult r{};
  // Key-only and value-only formats take their usual partner.
  const FormatId key = format == FormatId::kivi2_v ? FormatId::kivi2_k : format == FormatId::kivi4_v ? FormatId::kivi4_k : format;
  r.key = key;
  r.value = is_tq(key) ? FormatId::u4 : key == FormatId::kivi2_k ? FormatId::kivi2_v : key == FormatId::kivi4_k ? FormatId::kivi4_v : key;
  r.label = r.key == r.value ? std::string(kv_format_name(key)) : std::string(kv_format_name(r.key)) + "/" + kv_format_name(r.value);
  r.tokens = tokens;
  // Per token: a KIVI key group's bytes are shared by its tokens.
  const double key_bytes = static_cast<double>(kv_row_bytes(r.key, s.head_dim)) / (is_kivi_key(r.key) ? kKiviDefaultGroup : 1);
  r.bits_per_element = 4.0 * (key_bytes + static_cast<double>(kv_row_bytes(r.value, s.head_dim))) / s.head_dim;
  PagedKvShape shape;
  shape.head_dim = s.head_dim;
  shape.n_kv_heads = s.n_kv_heads;
  shape.page_tokens = is_kivi(key) ? std::max(s.page_tokens, kKiviDefaultGroup) : s.page_tokens;
  shape.key = KvSideFormat{r.key, 1.0f, std::nullopt};
  if (is_tq(key)) shape.key.tq = make_tq_params(key, s.head_dim);
  shape.value = KvSideFormat{r.value, 1.0f, std::nullopt};
  DevicePagedKv cache(shape, tokens);

  // Gaussian K/V for one chunk, uploaded once and appended until the cache is full.
  constexpr int kChunk = 2048;
  const int chunk = std::min(kChunk, tokens);
  const size_t floats = static_cast<size_t>(chunk) * s.n_kv_heads * s.head_dim;
  std::vector<float> host(floats);
  Rng rng(1);
  for (float& e : host) e = static_cast<float>(rng.normal());
  DeviceMemory k(floats * sizeof(float)), v(floats * sizeof(float));
  k.upload(host.data(), floats * sizeof(float));
  for (float& e : host) e = static_cast<float>(rng.normal());
  v.upload(host.data(), floats * sizeof(float));
  const double append_ms = cache.time_append_ms(k.floats(), v.floats(), chunk, iterations);
  r.append_gb_per_s = 2.0 * floats * sizeof(float) / (append_ms * 1e-3) / 1e9;
  cache.truncate(0);
  for (int t = 0; t < tokens; t += chunk) cache.append_device(k.floats(), v.floats(), std::min(chunk, tokens - t));

  const double ms = cache.time_attention_ms(s.n_heads, 1, iterations);
  r.us_per_step = ms * 1e3;
  r.kv_gb_per_s = static_cast<double>(cache.kv_bytes_per_token()) * tokens / (ms * 1e-3) / 1e9;
  return r;
}

}  // namespace kvgate::kernels::gpu
