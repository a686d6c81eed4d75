#pragma once
// A KV config: key format + value format + per-layer overrides. Parsed from the spec strings
// users type (`none`, `fp8`, `k8v4`, `q8_0/q4_0`, `tq4/4`, vLLM's `turboquant_k8v4`, ...),
// printed in one canonical form, and hashed stably so results can be keyed by it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/kv_format.h"

namespace kvgate::kernels {

struct FormatSpec {
  const FormatInfo* format = nullptr;
  FormatOptions options;
  // e.g. "fp8_e4m3", "fp8_e4m3:scale=0.5", "tq4:rot=qr:nc", "q4_0:rot=wht", "q4_0:rot=none". The
  // rotation of a format whose bare name implies one (FormatInfo::default_rotation) is always
  // spelled out, so a bare "q4_0" in a stored canonical string can only be an older kvgate's,
  // meaning no rotation (parse_stored_kv_config reads it so).
  std::string canonical() const;
  bool operator==(const FormatSpec& o) const { return format == o.format && options == o.options; }
};

// Layers [first, last] (0-based, inclusive) use `key`/`value` instead of the config's default.
// With from_end, first/last count back from the last layer (0 = last layer), and first >= last,
// so the spec text `-2--1` (the last two layers) is stored as first = 1, last = 0. A range that
// reaches past the model's layers covers only the layers that exist.
struct LayerOverride {
  int first = 0;
  int last = 0;
  bool from_end = false;  // first/last count from the last layer (0 = last layer)
  FormatSpec key;
  FormatSpec value;
  bool covers(int layer, int n_layers) const;
  bool operator==(const LayerOverride&) const = default;
};

struct KvShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

struct KvConfig {
  std::string name;  // what the user typed (kept for display)
  FormatSpec key;
  FormatSpec value;
  std::vector<LayerOverride> overrides;  // later entries win
  // Whose attention arithmetic reads the cache (`@engine=NAME`, kernels/arithmetic.h); exact, the
  // default, is kvgate's f32 attention.
  Arithmetic arithmetic = Arithmetic::exact;

  std::string canonical() const;  // stable text; equal configs give equal strings
  uint64_t hash() const;          // xxhash64 of canonical()
  const FormatSpec& key_for_layer(int layer, int n_layers) const;
  const FormatSpec& value_for_layer(int layer, int n_layers) const;
  // Storage per token over all layers and KV heads, K and V, scales and norms included.
  double bytes_per_token(const KvShape& shape) const;
  // Average stored bits per K/V element over all layers.
  double bits_per_element(const KvShape& shape) const;
  // Compares the parsed meaning; `name` (what the user typed) is ignored.
  bool operator==(const KvConfig& o) const {
    return key == o.key && value == o.value && overrides == o.overrides && engine == o.arithmetic;
  }
};

// Grammar (docs/kv-specs.md):  CONFIG := BASE ( '@' OVERRIDE )*
//   BASE     := PAIR_ALIAS | SIDE [ '/' SIDE ]       SIDE := NAME ( ':' OPTION )*
//   OVERRIDE := 'keep=' N | RANGE '=' BASE | 'engine=' ENGINE
//             | 'kv-cache-dtype-skip-layers=' I ( ':' I )*     (vLLM's flag: those layers in f16)
//   RANGE    := I | I '-' J  (negative = from end)
// Throws a usage error listing the valid names when the spec is unknown or contradictory, and
// one giving the reason for an engine's name kvgate refuses (an MLA-only vLLM cache dtype).
KvConfig parse_kv_config(std::string_view spec);
// A canonical string read back from stored results: the same grammar, except that a llama.cpp
// cache type without `rot` means no rotation, as it did when kvgate wrote such strings (every
// canonical string written since spells its rotation). parse_stored_kv_config(c.canonical()) == c.
KvConfig parse_stored_kv_config(std::string_view canonical);
// One format with options (`q4_0:rot`, `fp8`, `4` = u4 when `value_side`), as a side of a config.
FormatSpec parse_format_spec(std::string_view text, bool value_side);
// What a side's rotation does at this head_dim, in words (`kvgate kv show`).
std::string rotation_summary(const FormatSpec& f, int head_dim);
// A comma-separated list of specs, as given to --kv.
std::vector<KvConfig> parse_kv_config_list(std::string_view specs);

}  // namespace kvgate::kernels
