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
std::vector<const FormatInfo*> builtin_formats() {
  std::vector<const FormatInfo*> all;
  append_float_formats(all);
  append_fp8_formats(all);
  append_per_token_head_formats(all);
  append_ggml_formats(all);
  append_nvfp4_formats(all);
  append_kivi_formats(all);
  append_turboquant_formats(all);
  append_uniform_formats(all);
  return all;
}

std::vector<const FormatInfo*>& registry() {
  static std::vector<const FormatInfo*> formats = builtin_formats();
  return formats;
}
}  // namespace

std::span<const FormatInfo* const> all_formats() { return registry(); }

const FormatInfo* find_format(std::string_view name) {
  for (const FormatInfo* f : all_formats())
    if (f->name == name) return f;
  return nullptr;
}

const FormatInfo* find_format(FormatId id) {
  if (id == FormatId::external) return nullptr;
  for (const FormatInfo* f : all_formats())
    if (f->id == id) return f;
  return nullptr;
}

void register_format(const FormatInfo& info) {
  const std::string name(info.name);
  KVGATE_CHECK(!name.empty() && find_format(info.name) == nullptr, "KV format '" + name + "' is registered twice");
  KVGATE_CHECK(info.id == FormatId::external, "KV format '" + name + "' registered at run time with a built-in id");
  KVGATE_CHECK(info.gpu == GpuStorage::none, "KV format '" + name + "' registered at run time claims GPU kernels");
  KVGATE_CHECK(info.for_keys || info.for_values, "KV format '" + name + "' stores neither keys nor values");
  KVGATE_CHECK(info.head_dim_multiple >= 1 && info.make != nullptr, "KV format '" + name + "' is incomplete");
  registry().push_back(&info);
}

std::string format_names_joined(std::string_view sep) {
  std::string out;
  for (const FormatInfo* f : all_formats()) {
    if (!out.empty()) out += sep;
    out += f->name;
  }
  return out;
}

std::vector<const FormatInfo*> formats_named(std::span<const std::string> names, std::string_view what) {
  if (names.empty()) return {all_formats().begin(), all_formats().end()};
  std::vector<const FormatInfo*> out;
  for (const std::string& name : names) {
    const FormatInfo* f = find_format(name);
    if (!f)
      throw_usage_error(std::string(what) + ": unknown format '" + echo_user_text(name) +
                        "'; valid formats: " + format_names_joined());
    out.push_back(f);
  }
  return out;
}

std::vector<FormatListing> format_listing() {
  // Null when the format cannot be instantiated at this head_dim (a block size that does not divide it).
  auto try_codec = [](const FormatInfo& f, int head_dim) -> std::unique_ptr<Codec> {
    try {
      return make_codec(f, head_dim);
    } catch (const Error&) {
      return nullptr;
    }
  };
  std::vector<FormatListing> rows;
  for (const FormatInfo* f : all_formats()) {
    FormatListing row{};
    row.info = f;
    row.roles = f->for_keys && f->for_values ? "k,v" : f->for_keys ? "k" : "v";
    if (const auto c64 = try_codec(*f, 64)) row.bits_per_element_64 = c64->bits_per_element();
    if (const auto c128 = try_codec(*f, 128)) {
      row.bits_per_element_128 = c128->bits_per_element();
      row.bytes_per_token_128 = c128->bytes_per_token();
      row.token_group = c128->token_group();
      row.residual_tokens = c128->residual_tokens();
    }
    rows.push_back(std::move(row));
  }
  return rows;
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
