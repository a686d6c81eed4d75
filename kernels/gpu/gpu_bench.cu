// Host code only; a .cu file so both GPU toolchains build it with the kernels (see vendor.h).
#include "kernels/gpu/gpu_bench.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/gpu_kv_impl.h"
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

  // Copies of the filled cache, so consecutive steps read different bytes: enough sets of n_seqs
  // that one pass over them reads more than the 50 MB L2 twice over.
  const double step_bytes = static_cast<double>(cache.kv_bytes_per_token()) * tokens * std::max(1, s.n_seqs);
  const int sets = std::max(1, static_cast<int>(128e6 / step_bytes) + 1);
  std::vector<std::unique_ptr<DevicePagedKv>> copies;
  for (int i = 0; i < sets * std::max(1, s.n_seqs); ++i) {
    copies.push_back(std::make_unique<DevicePagedKv>(shape, tokens));
    copies.back()->copy_prefix_from(cache, tokens);
  }
  const int n_q = std::max(1, std::min(s.n_queries, tokens));
  const size_t floats_q = static_cast<size_t>(n_q) * s.n_heads * s.head_dim;
  std::vector<float> host_q(floats_q);
  for (float& e : host_q) e = static_cast<float>(rng.normal());
  DeviceMemory q(floats_q * sizeof(float)), out(floats_q * sizeof(float) * copies.size());
  q.upload(host_q.data(), floats_q * sizeof(float));
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  int step = 0;
  const double ms = time_ms(iterations, [&] {
    const int set = step++ % sets;
    for (int k = 0; k < std::max(1, s.n_seqs); ++k) {
      const size_t c = static_cast<size_t>(set) * std::max(1, s.n_seqs) + k;
      copies[c]->attention_device(s.n_heads, q.floats(), n_q, softmax_scale, out.floats() + c * floats_q);
    }
  });
  r.n_seqs = std::max(1, s.n_seqs);
  r.kernel = cache.attention_kernel(s.n_heads, n_q);
  r.us_per_step = ms * 1e3;
  r.kv_gb_per_s = step_bytes / (ms * 1e-3) / 1e9;
  // Query i sees tokens - n_q + i + 1 keys: 2 x 2 x head_dim flops per (query head, key), QK and PV.
  const double pairs = static_cast<double>(n_q) * (tokens - n_q) + 0.5 * n_q * (n_q + 1.0);
  r.tflops = 4.0 * s.head_dim * s.n_heads * pairs * r.n_seqs / (ms * 1e-3) / 1e12;
  return r;
}

}  // namespace kvgate::kernels::gpu
