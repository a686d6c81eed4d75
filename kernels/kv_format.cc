#include "kernels/kv_format.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/format_families.h"

namespace kvgate::kernels {

void Codec::prepare_query(const float* q, float* q_prepared) const {
  std::memcpy(q_prepared, q, sizeof(float) * head_dim_);
}

float Codec::dot_ref(const float* q_prepared, const uint8_t* src, int t) const {
  std::vector<float> y(static_cast<size_t>(token_group()) * head_dim_);
  dequantize_stored_ref(src, y.data());
  const float* row = y.data() + static_cast<size_t>(t) * head_dim_;
  double sum = 0.0;
  for (int i = 0; i < head_dim_; ++i) sum += static_cast<double>(q_prepared[i]) * row[i];
  return static_cast<float>(sum);
}

void Codec::axpy_ref(float w, const uint8_t* src, int t, float* acc) const {
  std::vector<float> y(static_cast<size_t>(token_group()) * head_dim_);
  dequantize_stored_ref(src, y.data());
  const float* row = y.data() + static_cast<size_t>(t) * head_dim_;
  for (int i = 0; i < head_dim_; ++i) acc[i] += w * row[i];
}

void Codec::dot_rows(const float* q_prepared, int n_q, const uint8_t* groups, int n_tokens, float* scores) const {
  const int g = token_group();
  for (int tok = 0; tok < n_tokens; ++tok) {
    const uint8_t* group = groups + static_cast<size_t>(tok / g) * group_bytes();
    for (int qi = 0; qi < n_q; ++qi)
      scores[static_cast<size_t>(qi) * n_tokens + tok] =
          dot_ref(q_prepared + static_cast<size_t>(qi) * head_dim_, group, tok % g);
  }
}

void Codec::axpy_rows(const float* weights, int n_q, const uint8_t* groups, int n_tokens, float* acc) const {
  const int g = token_group();
  for (int tok = 0; tok < n_tokens; ++tok) {
    const uint8_t* group = groups + static_cast<size_t>(tok / g) * group_bytes();
    for (int qi = 0; qi < n_q; ++qi)
      axpy_ref(weights[static_cast<size_t>(qi) * n_tokens + tok], group, tok % g,
               acc + static_cast<size_t>(qi) * head_dim_);
  }
}

namespace {
std::vector<const FormatInfo*> build_registry() {
  std::vector<const FormatInfo*> all;
  append_float_formats(all);
  append_fp8_formats(all);
  append_per_token_head_formats(all);
  append_llama_cpp_formats(all);
  append_nvfp4_formats(all);
  append_kivi_formats(all);
  append_turboquant_formats(all);
  append_uniform_formats(all);
  return all;
}
}  // namespace

std::span<const FormatInfo* const> all_formats() {
  static const std::vector<const FormatInfo*> registry = build_registry();
  return registry;
}

const FormatInfo* find_format(std::string_view name) {
  for (const FormatInfo* f : all_formats())
    if (f->name == name) return f;
  return nullptr;
}

std::string format_names_joined(std::string_view sep) {
  std::string out;
  for (const FormatInfo* f : all_formats()) {
    if (!out.empty()) out += sep;
    out += f->name;
  }
  return out;
}

std::unique_ptr<Codec> make_codec(const FormatInfo& info, int head_dim, const FormatOptions& options) {
  if (head_dim <= 0 || head_dim > 1024)
    throw_usage_error("KV format " + std::string(info.name) + ": head_dim " + std::to_string(head_dim) +
                      " is out of range (1..1024)");
  if (head_dim % info.head_dim_multiple != 0)
    throw_usage_error("KV format " + std::string(info.name) + " needs head_dim to be a multiple of " +
                      std::to_string(info.head_dim_multiple) + ", got " + std::to_string(head_dim));
  if (info.head_dim_power_of_two && (head_dim & (head_dim - 1)) != 0)
    throw_usage_error("KV format " + std::string(info.name) + " needs a power-of-two head_dim, got " +
                      std::to_string(head_dim));
  return info.make(info, head_dim, options);
}

std::unique_ptr<Codec> make_codec(std::string_view name, int head_dim, const FormatOptions& options) {
  const FormatInfo* info = find_format(name);
  if (!info)
    throw_usage_error("unknown KV format '" + std::string(name) + "'; valid formats: " + format_names_joined());
  return make_codec(*info, head_dim, options);
}

}  // namespace kvgate::kernels
