#pragma once
// The KV format registry: one FormatInfo per stored format, and a Codec that instantiates a
// format for one head dimension and its options. The entry carries everything about a format
// (ggml's type_traits table is the model): its id, which the SIMD and GPU kernels switch on, its
// roles, head_dim rules, the spec options it accepts, how the GPU keeps it, and its codec.
// Tests, benchmarks, `kvgate kv list`, the attention kernels and the capacity simulator all
// iterate this table, so adding a format is one entry plus its codec (docs/adding-a-kv-format.md).
//
// Unit of storage: a *group* of `token_group` consecutive tokens of one KV head (head_dim
// elements each). Almost every format quantizes tokens independently (token_group == 1); KIVI
// keys quantize each channel across 32 tokens, so their group is 32 tokens. A group occupies
// exactly `group_bytes()` bytes, and consecutive groups are stored back to back.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/arithmetic.h"
#include "kernels/format_id.h"

namespace kvgate::kernels {

enum BackendMask : uint32_t {
  kBackendCpu = 1u << 0,
  kBackendCuda = 1u << 1,
  kBackendHip = 1u << 2,
};

// Rotations applied to a head vector before scalar quantization (queries get the same one):
//  - hadamard: kvgate's randomized Walsh-Hadamard R = H D / sqrt(n) over the whole head
//    (kernels/hadamard.h), TurboQuant's default; on the ggml formats `rot` / `rot=hadamard`.
//  - qr: a seeded Haar-random orthogonal matrix (TurboQuant `rot=qr`).
//  - wht: llama.cpp's attention rotation (PR #21038): the unsigned orthonormal Sylvester
//    Walsh-Hadamard matrix on blocks of head_dim (FormatOptions::rotation_block), and only when
//    head_dim % 64 == 0, as llama.cpp decides it. The default of llama.cpp's cache types.
enum class Rotation : uint8_t { none, hadamard, qr, wht };

// Per-format options a KV spec may set (see kv_config.h for the spec grammar).
struct FormatOptions {
  float scale = 1.0f;               // per-tensor scale (FP8): stored = x / scale
  Rotation rotation = Rotation::none;  // see Rotation; TurboQuant picks its own default
  // rot=wht's block: 0 = llama.cpp's key block, the largest power of two >= 64 dividing head_dim;
  // else this many elements (llama.cpp's values: 64). Not spelled in specs: the parser sets it
  // from the side of the config (kv_config.cc), as llama.cpp decides K and V separately.
  int rotation_block = 0;
  bool norm_correction = false;     // TurboQuant "_nc": rescale so the dequantized norm is exact
  uint64_t seed = 0x6b76676174650001ull;  // rotation signs, QR matrix, QJL projection
  int outlier_channels = 0;         // TurboQuant fractional widths: channels given one more bit
  int token_group = 0;              // KIVI: tokens per key group (0 = format default)
  int residual_tokens = 128;        // KIVI: newest tokens kept in f16 (see Codec::residual_tokens)
  bool operator==(const FormatOptions&) const = default;
};

// The spec options (docs/kv-specs.md) an entry accepts, as FormatInfo::options bits. The spec
// parser (kv_config.cc) rejects any other; the codec may still reject a combination.
enum FormatOption : uint32_t {
  kOptionScale = 1u << 0,           // scale=F: per-tensor scale (fp8_*), global scale (nvfp4)
  kOptionRotation = 1u << 1,        // rot[=hadamard|wht|none]: a Walsh-Hadamard rotation before the blocks
  kOptionRotationKind = 1u << 2,    // rot=hadamard|qr: the format always rotates and picks how (TurboQuant)
  kOptionNormCorrection = 1u << 3,  // nc
  kOptionSeed = 1u << 4,            // seed=N: rotation signs, QR matrix, QJL projection
  kOptionOutliers = 1u << 5,        // outliers=N: channels with one more bit
  kOptionTokenGroup = 1u << 6,      // group=N: tokens per key group
  kOptionResidual = 1u << 7,        // residual=N: newest tokens kept in f16
};

class Codec;

// A per-format trait that other code dispatches on (a rotation an engine applies, the precision
// it keeps the query in) is a field here, so it stays next to everything else about the format.
struct FormatInfo {
  FormatId id;                   // what the SIMD and GPU kernels dispatch on; FormatId::external for run-time additions
  std::string_view name;         // canonical, e.g. "q4_0"
  std::string_view family;       // "float", "fp8", "per-token-head", "llama.cpp", "mxfp4", "nvfp4", "kivi", "turboquant", "uniform"
  std::string_view mirrors;      // which engine stores exactly this
  std::string_view description;
  bool for_keys;                 // may be used as a key format
  bool for_values;               // may be used as a value format
  int head_dim_multiple;         // head_dim must be a multiple of this (e.g. 32 for llama.cpp blocks)
  bool head_dim_power_of_two;    // rotation formats need a Walsh–Hadamard size
  uint32_t options;              // FormatOption bits of the spec options it accepts
  GpuStorage gpu;                // how the CUDA/HIP kernels keep it; none = CPU only
  // Instantiates the format; throws a usage error naming the problem if head_dim or the
  // options do not fit the format.
  std::unique_ptr<Codec> (*make)(const FormatInfo& info, int head_dim, const FormatOptions& options);
  // What the bare name means: llama.cpp's cache types rotate by default (Rotation::wht, since
  // llama.cpp PR #21038), so `q4_0` is what `-ctk q4_0` does today; `q4_0:rot=none` is not rotated.
  Rotation default_rotation = Rotation::none;
  // What each engine's attention does with this format (kernels/arithmetic.h).
  ArithmeticTraits arithmetic = {};

  bool accepts(FormatOption option) const { return (options & option) != 0; }
  // BackendMask bits: the CPU always; CUDA and HIP (one kernel source) where the GPU keeps it.
  uint32_t backends() const {
    return kBackendCpu | (gpu != GpuStorage::none ? kBackendCuda | kBackendHip : 0u);
  }
};


// A format bound to one head_dim and option set. Immutable after construction and safe to use
// from many threads. The *_ref functions are the plain scalar definition; the unsuffixed ones
// may use SIMD (chosen at run time) and must give bit-identical bytes for quantize/dequantize
// and agree with dot_ref/axpy_ref to float rounding.
class Codec {
 public:
  Codec(const FormatInfo& info, int head_dim, const FormatOptions& options)
      : info_(&info), head_dim_(head_dim), options_(options) {}
  virtual ~Codec() = default;

  const FormatInfo& info() const { return *info_; }
  int head_dim() const { return head_dim_; }
  const FormatOptions& options() const { return options_; }
  virtual int token_group() const { return 1; }
  // Formats with a full-precision residual window (KIVI) return its size R; 0 for the rest.
  // Semantics the attention helper implements: the cache holds the newest tokens in f16 and
  // quantizes only whole token groups that have left the window, so after n appended tokens
  // the quantized part is floor(max(0, n - R) / token_group()) * token_group() tokens and the
  // remaining (newest) tokens are f16. group_bytes()/bytes_per_token() describe the quantized
  // part only; the window's f16 bytes are a constant per sequence, not per token.
  virtual int residual_tokens() const { return 0; }
  virtual size_t group_bytes() const = 0;
  double bits_per_element() const {
    return 8.0 * static_cast<double>(group_bytes()) / (static_cast<double>(token_group()) * head_dim_);
  }
  double bytes_per_token() const { return static_cast<double>(group_bytes()) / token_group(); }

  // x: [token_group][head_dim] floats -> dst: group_bytes() bytes.
  virtual void quantize_ref(const float* x, uint8_t* dst) const = 0;
  // src: one group -> y: [token_group][head_dim] floats, in the original (unrotated) basis.
  virtual void dequantize_ref(const uint8_t* src, float* y) const = 0;

  // Rotation formats store keys in a rotated basis; attention rotates the query once
  // (q' = R q) and dots it with the stored codes, instead of un-rotating every key.
  virtual bool rotates() const { return false; }
  virtual void prepare_query(const float* q, float* q_prepared) const;  // identity by default
  // Undoes the value rotation on an attention output accumulated in the stored basis.
  virtual void finish_output(float* acc) const {}

  // q_prepared · dequantized key of token `t` (0 <= t < token_group) in group `src`.
  virtual float dot_ref(const float* q_prepared, const uint8_t* src, int t) const;
  // acc[0..head_dim) += w * value of token t, in the stored (possibly rotated) basis.
  virtual void axpy_ref(float w, const uint8_t* src, int t, float* acc) const;
  // Same as dequantize_ref but in the stored basis (what axpy accumulates); default = dequantize_ref.
  virtual void dequantize_stored_ref(const uint8_t* src, float* y) const { dequantize_ref(src, y); }

  // Batched paths used by the fused attention kernels. `groups` holds n_tokens / token_group
  // consecutive groups (n_tokens is a multiple of token_group). scores is [n_q][n_tokens];
  // q_prepared is [n_q][head_dim]; weights is [n_q][n_tokens]; acc is [n_q][head_dim].
  virtual void quantize(const float* x, uint8_t* dst) const { quantize_ref(x, dst); }
  virtual void dequantize(const uint8_t* src, float* y) const { dequantize_ref(src, y); }
  virtual void dot_rows(const float* q_prepared, int n_q, const uint8_t* groups, int n_tokens, float* scores) const;
  virtual void axpy_rows(const float* weights, int n_q, const uint8_t* groups, int n_tokens, float* acc) const;

 protected:
  const FormatInfo* info_;
  int head_dim_;
  FormatOptions options_;
};

// The registry: the built-in formats in a fixed order (family, then width), then the ones added
// with register_format in the order they were added.
std::span<const FormatInfo* const> all_formats();
const FormatInfo* find_format(std::string_view name);  // nullptr if unknown
const FormatInfo* find_format(FormatId id);            // nullptr for FormatId::external
// Adds a format after the built-in ones, e.g. a test's toy format or an experiment kept out of
// tree; it then appears wherever the registry is iterated. An internal error if its name is
// taken, its id is a built-in one, or it has no role. Register before other threads read the
// registry (FormatRegistration does it during static initialization).
void register_format(const FormatInfo& info);
struct FormatRegistration {
  explicit FormatRegistration(const FormatInfo& info) { register_format(info); }
};
// Validates head_dim against the format's constraints, then calls info.make.
std::unique_ptr<Codec> make_codec(const FormatInfo& info, int head_dim, const FormatOptions& options = {});
std::unique_ptr<Codec> make_codec(std::string_view name, int head_dim, const FormatOptions& options = {});
std::string format_names_joined(std::string_view sep = ", ");
// The formats `names` lists, in that order, or every registered one when it is empty (the
// benchmarks' format lists); an unknown name is a usage error whose message starts with `what`.
std::vector<const FormatInfo*> formats_named(std::span<const std::string> names, std::string_view what);

// One row of `kvgate kv list`: an entry and what it stores at the two usual head dims.
struct FormatListing {
  const FormatInfo* info;
  std::string roles;                          // "k,v", "k" or "v"
  std::optional<double> bits_per_element_64;  // empty where the format does not take the head_dim
  std::optional<double> bits_per_element_128;
  std::optional<double> bytes_per_token_128;  // per KV head
  int token_group = 1;                        // at head_dim 128
  int residual_tokens = 0;
};
std::vector<FormatListing> format_listing();

}  // namespace kvgate::kernels
