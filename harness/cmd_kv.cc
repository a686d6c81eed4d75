// `kvgate kv list|show|check|roundtrip`: what the KV formats and configs are, and what they do
// to a user's own K/V tensors, before any model is run.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/hash.h"
#include "core/npy.h"
#include "core/rng.h"
#include "harness/commands.h"
#include "kernels/kv_config.h"
#include "kernels/kv_format.h"

namespace kvgate::harness {
namespace {

namespace kn = kvgate::kernels;
using nlohmann::json;

std::vector<std::string> backend_names(uint32_t mask) {
  std::vector<std::string> out;
  if (mask & kn::kBackendCpu) out.push_back("cpu");
  if (mask & kn::kBackendCuda) out.push_back("cuda");
  if (mask & kn::kBackendHip) out.push_back("hip");
  return out;
}

std::string joined(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// ---- kv list ----

// The rows come from the registry (kernels::format_listing), so a registered format is listed.
void run_list(bool as_json) {
  json rows = json::array();
  if (!as_json)
    std::printf("%-14s %-19s %7s %8s %10s  %-12s %s\n", "format", "family", "bits@64", "bits@128", "B/tok/head", "backends",
                "mirrors");
  for (const kn::FormatListing& row : kn::format_listing()) {
    const kn::FormatInfo* f = row.info;
    auto or_null = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
    if (as_json) {
      rows.push_back({{"name", f->name},
                      {"family", f->family},
                      {"roles", row.roles},
                      {"bits_per_element", {{"64", or_null(row.bits_per_element_64)}, {"128", or_null(row.bits_per_element_128)}}},
                      {"bytes_per_token_head_128", or_null(row.bytes_per_token_128)},
                      {"token_group", row.token_group},
                      {"residual_tokens", row.residual_tokens},
                      {"mirrors", f->mirrors},
                      {"description", f->description},
                      {"backends", backend_names(f->backends())}});
    } else {
      auto num = [](const std::optional<double>& v) { return v ? fmt::format("{:.3g}", *v) : std::string("-"); };
      std::printf("%-14s %-19s %7s %8s %10s  %-12s %s\n", std::string(f->name).c_str(),
                  (std::string(f->family) + " " + row.roles).c_str(), num(row.bits_per_element_64).c_str(),
                  num(row.bits_per_element_128).c_str(), num(row.bytes_per_token_128).c_str(),
                  joined(backend_names(f->backends()), ",").c_str(), std::string(f->mirrors).c_str());
    }
  }
  if (as_json) std::printf("%s\n", rows.dump(2).c_str());
}

// ---- kv show ----

struct ShapeFlags {
  int layers = 30;
  int kv_heads = 3;
  int head_dim = 64;
};

void run_show(const std::string& spec, const ShapeFlags& sf, bool as_json) {
  if (sf.layers <= 0 || sf.layers > 4096 || sf.kv_heads <= 0 || sf.kv_heads > 1024 || sf.head_dim <= 0)
    throw_usage_error("kv show: --layers, --kv-heads and --head-dim must be positive (layers <= 4096, kv heads <= 1024)");
  const kn::KvConfig config = kn::parse_kv_config(spec);
  const kn::KvShape shape{sf.layers, sf.kv_heads, sf.head_dim};
  const double bytes_per_token = config.bytes_per_token(shape);  // validates the formats against head_dim
  const double bits = config.bits_per_element(shape);

  // Consecutive layers with the same formats, as the model will see them.
  struct Run {
    int first, last;
    std::string key, value;
  };
  std::vector<Run> runs;
  for (int l = 0; l < sf.layers; ++l) {
    const std::string k = config.key_for_layer(l, sf.layers).canonical();
    const std::string v = config.value_for_layer(l, sf.layers).canonical();
    if (!runs.empty() && runs.back().key == k && runs.back().value == v)
      runs.back().last = l;
    else
      runs.push_back({l, l, k, v});
  }
  const auto side_bits = [&](const kn::FormatSpec& s) {
    return kn::make_codec(*s.format, sf.head_dim, s.options)->bits_per_element();
  };
  // The engine's arithmetic for a decode step and for a prefill chunk (its kernel choice may
  // depend on the batch), on the base formats.
  const auto arithmetic = [&](int64_t n_queries) {
    return kn::resolve_arithmetic(config.arithmetic, *config.key.format, *config.value.format, n_queries, sf.head_dim,
                                  config.key.options.scale)
        .describe();
  };
  const std::string engine(kn::arithmetic_name(config.arithmetic));
  if (as_json) {
    json layers = json::array();
    for (const Run& r : runs) layers.push_back({{"first", r.first}, {"last", r.last}, {"key", r.key}, {"value", r.value}});
    const json j = {{"spec", spec},
                    {"canonical", config.canonical()},
                    {"hash", hex_u64(config.hash())},
                    {"key", config.key.canonical()},
                    {"value", config.value.canonical()},
                    {"key_bits_per_element", side_bits(config.key)},
                    {"value_bits_per_element", side_bits(config.value)},
                    {"key_rotation", kn::rotation_summary(config.key, sf.head_dim)},
                    {"value_rotation", kn::rotation_summary(config.value, sf.head_dim)},
                    {"engine", engine},
                    {"arithmetic",
                     {{"decode", arithmetic(1)},
                      {"prefill", arithmetic(512)},
                      {"matmul_inputs", std::string(kn::arithmetic_matmul_inputs(config.arithmetic))}}},
                    {"overrides", static_cast<int>(config.overrides.size())},
                    {"layers", layers},
                    {"shape", {{"layers", sf.layers}, {"kv_heads", sf.kv_heads}, {"head_dim", sf.head_dim}}},
                    {"bits_per_element", bits},
                    {"bytes_per_token", bytes_per_token}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("spec        %s\ncanonical   %s\nhash        %s\n", spec.c_str(), config.canonical().c_str(),
              hex_u64(config.hash()).c_str());
  std::printf("key         %s (%.3g bits/element)\nvalue       %s (%.3g bits/element)\n", config.key.canonical().c_str(),
              side_bits(config.key), config.value.canonical().c_str(), side_bits(config.value));
  std::printf("rotation    key: %s\n            value: %s\n", kn::rotation_summary(config.key, sf.head_dim).c_str(),
              kn::rotation_summary(config.value, sf.head_dim).c_str());
  std::printf("engine      %s\n  decode    %s\n  prefill   %s (512 queries)\n", engine.c_str(), arithmetic(1).c_str(),
              arithmetic(512).c_str());
  if (const std::string_view inputs = kn::arithmetic_matmul_inputs(config.arithmetic); !inputs.empty())
    std::printf("  matmuls   %.*s\n", static_cast<int>(inputs.size()), inputs.data());
  std::printf("shape       %d layers x %d KV heads x head_dim %d\n", sf.layers, sf.kv_heads, sf.head_dim);
  if (runs.size() > 1 || !config.overrides.empty())
    for (const Run& r : runs) std::printf("  layers %2d-%-2d  %s / %s\n", r.first, r.last, r.key.c_str(), r.value.c_str());
  std::printf("bits/elem   %.4g (f16: 16)\nbytes/token %.1f (f16: %d)\n", bits, bytes_per_token,
              2 * 2 * sf.layers * sf.kv_heads * sf.head_dim);
}

// ---- tensors for check / roundtrip ----

// A K or V dump: axis 0 is tokens, the last axis head_dim, anything between (heads) is a set of
// independent streams. Multi-token groups (KIVI keys) are formed along the token axis.
struct KvTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;  // [tokens][streams][head_dim]
  int64_t tokens = 0;
  int64_t streams = 0;
  int head_dim = 0;
  const float* row(int64_t t, int64_t s) const { return &data[(static_cast<size_t>(t) * streams + s) * head_dim]; }
};

KvTensor load_tensor(const std::string& path) {
  NpyArray a = read_npy(path);
  if (a.shape.empty()) throw_input_error(path + ": a 0-dimensional array has no head_dim axis");
  KvTensor t;
  const int64_t d = a.shape.back();
  if (d <= 0 || d > 1024) throw_input_error(path + ": last axis (head_dim) is " + std::to_string(d) + ", expected 1..1024");
  t.head_dim = static_cast<int>(d);
  t.tokens = a.shape.size() >= 2 ? a.shape.front() : 1;
  t.streams = t.tokens == 0 ? 0 : a.elements() / (t.tokens * d);
  for (size_t i = 0; i < a.data.size(); ++i)
    if (!std::isfinite(a.data[i]))
      throw_input_error(path + ": element " + std::to_string(i) + " is not finite (" + fmt::format("{}", a.data[i]) + ")");
  t.shape = std::move(a.shape);
  t.data = std::move(a.data);
  return t;
}

KvTensor gaussian_tensor(int64_t n, int head_dim, uint64_t seed) {
  if (n <= 0 || n > (int64_t{1} << 26) / head_dim)
    throw_usage_error("kv check: --n must be in 1.." + std::to_string((int64_t{1} << 26) / head_dim) + " for head_dim " +
                      std::to_string(head_dim));
  KvTensor t;
  t.shape = {n, head_dim};
  t.tokens = n;
  t.streams = 1;
  t.head_dim = head_dim;
  t.data.resize(static_cast<size_t>(n) * head_dim);
  Rng rng(seed);
  for (float& x : t.data) x = static_cast<float>(rng.normal());
  return t;
}

// Calls fn(stream, first_token, group_rows) for every whole token group, rows gathered [G][D].
template <class Fn>
void for_each_group(const KvTensor& t, int group, Fn&& fn) {
  std::vector<float> rows(static_cast<size_t>(group) * t.head_dim);
  for (int64_t s = 0; s < t.streams; ++s)
    for (int64_t t0 = 0; t0 + group <= t.tokens; t0 += group) {
      for (int j = 0; j < group; ++j)
        std::copy_n(t.row(t0 + j, s), t.head_dim, rows.begin() + static_cast<ptrdiff_t>(j) * t.head_dim);
      fn(s, t0, rows.data());
    }
}

// ---- kv check ----

struct CheckResult {
  std::string role, format;
  int64_t vectors = 0;
  double bits = 0, mse = 0, nmse = 0, ip_rel_error = 0, ip_bias = 0, ip_bias_rel = 0;
};

CheckResult check_role(const char* role, const kn::FormatSpec& spec, const KvTensor& t, uint64_t seed) {
  const auto codec = kn::make_codec(*spec.format, t.head_dim, spec.options);
  const int G = codec->token_group(), D = t.head_dim;
  CheckResult r;
  r.role = role;
  r.format = spec.canonical();
  r.bits = codec->bits_per_element();
  // Queries are independent N(0, 1) vectors: the inner-product error is what attention scores see.
  constexpr int kQueries = 64;
  Rng rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::vector<float> queries(static_cast<size_t>(kQueries) * D), prepared(queries.size());
  for (float& x : queries) x = static_cast<float>(rng.normal());
  for (int qi = 0; qi < kQueries; ++qi) codec->prepare_query(&queries[static_cast<size_t>(qi) * D], &prepared[static_cast<size_t>(qi) * D]);
  std::vector<uint8_t> bytes(codec->group_bytes());
  std::vector<float> back(static_cast<size_t>(G) * D);
  double err2 = 0, ref2 = 0, ip_err2 = 0, ip_ref2 = 0, ip_err_sum = 0;
  int64_t n_ip = 0;
  for_each_group(t, G, [&](int64_t, int64_t t0, const float* rows) {
    codec->quantize(rows, bytes.data());
    codec->dequantize_ref(bytes.data(), back.data());
    for (int j = 0; j < G; ++j) {
      const float* x = rows + static_cast<size_t>(j) * D;
      const float* y = back.data() + static_cast<size_t>(j) * D;
      for (int i = 0; i < D; ++i) {
        const double d = static_cast<double>(y[i]) - x[i];
        err2 += d * d;
        ref2 += static_cast<double>(x[i]) * x[i];
      }
      const int qi = static_cast<int>((t0 + j) % kQueries);
      const float* q = &queries[static_cast<size_t>(qi) * D];
      double exact = 0;
      for (int i = 0; i < D; ++i) exact += static_cast<double>(q[i]) * x[i];
      const double est = codec->dot_ref(&prepared[static_cast<size_t>(qi) * D], bytes.data(), j);
      ip_err2 += (est - exact) * (est - exact);
      ip_ref2 += exact * exact;
      ip_err_sum += est - exact;
      ++n_ip;
    }
    r.vectors += G;
  });
  if (r.vectors == 0) return r;
  r.mse = err2 / (static_cast<double>(r.vectors) * D);
  r.nmse = ref2 > 0 ? err2 / ref2 : 0.0;
  r.ip_rel_error = ip_ref2 > 0 ? std::sqrt(ip_err2 / ip_ref2) : 0.0;
  r.ip_bias = ip_err_sum / static_cast<double>(n_ip);
  r.ip_bias_rel = ip_ref2 > 0 ? r.ip_bias / std::sqrt(ip_ref2 / static_cast<double>(n_ip)) : 0.0;
  return r;
}

struct CheckFlags {
  std::string input;
  int64_t n = 4096;
  uint64_t seed = 1;
  int head_dim = 0;  // 0: 128, or the input's last axis
};

void run_check(const std::string& spec, const CheckFlags& cf, bool as_json) {
  const kn::KvConfig config = kn::parse_kv_config(spec);
  KvTensor t;
  if (!cf.input.empty()) {
    t = load_tensor(cf.input);
    if (cf.head_dim != 0 && cf.head_dim != t.head_dim)
      throw_usage_error("kv check: --head-dim " + std::to_string(cf.head_dim) + " contradicts " + cf.input +
                        ", whose last axis is " + std::to_string(t.head_dim));
  } else {
    const int d = cf.head_dim != 0 ? cf.head_dim : 128;
    if (d <= 0 || d > 1024) throw_usage_error("kv check: --head-dim must be in 1..1024");
    t = gaussian_tensor(cf.n, d, cf.seed);
  }
  const std::vector<CheckResult> results = {check_role("k", config.key, t, cf.seed), check_role("v", config.value, t, cf.seed)};
  const std::string source = cf.input.empty() ? fmt::format("{} Gaussian vectors (seed {})", cf.n, cf.seed) : cf.input;
  if (as_json) {
    json roles = json::array();
    for (const CheckResult& r : results)
      roles.push_back({{"role", r.role}, {"format", r.format}, {"bits_per_element", r.bits}, {"vectors", r.vectors},
                       {"mse", r.mse}, {"nmse", r.nmse}, {"ip_rel_error", r.ip_rel_error}, {"ip_bias", r.ip_bias},
                       {"ip_bias_rel", r.ip_bias_rel}});
    const json j = {{"spec", spec}, {"canonical", config.canonical()}, {"source", source}, {"head_dim", t.head_dim},
                    {"seed", cf.seed}, {"roles", roles}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s on %s, head_dim %d\n", config.canonical().c_str(), source.c_str(), t.head_dim);
  std::printf("%-4s %-22s %6s %9s %11s %11s %11s %11s %11s\n", "role", "format", "bits", "vectors", "MSE", "NMSE",
              "IP rel err", "IP bias", "bias/rms");
  for (const CheckResult& r : results)
    std::printf("%-4s %-22s %6.3g %9lld %11.4g %11.4g %11.4g %11.3g %11.3g\n", r.role.c_str(), r.format.c_str(), r.bits,
                static_cast<long long>(r.vectors), r.mse, r.nmse, r.ip_rel_error, r.ip_bias, r.ip_bias_rel);
  for (const CheckResult& r : results)
    if (r.vectors < t.tokens * t.streams)
      std::printf("note: %s quantizes whole token groups; the last %lld tokens per stream (kept in f16 by the cache) are not measured\n",
                  r.format.c_str(), static_cast<long long>(t.tokens - r.vectors / std::max<int64_t>(t.streams, 1)));
}

// ---- kv roundtrip ----

void run_roundtrip(const std::string& spec, const std::string& input, const std::string& output, const std::string& role,
                   bool as_json) {
  const kn::KvConfig config = kn::parse_kv_config(spec);
  const kn::FormatSpec& side = role == "k" ? config.key : config.value;
  const KvTensor t = load_tensor(input);
  const auto codec = kn::make_codec(*side.format, t.head_dim, side.options);
  const int G = codec->token_group(), D = t.head_dim;
  // Tokens that do not fill a whole group stay in f16, as the cache's window keeps them.
  std::vector<float> out(t.data.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(f32_to_f16(t.data[i]));
  std::vector<uint8_t> bytes(codec->group_bytes());
  std::vector<float> back(static_cast<size_t>(G) * D);
  double err2 = 0, ref2 = 0;
  for_each_group(t, G, [&](int64_t s, int64_t t0, const float* rows) {
    codec->quantize(rows, bytes.data());
    codec->dequantize_ref(bytes.data(), back.data());
    for (int j = 0; j < G; ++j)
      std::copy_n(back.begin() + static_cast<ptrdiff_t>(j) * D, D, out.begin() + static_cast<ptrdiff_t>(((t0 + j) * t.streams + s) * D));
  });
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = static_cast<double>(out[i]) - t.data[i];
    err2 += d * d;
    ref2 += static_cast<double>(t.data[i]) * t.data[i];
  }
  write_npy(output, t.shape, out.data(), NpyDtype::f32);
  const double nmse = ref2 > 0 ? err2 / ref2 : 0.0;
  if (as_json) {
    const json j = {{"input", input}, {"output", output}, {"role", role}, {"format", side.canonical()},
                    {"shape", t.shape}, {"nmse", nmse}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("wrote %s (%s, %s as %s, NMSE %.4g)\n", output.c_str(), fmt::format("{}", fmt::join(t.shape, "x")).c_str(),
                role == "k" ? "keys" : "values", side.canonical().c_str(), nmse);
  }
}

}  // namespace

void add_kv_commands(CLI::App& app, CommandContext&) {
  CLI::App* kv = app.add_subcommand("kv", "KV formats and configs: list, show, check on your tensors, round trip");
  kv->require_subcommand(1);

  CLI::App* list = kv->add_subcommand("list", "List every KV format with its size and the engine it mirrors");
  auto list_json = std::make_shared<bool>(false);
  list->add_flag("--json", *list_json, "Print a JSON array");
  list->callback([list_json] { run_list(*list_json); });

  CLI::App* show = kv->add_subcommand("show", "Show a KV config: canonical form, hash, per-layer formats, bytes per token");
  auto show_spec = std::make_shared<std::string>();
  auto show_shape = std::make_shared<ShapeFlags>();
  auto show_json = std::make_shared<bool>(false);
  show->add_option("SPEC", *show_spec, "KV config, e.g. fp8, k8v4, q8_0/q4_0, turboquant_k3v4_nc")->required();
  show->add_option("--layers", show_shape->layers, "Model layers (default 30, SmolLM2-135M)");
  show->add_option("--kv-heads", show_shape->kv_heads, "KV heads (default 3)");
  show->add_option("--head-dim", show_shape->head_dim, "Head dimension (default 64)");
  show->add_flag("--json", *show_json, "Print one JSON object");
  show->callback([=] { run_show(*show_spec, *show_shape, *show_json); });

  CLI::App* check = kv->add_subcommand(
      "check", "Measure a config's K and V error: MSE, NMSE, inner-product error and bias, on Gaussian data or a .npy dump");
  auto check_spec = std::make_shared<std::string>();
  auto check_flags = std::make_shared<CheckFlags>();
  auto check_json = std::make_shared<bool>(false);
  check->add_option("SPEC", *check_spec, "KV config")->required();
  check->add_option("--input", check_flags->input,
                    ".npy float16/float32 tensor [tokens, (heads,) head_dim] (default: Gaussian vectors)");
  check->add_option("--n", check_flags->n, "Number of Gaussian vectors (default 4096)");
  check->add_option("--seed", check_flags->seed, "Seed for the vectors and queries (default 1)")->check(seed_check());
  check->add_option("--head-dim", check_flags->head_dim, "Head dimension (default 128, or the input's last axis)");
  check->add_flag("--json", *check_json, "Print one JSON object");
  check->callback([=] { run_check(*check_spec, *check_flags, *check_json); });

  CLI::App* rt = kv->add_subcommand("roundtrip", "Quantize and dequantize a .npy tensor, writing float32 of the same shape");
  auto rt_spec = std::make_shared<std::string>();
  auto rt_input = std::make_shared<std::string>();
  auto rt_output = std::make_shared<std::string>();
  auto rt_role = std::make_shared<std::string>("k");
  auto rt_json = std::make_shared<bool>(false);
  rt->add_option("SPEC", *rt_spec, "KV config")->required();
  rt->add_option("--input", *rt_input, ".npy tensor [tokens, (heads,) head_dim]")->required();
  rt->add_option("--output", *rt_output, "Output .npy (float32)")->required();
  rt->add_option("--role", *rt_role, "Use the config's key (k) or value (v) format")->check(CLI::IsMember({"k", "v"}));
  rt->add_flag("--json", *rt_json, "Print one JSON object");
  rt->callback([=] { run_roundtrip(*rt_spec, *rt_input, *rt_output, *rt_role, *rt_json); });
}

}  // namespace kvgate::harness
