// KV config specs: parsing, canonical text, hashing and storage sizes. The grammar is
// documented for users in docs/kv-specs.md; this file is its only implementation.
#include "kernels/kv_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/hash.h"
#include "kernels/hadamard.h"

namespace kvgate::kernels {
namespace {

// Names that mean one registered format on either side of a config. They exist because
// engines spell the same storage differently (vLLM `fp8`, `auto`, `*_per_token_head`).
struct FormatAlias {
  std::string_view alias;
  std::string_view format;
};
constexpr FormatAlias kFormatAliases[] = {
    {"none", "f16"},          {"auto", "f16"},          {"float16", "f16"},
    {"fp16", "f16"},          {"bfloat16", "bf16"},     {"float32", "f32"},
    {"fp8", "fp8_e4m3"},      {"fp8_e4m3fn", "fp8_e4m3"}, {"int8", "int8_pth"},
    {"int4", "int4_pth"},     {"int8_per_token_head", "int8_pth"},
    {"fp8_per_token_head", "fp8_pth"},
};

// vLLM and SGLang --kv-cache-dtype values whose storage no registered format reproduces: naming
// one is a usage error that says why. (Their other values are format names or aliases above, or
// config aliases below; nvfp4_4over6 and SGLang's fp4_mx_block16 are formats.)
struct RefusedName {
  std::string_view name;
  std::string_view reason;
};
constexpr RefusedName kRefusedNames[] = {
    {"fp8_inc",
     "is Intel Gaudi's FP8 through Intel Neural Compressor: its per-tensor scales come from a calibration "
     "measurement file (QUANT_CONFIG) and INC also runs the attention matmuls and softmax in FP8 (E4M3 limited to "
     "+-240 on Gaudi 2); kvgate cannot reproduce it without that file. The nearest storage is "
     "fp8_e4m3:scale=S (Gaudi 3) or fp8_e4m3fnuz:scale=S (Gaudi 2) with the calibrated scale S"},
    {"fp8_ds_mla",
     "is DeepSeek's sparse-MLA latent cache (V3.2: 656 bytes per token, 512 fp8_e4m3 NoPE values with one f32 "
     "scale per 128, then 64 bf16 RoPE values; V4: 584 bytes); it needs a multi-head latent attention model, and "
     "kvgate runs Llama-family attention with per-head K and V"},
    {"nvfp4_ds_mla",
     "is the NVFP4 layout of DeepSeek's MLA latent cache (512 NoPE values as E2M1 with an E4M3 scale per 16, then "
     "64 bf16 RoPE values: 432 bytes per token); it needs a multi-head latent attention model, and kvgate runs "
     "Llama-family attention with per-head K and V"},
    {"mxfp8",
     "is SGLang's block-scaled FP8 cache for its FA4 backend (SGLang 0.5.23): E4M3 values with a power-of-two "
     "(UE8M0) scale per 32 elements, written by a fused kernel that also quantizes each query row to MXFP8 for a "
     "block-scaled Q.K (kernels/ops/kvcache/mxfp8_quant_store_kv.py, srt/layers/attention/flashattention_backend.py "
     "_mxfp8_sf_kwargs); SGLang runs it only for models whose attention layer supplies those query scales (Inkling), "
     "and kvgate's Llama-family attention keeps the query in float, so a storage emulation would not be what SGLang "
     "computes"},
    {"int4_per_token_head",
     "is vLLM's 4-bit per-token-head cache, whose storage kvgate does not reproduce: vLLM 0.28 rotates and stores "
     "asymmetric codes, later versions a non-uniform 16-level codebook with fp16 scales per channel group; "
     "kvgate's int4_pth (alias int4) is the symmetric uniform int4 with one f32 scale per token and head"},
};

// Names that mean a whole config (key and value, sometimes layer overrides). The vLLM presets
// keep the first and last two layers uncompressed because vLLM's TurboQuant backend does so
// for dense models ("boundary protection"); `k8v4` is the bare format pair without it.
struct ConfigAlias {
  std::string_view alias;
  std::string_view expansion;
};
constexpr ConfigAlias kConfigAliases[] = {
    {"k8v4", "fp8_e4m3/u4"},
    {"turboquant_k8v4", "fp8_e4m3/u4@keep=2"},
    {"turboquant_4bit_nc", "tq4:nc/u4@keep=2"},
    {"turboquant_k3v4_nc", "tq3:nc/u4@keep=2"},
    {"turboquant_3bit_nc", "tq3:nc/u3@keep=2"},
    {"kivi2", "kivi2_k/kivi2_v"},
    {"kivi4", "kivi4_k/kivi4_v"},
};

constexpr int kMaxLayerIndex = 4095;
constexpr int kDefaultKiviGroup = 32;
constexpr int kDefaultKiviResidual = 128;
const FormatOptions kDefaults{};

// Built by appending: gcc 12 warns (-Wrestrict, a false positive) on "'" + std::string(...).
std::string quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  out += s;
  out += '\'';
  return out;
}

const RefusedName* find_refused_name(std::string_view name) {
  for (const auto& r : kRefusedNames)
    if (r.name == name) return &r;
  return nullptr;
}

std::string alias_names_joined() {
  std::string out;
  for (const auto& a : kFormatAliases) out += (out.empty() ? "" : ", ") + std::string(a.alias);
  for (const auto& a : kConfigAliases) out += ", " + std::string(a.alias);
  return out;
}

[[noreturn]] void spec_error(std::string_view spec, const std::string& problem) {
  throw_usage_error("KV spec '" + std::string(spec) + "': " + problem);
}

[[noreturn]] void unknown_name_error(std::string_view spec, std::string_view name) {
  spec_error(spec, "unknown format '" + std::string(name) + "'; valid formats: " + format_names_joined() +
                       "; aliases: " + alias_names_joined() + "; a value side may also be a width N (= uN)");
}

const ConfigAlias* find_config_alias(std::string_view name) {
  for (const auto& a : kConfigAliases)
    if (a.alias == name) return &a;
  return nullptr;
}

bool parse_int(std::string_view text, long long& out) {
  if (text.empty()) return false;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, out);
  return ec == std::errc() && ptr == end;
}

bool parse_seed(std::string_view text, uint64_t& out) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && text[1] == 'x') {
    text.remove_prefix(2);
    base = 16;
  }
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && ptr == text.data() + text.size();
}

bool parse_float(std::string_view text, float& out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

std::string format_float(float v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, ptr);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t pos = s.find(sep, start);
    parts.push_back(s.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

// Resolves a side's format name: a registered name, a single-format alias, or (value side
// only) a bare width N meaning the uniform value format uN.
const FormatInfo* resolve_format(std::string_view spec, std::string_view name, bool value_side) {
  if (const FormatInfo* f = find_format(name)) return f;
  std::string target;
  for (const auto& a : kFormatAliases)
    if (a.alias == name) target = a.format;
  long long width = 0;
  if (target.empty() && value_side && parse_int(name, width)) target = std::string("u").append(name);
  if (target.empty()) {
    if (const RefusedName* r = find_refused_name(name))
      spec_error(spec, "vLLM's --kv-cache-dtype " + std::string(name) + " " + std::string(r->reason));
    if (find_config_alias(name))
      spec_error(spec, quote(name) + " names a whole key/value config and cannot be one side of '/' or take options");
    unknown_name_error(spec, name);
  }
  const FormatInfo* f = find_format(target);
  if (!f)
    spec_error(spec, quote(name) + " means format " + target +
                         ", which this build does not register; valid formats: " + format_names_joined());
  return f;
}

void apply_option(std::string_view spec, const FormatInfo* f, std::string_view option, FormatOptions& o) {
  const size_t eq = option.find('=');
  const std::string_view key = option.substr(0, eq);
  const bool has_value = eq != std::string_view::npos;
  const std::string_view value = has_value ? option.substr(eq + 1) : std::string_view{};
  const std::string where = "option '" + std::string(option) + "' of " + std::string(f->name);
  auto need_value = [&] {
    if (!has_value || value.empty()) spec_error(spec, where + " needs a value (" + std::string(key) + "=...)");
  };
  // Which options a format takes is its registry entry's to say (FormatInfo::options).
  auto need_option = [&](uint32_t accepted) {
    if ((f->options & accepted) == 0)
      spec_error(spec, where + " does not apply to the " + std::string(f->family) + " family");
  };
  // A format that always rotates (TurboQuant) chooses hadamard (its default) or qr; the others
  // may add llama.cpp's Hadamard rotation or leave it off.
  const bool always_rotates = f->accepts(kOptionRotationKind);
  if (key == "scale") {
    need_option(kOptionScale);
    need_value();
    float s = 0.0f;
    if (!parse_float(value, s) || !std::isfinite(s) || s <= 0.0f)
      spec_error(spec, where + ": scale must be a positive finite number");
    o.scale = s;
  } else if (key == "rot") {
    need_option(kOptionRotation | kOptionRotationKind);
    const std::string_view kind = has_value ? value : std::string_view("hadamard");
    if (kind == "hadamard") {
      // TurboQuant always rotates; Hadamard is its default, stored as "none" = format default.
      o.rotation = always_rotates ? Rotation::none : Rotation::hadamard;
    } else if (kind == "qr" && always_rotates) {
      o.rotation = Rotation::qr;
    } else if (kind == "wht" && !always_rotates) {
      o.rotation = Rotation::wht;
    } else if (kind == "none" && !always_rotates) {
      o.rotation = Rotation::none;
    } else {
      spec_error(spec, where + ": valid rotations for " + std::string(f->name) + " are " +
                           (always_rotates ? "hadamard, qr" : "wht (llama.cpp's), hadamard (randomized), none"));
    }
  } else if (key == "nc") {
    need_option(kOptionNormCorrection);
    if (has_value) spec_error(spec, where + " takes no value");
    o.norm_correction = true;
  } else if (key == "seed") {
    need_option(kOptionSeed);
    need_value();
    if (!parse_seed(value, o.seed)) spec_error(spec, where + ": seed must be a decimal or 0x-hex 64-bit integer");
  } else if (key == "outliers") {
    need_option(kOptionOutliers);
    need_value();
    long long n = 0;
    if (!parse_int(value, n) || n < 0 || n > 1024)
      spec_error(spec, where + ": outliers must be a channel count in 0..1024");
    o.outlier_channels = static_cast<int>(n);
  } else if (key == "group") {
    need_option(kOptionTokenGroup);
    need_value();
    long long n = 0;
    if (!parse_int(value, n) || n < 1 || n > 1024) spec_error(spec, where + ": group must be 1..1024 tokens");
    o.token_group = n == kDefaultKiviGroup ? 0 : static_cast<int>(n);
  } else if (key == "residual") {
    need_option(kOptionResidual);
    need_value();
    long long n = 0;
    if (!parse_int(value, n) || n < 0 || n > 65536)
      spec_error(spec, where + ": residual must be 0..65536 tokens");
    o.residual_tokens = static_cast<int>(n);
  } else {
    spec_error(spec, "unknown " + where + "; options are scale=F (fp8, nvfp4), rot[=hadamard|qr|none], nc, seed=N, "
                                          "outliers=N (turboquant), group=N, residual=N (kivi)");
  }
}

// legacy: a canonical string stored by a kvgate whose llama.cpp types meant no rotation when
// bare (parse_stored_kv_config).
FormatSpec parse_side(std::string_view spec, std::string_view text, bool value_side, bool legacy) {
  if (text.empty()) spec_error(spec, "empty format name");
  const std::vector<std::string_view> parts = split(text, ':');
  FormatSpec out;
  out.format = resolve_format(spec, parts[0], value_side);
  std::set<std::string_view> seen;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].empty()) spec_error(spec, "empty option after ':'");
    const std::string_view key = parts[i].substr(0, parts[i].find('='));
    if (!seen.insert(key).second) spec_error(spec, "option '" + std::string(key) + "' given twice");
    apply_option(spec, out.format, parts[i], out.options);
  }
  // The bare name means what the engine it mirrors does by default (llama.cpp rotates).
  if (!seen.count("rot") && !legacy) out.options.rotation = out.format->default_rotation;
  // llama.cpp decides K and V separately, with its own block for each (kernels/hadamard.h).
  if (out.options.rotation == Rotation::wht) out.options.rotation_block = value_side ? kLlamaCppRotationUnit : 0;
  // A seed without a randomized rotation would change the canonical form (and hash) but not the storage.
  if (out.options.seed != kDefaults.seed && !out.format->accepts(kOptionRotationKind) &&
      out.options.rotation != Rotation::hadamard)
    spec_error(spec, "seed= only matters with rot=hadamard for " + std::string(out.format->name));
  return out;
}

std::string names_for_role(bool values) {
  std::string out;
  for (const FormatInfo* f : all_formats())
    if (values ? f->for_values : f->for_keys) out.append(out.empty() ? "" : ", ").append(f->name);
  return out;
}

void check_role(std::string_view spec, const FormatSpec& f, bool as_value) {
  if (as_value && !f.format->for_values)
    spec_error(spec, std::string(f.format->name) + " is a key-only format and cannot store values" +
                         " (name a value format after '/', e.g. " + std::string(f.format->name) +
                         "/4); value formats: " + names_for_role(true));
  if (!as_value && !f.format->for_keys)
    spec_error(spec, std::string(f.format->name) + " is a value-only format and cannot store keys; key formats: " +
                         names_for_role(false));
}

// BASE := PAIR_ALIAS | SIDE [ '/' SIDE ]; a pair alias may bring its own overrides.
void parse_base(std::string_view spec, std::string_view text, KvConfig& out, bool legacy) {
  if (const ConfigAlias* a = find_config_alias(text)) {
    KvConfig expanded;
    try {
      expanded = parse_kv_config(a->expansion);
    } catch (const Error& e) {
      // Only reachable while a family the alias names is missing from the build.
      spec_error(spec, quote(text) + " means " + quote(a->expansion) + ", which fails: " + e.what());
    }
    out.key = expanded.key;
    out.value = expanded.value;
    out.overrides.insert(out.overrides.end(), expanded.overrides.begin(), expanded.overrides.end());
    return;
  }
  const std::vector<std::string_view> sides = split(text, '/');
  if (sides.size() > 2) spec_error(spec, "more than one '/' (expected KEY/VALUE)");
  // A single side is parsed once per role: the role decides llama.cpp's rotation block.
  out.key = parse_side(spec, sides[0], false, legacy);
  out.value = parse_side(spec, sides.size() == 2 ? sides[1] : sides[0], true, legacy);
  check_role(spec, out.key, false);
  check_role(spec, out.value, true);
}

// One layer index of a range: `3` counts from the first layer, `-1` is the last layer.
void parse_layer_index(std::string_view spec, std::string_view text, int& index, bool& from_end) {
  long long v = 0;
  if (!parse_int(text, v) || (v == 0 && text[0] == '-') || v > kMaxLayerIndex || v < -(kMaxLayerIndex + 1))
    spec_error(spec, "bad layer index '" + std::string(text) + "' (use 0.." + std::to_string(kMaxLayerIndex) +
                         ", or -1 for the last layer)");
  from_end = v < 0;
  index = from_end ? static_cast<int>(-v - 1) : static_cast<int>(v);
}

void parse_override(std::string_view spec, std::string_view text, KvConfig& out, bool& engine_seen, bool legacy) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == text.size())
    spec_error(spec, "override '" + std::string(text) + "' must be keep=N, LAYERS=SPEC (e.g. 0-1=f16) or engine=NAME");
  const std::string_view lhs = text.substr(0, eq);
  const std::string_view rhs = text.substr(eq + 1);
  const FormatSpec f16{find_format("f16"), {}};
  if (lhs == "engine") {
    if (engine_seen) spec_error(spec, "engine= given twice");
    const std::optional<Arithmetic> e = find_arithmetic(rhs);
    if (!e) spec_error(spec, "unknown engine '" + std::string(rhs) + "'; engines: " + arithmetic_names_joined());
    out.arithmetic = *e;
    engine_seen = true;
    return;
  }
  if (lhs == "kv-cache-dtype-skip-layers" || lhs == "kv_cache_dtype_skip_layers") {
    // vLLM's --kv-cache-dtype-skip-layers: these layers keep the model's dtype (auto = f16).
    for (std::string_view item : split(rhs, ':')) {
      long long n = 0;
      if (item == "sliding_window")
        spec_error(spec, "kv-cache-dtype-skip-layers=sliding_window names layers by attention type, which a KV spec "
                         "cannot resolve without the model; list the sliding-window layers' indices instead");
      if (!parse_int(item, n) || n < 0 || n > kMaxLayerIndex)
        spec_error(spec, "kv-cache-dtype-skip-layers needs layer indices 0.." + std::to_string(kMaxLayerIndex) +
                             " separated by ':' (vLLM's '0 1 31' is kv-cache-dtype-skip-layers=0:1:31), got '" +
                             std::string(item) + "'");
      out.overrides.push_back({static_cast<int>(n), static_cast<int>(n), false, f16, f16});
    }
    return;
  }
  if (lhs == "keep") {
    long long n = 0;
    if (!parse_int(rhs, n) || n < 0 || n > kMaxLayerIndex)
      spec_error(spec, "keep=N needs a layer count N in 0.." + std::to_string(kMaxLayerIndex));
    if (n == 0) return;
    out.overrides.push_back({0, static_cast<int>(n - 1), false, f16, f16});
    out.overrides.push_back({static_cast<int>(n - 1), 0, true, f16, f16});
    return;
  }
  // LAYERS: `I` or `I-J`; the separating '-' is the first one after the first character, which
  // lets `-2--1` split into `-2` and `-1`.
  LayerOverride ov;
  const size_t dash = lhs.find('-', 1);
  bool last_from_end = false;
  if (dash == std::string_view::npos) {
    parse_layer_index(spec, lhs, ov.first, ov.from_end);
    ov.last = ov.first;
    last_from_end = ov.from_end;
  } else {
    parse_layer_index(spec, lhs.substr(0, dash), ov.first, ov.from_end);
    parse_layer_index(spec, lhs.substr(dash + 1), ov.last, last_from_end);
  }
  if (ov.from_end != last_from_end)
    spec_error(spec, "layer range '" + std::string(lhs) + "' mixes counting from the start and from the end");
  if (ov.from_end ? ov.first < ov.last : ov.first > ov.last)
    spec_error(spec, "layer range '" + std::string(lhs) + "' is empty (first layer after last)");
  if (rhs.find('@') != std::string_view::npos) spec_error(spec, "nested '@' in an override");
  KvConfig sub;
  parse_base(spec, rhs, sub, legacy);
  if (!sub.overrides.empty())
    spec_error(spec, "override value '" + std::string(rhs) + "' carries its own layer overrides");
  ov.key = sub.key;
  ov.value = sub.value;
  out.overrides.push_back(ov);
}

std::string layer_text(int index, bool from_end) {
  return from_end ? std::string("-").append(std::to_string(index + 1)) : std::to_string(index);
}

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

}  // namespace

std::string FormatSpec::canonical() const {
  KVGATE_CHECK(format != nullptr, "FormatSpec without a format");
  std::string out(format->name);
  const FormatOptions& o = options;
  if (o.scale != kDefaults.scale) out += ":scale=" + format_float(o.scale);
  if (o.rotation == Rotation::hadamard) out += ":rot";
  if (o.rotation == Rotation::qr) out += ":rot=qr";
  if (o.rotation == Rotation::wht) out += ":rot=wht";
  if (o.rotation == Rotation::none && format->default_rotation != Rotation::none) out += ":rot=none";
  if (o.norm_correction) out += ":nc";
  if (o.seed != kDefaults.seed) out += ":seed=0x" + hex_u64(o.seed);
  if (o.outlier_channels != 0) out += ":outliers=" + std::to_string(o.outlier_channels);
  if (format->accepts(kOptionTokenGroup) && o.token_group != 0) out += ":group=" + std::to_string(o.token_group);
  if (format->accepts(kOptionResidual) && o.residual_tokens != kDefaultKiviResidual)
    out += ":residual=" + std::to_string(o.residual_tokens);
  return out;
}

bool LayerOverride::covers(int layer, int n_layers) const {
  if (!from_end) return layer >= first && layer <= last;
  const int from_last = n_layers - 1 - layer;
  return from_last <= first && from_last >= last;
}

std::string KvConfig::canonical() const {
  std::string out = key.canonical() + "/" + value.canonical();
  for (const LayerOverride& ov : overrides) {
    out.append("@").append(layer_text(ov.first, ov.from_end));
    if (ov.first != ov.last) out.append("-").append(layer_text(ov.last, ov.from_end));
    out.append("=").append(ov.key.canonical()).append("/").append(ov.value.canonical());
  }
  if (arithmetic != Arithmetic::exact) out.append("@engine=").append(arithmetic_name(arithmetic));
  return out;
}

uint64_t KvConfig::hash() const { return xxhash64(canonical()); }

const FormatSpec& KvConfig::key_for_layer(int layer, int n_layers) const {
  const FormatSpec* chosen = &key;
  for (const LayerOverride& ov : overrides)
    if (ov.covers(layer, n_layers)) chosen = &ov.key;
  return *chosen;
}

const FormatSpec& KvConfig::value_for_layer(int layer, int n_layers) const {
  const FormatSpec* chosen = &value;
  for (const LayerOverride& ov : overrides)
    if (ov.covers(layer, n_layers)) chosen = &ov.value;
  return *chosen;
}

double KvConfig::bytes_per_token(const KvShape& shape) const {
  if (shape.n_layers <= 0 || shape.n_kv_heads <= 0 || shape.head_dim <= 0)
    throw_usage_error("KV shape needs positive n_layers, n_kv_heads and head_dim (got " +
                      std::to_string(shape.n_layers) + ", " + std::to_string(shape.n_kv_heads) + ", " +
                      std::to_string(shape.head_dim) + ")");
  // Codecs are built once per distinct spec: a model has tens of layers but few distinct specs.
  std::map<std::string, double> per_head_bytes;
  auto bytes_of = [&](const FormatSpec& f) {
    const std::string c = f.canonical();
    auto it = per_head_bytes.find(c);
    if (it == per_head_bytes.end())
      it = per_head_bytes.emplace(c, make_codec(*f.format, shape.head_dim, f.options)->bytes_per_token()).first;
    return it->second;
  };
  double total = 0.0;
  for (int layer = 0; layer < shape.n_layers; ++layer)
    total += bytes_of(key_for_layer(layer, shape.n_layers)) + bytes_of(value_for_layer(layer, shape.n_layers));
  return total * shape.n_kv_heads;
}

double KvConfig::bits_per_element(const KvShape& shape) const {
  const double elements = 2.0 * shape.n_layers * shape.n_kv_heads * shape.head_dim;
  return 8.0 * bytes_per_token(shape) / elements;
}

FormatSpec parse_format_spec(std::string_view text, bool value_side) {
  std::string lowered = trim(text);
  std::transform(lowered.begin(), lowered.end(), lowered.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  FormatSpec f = parse_side(lowered, lowered, value_side, false);
  check_role(lowered, f, value_side);
  return f;
}

namespace {

KvConfig parse_config(std::string_view spec_in, bool legacy) {
  std::string spec = trim(spec_in);
  if (spec.empty()) throw_usage_error("empty KV spec; valid formats: " + format_names_joined());
  std::transform(spec.begin(), spec.end(), spec.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (char c : spec)
    if (std::isspace(static_cast<unsigned char>(c)) || c == ',')
      spec_error(spec, std::string("unexpected ") + (c == ',' ? "','" : "space") +
                           " (commas separate configs in a --kv list)");
  KvConfig out;
  out.name = std::string(trim(spec_in));
  const std::vector<std::string_view> parts = split(spec, '@');
  parse_base(spec, parts[0], out, legacy);
  bool engine_seen = false;
  for (size_t i = 1; i < parts.size(); ++i) parse_override(spec, parts[i], out, engine_seen, legacy);
  // Every layer's formats must be ones the engine has (an override may name others).
  auto check_engine = [&](const FormatSpec& k, const FormatSpec& v) {
    const std::string why = arithmetic_refusal(out.arithmetic, *k.format, *v.format);
    if (!why.empty()) spec_error(spec, "@engine=" + std::string(arithmetic_name(out.arithmetic)) + ": " + why);
  };
  check_engine(out.key, out.value);
  for (const LayerOverride& ov : out.overrides) check_engine(ov.key, ov.value);
  return out;
}

}  // namespace

KvConfig parse_kv_config(std::string_view spec) { return parse_config(spec, false); }

KvConfig parse_stored_kv_config(std::string_view canonical) { return parse_config(canonical, true); }

std::string rotation_summary(const FormatSpec& f, int head_dim) {
  const FormatOptions& o = f.options;
  if (f.format->accepts(kOptionRotationKind))
    return o.rotation == Rotation::qr ? "seeded random orthogonal matrix (rot=qr, seed 0x" + hex_u64(o.seed) + ")"
                                      : "randomized Walsh-Hadamard over head_dim (the format's own, seed 0x" +
                                            hex_u64(o.seed) + ")";
  switch (o.rotation) {
    case Rotation::none:
      return f.format->default_rotation != Rotation::none
                 ? "none (rot=none: llama.cpp with LLAMA_ATTN_ROT_DISABLE=1, or before its PR #21038)"
                 : "none";
    case Rotation::hadamard:
      return "randomized Walsh-Hadamard over head_dim (rot=hadamard, seed 0x" + hex_u64(o.seed) + ")";
    case Rotation::qr:
      return "seeded random orthogonal matrix (rot=qr)";
    case Rotation::wht: {
      const int block = wht_rotation_block(head_dim, o.rotation_block);
      if (block == 0)
        return "none at head_dim " + std::to_string(head_dim) + " (rot=wht: llama.cpp rotates only when head_dim % 64 == 0)";
      return "llama.cpp's Walsh-Hadamard, H/sqrt(" + std::to_string(block) + ") on blocks of " + std::to_string(block) +
             " (rot=wht)";
    }
  }
  return "none";
}

std::vector<KvConfig> parse_kv_config_list(std::string_view specs) {
  std::vector<KvConfig> out;
  std::set<std::string> seen;
  for (std::string_view item : split(specs, ',')) {
    if (trim(item).empty()) throw_usage_error("--kv list '" + std::string(specs) + "' has an empty entry");
    KvConfig c = parse_kv_config(item);
    if (!seen.insert(c.canonical()).second)
      throw_usage_error("--kv list '" + std::string(specs) + "' names " + c.canonical() + " twice");
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace kvgate::kernels
