// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
//
// The paged device cache (DevicePagedKv without its attention, which is gpu_attention.cu) and
// the row quantize/dequantize API. Quantization runs kernels/gpu/kv_rows.h one thread per row,
// so its bytes are the CPU codec's (no FMA contraction: kernels/gpu/CMakeLists.txt passes
// --fmad=false / -ffp-contract=off, and the row functions round each operation explicitly).
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/gpu/gpu_kv_impl.h"
#include "kernels/gpu/kv_checks.h"

namespace kvgate::kernels::gpu {
namespace {

// tq: TurboQuant constants in device memory, or null for the other formats.
__global__ void quantize_rows_kernel(FormatId f, int head_dim, float scale, const TqParams* tq, const float* x,
                                     size_t n_rows, uint8_t* out) {
  const size_t r = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= n_rows) return;
  encode_row(f, head_dim, scale, x + r * head_dim, out + r * row_bytes(f, head_dim, tq), tq);
}

__global__ void dequantize_rows_kernel(FormatId f, int head_dim, float scale, const TqParams* tq, const uint8_t* in,
                                       size_t n_rows, float* y) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n_rows * head_dim) return;
  const size_t r = e / head_dim;
  y[e] = decode_element(f, in + r * row_bytes(f, head_dim, tq), static_cast<int>(e % head_dim), scale, tq, 0, head_dim);
}

// One thread per (new token, KV head, K or V) row.
__global__ void append_kernel(PagedRows keys, PagedRows values, SideArgs kf, SideArgs vf, int head_dim,
                              const float* k, const float* v, int first_token, int n_new) {
  const size_t item = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t rows = static_cast<size_t>(n_new) * keys.n_kv_heads;
  if (item >= 2 * rows) return;
  const bool is_value = item >= rows;
  const size_t r = is_value ? item - rows : item;
  const int token = first_token + static_cast<int>(r / keys.n_kv_heads);
  const int head = static_cast<int>(r % keys.n_kv_heads);
  const float* src = (is_value ? v : k) + r * head_dim;
  const SideArgs& side = is_value ? vf : kf;
  if (side.window) {
    // KIVI: the new token goes to the f16 window; whole groups leave it in window_to_units_kernel.
    uint16_t* dst = const_cast<uint16_t*>(side.window) + (static_cast<size_t>(token) * keys.n_kv_heads + head) * head_dim;
    for (int i = 0; i < head_dim; ++i) dst[i] = f32_to_f16(src[i]);
    return;
  }
  if (is_value) encode_row(vf.format, head_dim, vf.scale, src, values.unit(token, head), vf.tq, vf.rot);
  else encode_row(kf.format, head_dim, kf.scale, src, keys.unit(token, head), kf.tq, kf.rot);
}

// KIVI: quantizes the units of tokens [first, last) from the f16 window, one thread per
// (unit, KV head), exactly as the CPU cache does when a group leaves its window.
__global__ void window_to_units_kernel(PagedRows rows, SideArgs side, int head_dim, int first, int last) {
  const size_t item = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int units = (last - first) / rows.group;
  if (item >= static_cast<size_t>(units) * rows.n_kv_heads) return;
  const int token = first + static_cast<int>(item / rows.n_kv_heads) * rows.group;
  const int head = static_cast<int>(item % rows.n_kv_heads);
  const uint16_t* window = side.window + (static_cast<size_t>(token) * rows.n_kv_heads + head) * head_dim;
  uint8_t* dst = rows.unit(token, head);
  if (is_kivi_key(side.format)) {
    encode_kivi_key_group(kivi_bits(side.format), head_dim, rows.group, window,
                          static_cast<size_t>(rows.n_kv_heads) * head_dim, dst);
  } else {
    float x[kMaxKvHeadDim];
    for (int i = 0; i < head_dim; ++i) x[i] = f16_to_f32(window[i]);
    encode_kivi_value(kivi_bits(side.format), head_dim, x, dst);
  }
}

void quantize_on_device(FormatId format, int head_dim, float scale, const std::optional<TqConstants>& tq,
                        const float* x, size_t n_rows, uint8_t* out) {
  const size_t bytes = row_bytes(format, head_dim, tq ? &tq->params : nullptr);
  if (n_rows == 0) return;
  DeviceTq dtq;
  if (tq) dtq.upload(*tq);
  DeviceBuffer dx(n_rows * head_dim * sizeof(float)), dout(n_rows * bytes);
  check(gpuMemcpy(dx.ptr, x, n_rows * head_dim * sizeof(float), gpuMemcpyHostToDevice), "upload");
  quantize_rows_kernel<<<blocks_for(n_rows, kRowThreads), kRowThreads>>>(format, head_dim, scale, tq ? dtq.get() : nullptr,
                                                                           dx.as<float>(), n_rows, dout.as<uint8_t>());
  check(gpuGetLastError(), "quantize launch");
  check(gpuMemcpy(out, dout.ptr, n_rows * bytes, gpuMemcpyDeviceToHost), "download");
}

void dequantize_on_device(FormatId format, int head_dim, float scale, const std::optional<TqConstants>& tq,
                          const uint8_t* in, size_t n_rows, float* y) {
  const size_t bytes = row_bytes(format, head_dim, tq ? &tq->params : nullptr);
  if (n_rows == 0) return;
  DeviceTq dtq;
  if (tq) dtq.upload(*tq);
  const size_t n = n_rows * head_dim;
  DeviceBuffer din(n_rows * bytes), dy(n * sizeof(float));
  check(gpuMemcpy(din.ptr, in, n_rows * bytes, gpuMemcpyHostToDevice), "upload");
  dequantize_rows_kernel<<<blocks_for(n, kRowThreads), kRowThreads>>>(format, head_dim, scale, tq ? dtq.get() : nullptr,
                                                                        din.as<uint8_t>(), n_rows, dy.as<float>());
  check(gpuGetLastError(), "dequantize launch");
  check(gpuMemcpy(y, dy.ptr, n * sizeof(float), gpuMemcpyDeviceToHost), "download");
}
}  // namespace

void quantize_rows(FormatId format, int head_dim, float scale, const float* x, size_t n_rows, uint8_t* out) {
  kv_row_bytes(format, head_dim);  // validates head_dim for the format
  check_plain_rows(format, "quantize_rows");
  check_kv_scale(format, scale);
  quantize_on_device(format, head_dim, scale, std::nullopt, x, n_rows, out);
}

void dequantize_rows(FormatId format, int head_dim, float scale, const uint8_t* in, size_t n_rows, float* y) {
  kv_row_bytes(format, head_dim);
  check_plain_rows(format, "dequantize_rows");
  check_kv_scale(format, scale);
  dequantize_on_device(format, head_dim, scale, std::nullopt, in, n_rows, y);
}

void quantize_rows(FormatId format, int head_dim, const TqConstants& tq, const float* x, size_t n_rows, uint8_t* out) {
  kv_row_bytes(format, head_dim);
  check_tq_constants(format, head_dim, tq, "GPU quantize_rows");
  quantize_on_device(format, head_dim, 1.0f, tq, x, n_rows, out);
}

void dequantize_rows(FormatId format, int head_dim, const TqConstants& tq, const uint8_t* in, size_t n_rows, float* y) {
  kv_row_bytes(format, head_dim);
  check_tq_constants(format, head_dim, tq, "GPU dequantize_rows");
  dequantize_on_device(format, head_dim, 1.0f, tq, in, n_rows, y);
}


// Units up to the side's new quantized count leave the window (KIVI).
void DevicePagedKv::Impl::flush_window(SideStore& s) {
  const int target = s.quantized_for(length);
  if (!s.windowed || target <= s.quantized) return;
  const size_t items = static_cast<size_t>((target - s.quantized) / s.group) * shape.n_kv_heads;
  window_to_units_kernel<<<blocks_for(items, kRowThreads), kRowThreads>>>(rows(s), args(s), shape.head_dim, s.quantized,
                                                                        target);
  check(gpuGetLastError(), "KIVI group launch");
  s.quantized = target;
}

std::vector<uint8_t> DevicePagedKv::Impl::download_unit(const SideStore& s, int token, int kv_head) const {
  if (token < 0 || token >= length || kv_head < 0 || kv_head >= shape.n_kv_heads)
    throw_usage_error("GPU paged KV: no row for token " + std::to_string(token) + ", head " + std::to_string(kv_head));
  if (s.windowed && token >= s.quantized)
    throw_usage_error("GPU paged KV: token " + std::to_string(token) + " is still in the f16 window (" +
                      std::to_string(s.quantized) + " tokens quantized)");
  std::vector<uint8_t> unit(s.unit_bytes);
  check(gpuMemcpy(unit.data(), s.pool.as<uint8_t>() + unit_offset(s, token, kv_head), s.unit_bytes,
                  gpuMemcpyDeviceToHost),
        "download row");
  return unit;
}

namespace {
void init_side(SideStore& s, const KvSideFormat& f, const PagedKvShape& shape, bool is_key) {
  check_kv_side(f, shape, is_key);
  s.format = f;
  s.windowed = is_kivi(f.format);
  s.group = is_kivi_key(f.format) ? (f.group > 0 ? f.group : kKiviDefaultGroup) : 1;
  s.residual = s.windowed ? f.residual : 0;
  s.unit_bytes = unit_bytes(f.format, shape.head_dim, s.group, f.tq ? &f.tq->params : nullptr);
}
}  // namespace

DevicePagedKv::DevicePagedKv(const PagedKvShape& shape, int capacity_tokens, std::vector<int32_t> page_order)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.shape = shape;
  if (shape.n_kv_heads < 1 || shape.page_tokens < 1 || capacity_tokens < 1)
    throw_usage_error("GPU paged KV: n_kv_heads, page_tokens and capacity must be >= 1, got " +
                      std::to_string(shape.n_kv_heads) + ", " + std::to_string(shape.page_tokens) + ", " +
                      std::to_string(capacity_tokens));
  init_side(m.key, shape.key, shape, true);
  init_side(m.value, shape.value, shape, false);
  check_kv_arithmetic(shape);
  m.capacity = capacity_tokens;
  m.pages = (capacity_tokens + shape.page_tokens - 1) / shape.page_tokens;
  if (page_order.empty()) {
    page_order.resize(m.pages);
    for (int i = 0; i < m.pages; ++i) page_order[i] = i;
  }
  std::vector<bool> seen(m.pages, false);
  if (static_cast<int>(page_order.size()) != m.pages)
    throw_usage_error("GPU paged KV: page order has " + std::to_string(page_order.size()) + " pages, the capacity needs " +
                      std::to_string(m.pages));
  for (int32_t page : page_order) {
    if (page < 0 || page >= m.pages || seen[page])
      throw_usage_error("GPU paged KV: page order is not a permutation of 0.." + std::to_string(m.pages - 1));
    seen[page] = true;
  }
  m.order = page_order;
  const size_t tokens = static_cast<size_t>(m.pages) * shape.page_tokens;
  for (SideStore* side : {&m.key, &m.value}) {
    side->pool.resize(tokens / side->group * shape.n_kv_heads * side->unit_bytes);
    if (side->format.tq) side->tq.upload(*side->format.tq);
    if (side->format.rotation) {
      side->rot.resize(sizeof(RotationParams));
      check(gpuMemcpy(side->rot.ptr, &*side->format.rotation, sizeof(RotationParams), gpuMemcpyHostToDevice),
            "upload rotation");
    }
    if (side->windowed) side->window.resize(tokens * shape.n_kv_heads * shape.head_dim * sizeof(uint16_t));
  }
  m.page_table.resize(page_order.size() * sizeof(int32_t));
  check(gpuMemcpy(m.page_table.ptr, page_order.data(), page_order.size() * sizeof(int32_t), gpuMemcpyHostToDevice),
        "upload page table");
}

DevicePagedKv::~DevicePagedKv() = default;

const PagedKvShape& DevicePagedKv::shape() const { return impl_->shape; }
int DevicePagedKv::length() const { return impl_->length; }
int DevicePagedKv::capacity() const { return impl_->capacity; }
size_t DevicePagedKv::kv_bytes_per_token() const {
  const Impl& m = *impl_;
  return (m.key.unit_bytes / m.key.group + m.value.unit_bytes / m.value.group) * static_cast<size_t>(m.shape.n_kv_heads);
}

void DevicePagedKv::append_device(const float* k, const float* v, int n_new) {
  Impl& m = *impl_;
  if (n_new < 0 || n_new > m.capacity - m.length)
    throw_usage_error("GPU paged KV: cannot append " + std::to_string(n_new) + " tokens to " + std::to_string(m.length) +
                      " of capacity " + std::to_string(m.capacity));
  if (n_new == 0) return;
  const size_t items = 2 * static_cast<size_t>(n_new) * m.shape.n_kv_heads;
  append_kernel<<<blocks_for(items, kRowThreads), kRowThreads>>>(m.rows(m.key), m.rows(m.value), m.args(m.key),
                                                                  m.args(m.value), m.shape.head_dim, k, v, m.length, n_new);
  check(gpuGetLastError(), "append launch");
  m.length += n_new;
  m.flush_window(m.key);
  m.flush_window(m.value);
}

void DevicePagedKv::append(const float* k, const float* v, int n_new) {
  Impl& m = *impl_;
  if (n_new <= 0) return append_device(nullptr, nullptr, n_new);
  const size_t bytes = static_cast<size_t>(n_new) * m.shape.n_kv_heads * m.shape.head_dim * sizeof(float);
  m.staging_k.resize(bytes);
  m.staging_v.resize(bytes);
  check(gpuMemcpy(m.staging_k.ptr, k, bytes, gpuMemcpyHostToDevice), "upload keys");
  check(gpuMemcpy(m.staging_v.ptr, v, bytes, gpuMemcpyHostToDevice), "upload values");
  append_device(m.staging_k.as<float>(), m.staging_v.as<float>(), n_new);
  check(gpuDeviceSynchronize(), "append");
}

namespace {
bool same_matrix(const std::shared_ptr<const std::vector<float>>& a, const std::shared_ptr<const std::vector<float>>& b) {
  return a == b || (a && b && *a == *b);
}
bool same_tq(const std::optional<TqConstants>& ac, const std::optional<TqConstants>& bc) {
  if (ac.has_value() != bc.has_value()) return false;
  if (!ac) return true;
  const TqParams* a = &ac->params;
  const TqParams* b = &bc->params;
  return same_matrix(ac->sketch, bc->sketch) && same_matrix(ac->rotation_matrix, bc->rotation_matrix) &&
         a->qjl_scale == b->qjl_scale && a->bits == b->bits && a->outliers == b->outliers &&
         a->norm_correction == b->norm_correction && a->rotation_scale == b->rotation_scale &&
         std::memcmp(a->signs, b->signs, sizeof a->signs) == 0 &&
         std::memcmp(a->centroids, b->centroids, sizeof a->centroids) == 0 &&
         std::memcmp(a->thresholds, b->thresholds, sizeof a->thresholds) == 0 &&
         std::memcmp(a->outlier_centroids, b->outlier_centroids, sizeof a->outlier_centroids) == 0 &&
         std::memcmp(a->outlier_thresholds, b->outlier_thresholds, sizeof a->outlier_thresholds) == 0;
}
bool same_rotation(const std::optional<RotationParams>& a, const std::optional<RotationParams>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->scale == b->scale && a->block == b->block && std::memcmp(a->signs, b->signs, sizeof a->signs) == 0);
}
}  // namespace

void DevicePagedKv::truncate(int n) {
  Impl& m = *impl_;
  if (n < 0 || n > m.length)
    throw_usage_error("GPU paged KV: cannot truncate " + std::to_string(m.length) + " tokens to " + std::to_string(n));
  m.length = n;
  // KIVI: the window holds every token's f16 row, so groups past the new boundary are simply
  // read from it again (the CPU cache rebuilds them from the dequantized group instead).
  for (SideStore* side : {&m.key, &m.value}) side->quantized = std::min(side->quantized, side->quantized_for(n));
}

void DevicePagedKv::copy_prefix_from(const DevicePagedKv& source, int n) {
  Impl& m = *impl_;
  const Impl& src = *source.impl_;
  const PagedKvShape &a = m.shape, &b = src.shape;
  auto same_side = [](const KvSideFormat& x, const KvSideFormat& y) {
    return x.format == y.format && x.scale == y.scale && same_tq(x.tq, y.tq) && x.group == y.group &&
           x.residual == y.residual && same_rotation(x.rotation, y.rotation);
  };
  if (a.head_dim != b.head_dim || a.n_kv_heads != b.n_kv_heads || a.page_tokens != b.page_tokens ||
      !same_side(a.key, b.key) || !same_side(a.value, b.value))
    throw_usage_error("GPU paged KV: copy between caches of different shapes or formats");
  if (n < 0 || n > src.length || n > m.capacity)
    throw_usage_error("GPU paged KV: cannot copy " + std::to_string(n) + " tokens from a cache of " +
                      std::to_string(src.length) + " into one of capacity " + std::to_string(m.capacity));
  // Whole pages, one copy per page (a run of consecutive pool pages when both orders agree).
  const int pages = (n + a.page_tokens - 1) / a.page_tokens;
  for (int i = 0; i < pages;) {
    int run = 1;
    while (i + run < pages && m.order[i + run] == m.order[i] + run && src.order[i + run] == src.order[i] + run) ++run;
    for (const auto& [dst, from] : {std::pair{&m.key, &src.key}, std::pair{&m.value, &src.value}}) {
      const size_t page_bytes = static_cast<size_t>(a.n_kv_heads) * (a.page_tokens / dst->group) * dst->unit_bytes;
      check(gpuMemcpy(dst->pool.as<uint8_t>() + static_cast<size_t>(m.order[i]) * page_bytes,
                      from->pool.as<uint8_t>() + static_cast<size_t>(src.order[i]) * page_bytes, run * page_bytes,
                      gpuMemcpyDeviceToDevice),
            "copy pages");
    }
    i += run;
  }
  for (const auto& [dst, from] : {std::pair{&m.key, &src.key}, std::pair{&m.value, &src.value}}) {
    if (!dst->windowed) continue;
    check(gpuMemcpy(dst->window.ptr, from->window.ptr,
                    static_cast<size_t>(n) * a.n_kv_heads * a.head_dim * sizeof(uint16_t), gpuMemcpyDeviceToDevice),
          "copy window");
    dst->quantized = std::min(from->quantized, dst->quantized_for(n));
  }
  m.length = n;
}

std::vector<uint8_t> DevicePagedKv::key_row(int token, int kv_head) const {
  return impl_->download_unit(impl_->key, token, kv_head);
}

std::vector<uint8_t> DevicePagedKv::value_row(int token, int kv_head) const {
  return impl_->download_unit(impl_->value, token, kv_head);
}

double DevicePagedKv::time_append_ms(const float* k, const float* v, int n_new, int iterations) {
  return time_ms(iterations, [&] {
    truncate(0);
    append_device(k, v, n_new);
  });
}

double device_copy_gbps(size_t bytes, int iterations) {
  DeviceBuffer src(bytes), dst(bytes);
  check(gpuMemset(src.ptr, 1, bytes), "memset");
  const double ms = time_ms(iterations, [&] { check(gpuMemcpy(dst.ptr, src.ptr, bytes, gpuMemcpyDeviceToDevice), "copy"); });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

}  // namespace kvgate::kernels::gpu