#pragma once
// kernels::Arithmetic: what an inference engine rounds besides the cache. A KV config names the
// engine whose attention arithmetic kvgate reproduces (`@engine=NAME`, KvConfig::arithmetic); each
// format's registry entry says what that engine does with it (FormatInfo::arithmetic, the
// ArithmeticTraits below: which dot type llama.cpp converts the query to for keys of that type,
// and so on); resolve_arithmetic combines the two, per attention call, into the rounding steps
// kernels/attention_arithmetic.cc applies. Arithmetic::exact, the default, is kvgate's f32 attention
// (the fused fast path in kernels/attention.cc), which no engine rounds less than.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvgate::kernels {

struct FormatInfo;

enum class Arithmetic : uint8_t {
  exact,           // f32 query, f32 softmax and accumulation: the reference every engine is measured against
  llama_cpp,       // llama.cpp's CPU flash attention (ggml-cpu ops.cpp, b11434)
  llama_cpp_cuda,  // llama.cpp's CUDA flash attention on Ada/Hopper: vector kernel for decode, MMA f16 kernel otherwise
  vllm_fa3,        // vLLM's FlashAttention 3 backend with an FP8 cache (query quantized to FP8 as well)
};

// Every engine's name, as the spec writes it (`@engine=llama.cpp`).
std::string_view arithmetic_name(Arithmetic e);
std::optional<Arithmetic> find_arithmetic(std::string_view name);
std::string arithmetic_names_joined();

// How an engine rounds the query before it meets the keys.
enum class QueryRounding : uint8_t {
  unsupported,  // the engine has no such cache type (an ArithmeticTraits entry only)
  none,         // kept in f32
  f16,
  bf16,
  q8_0,         // ggml block_q8_0 as ggml-cpu's AVX2 quantize_row_q8_0 writes it
  q8_1,         // ggml block_q8_1 (AVX2 quantize_row_q8_1): the same codes as q8_0 plus a block sum
  q8_1_cuda,    // llama.cpp CUDA FA's quantize_q8_1_to_shared: f32 scale amax/127, roundf(x / d)
  fp8_e4m3,     // OCP E4M3FN of x / q_scale, saturated at 448 (vLLM QuantFP8, static per tensor)
};
std::string_view query_rounding_name(QueryRounding q);

// Per-format engine facts, kept in the format's registry entry (FormatInfo::arithmetic).
struct ArithmeticTraits {
  // ggml's vec_dot_type for a cache of this type (ggml-cpu.c type_traits_cpu): what the CPU flash
  // attention converts the query to. unsupported: llama.cpp has no cache type of this format.
  QueryRounding llama_cpp = QueryRounding::unsupported;
  // The CUDA vector kernel's query for keys of this type (q8_1 for every quantized type, f32 for
  // f16); unsupported: llama.cpp CUDA has no such cache type. cuda_vector: the type has a
  // vector-kernel instance (fattn.cu ggml_cuda_fattn_kv_type_supported); the others are
  // converted to f16 and always take the MMA kernel.
  QueryRounding llama_cpp_cuda = QueryRounding::unsupported;
  bool cuda_vector = false;
  // A ggml quantized type (ggml_is_quantized): llama.cpp rotates it and the CUDA kernel choice
  // depends on it.
  bool ggml_quantized = false;
  // vLLM FlashAttention 3: fp8_e4m3 for the FP8 cache it quantizes the query for; unsupported for
  // quantized formats FA3 cannot read; none for the 16-bit caches (no query quantization).
  QueryRounding vllm_fa3 = QueryRounding::unsupported;
};

// How P (the softmax weights) meet V.
enum class WeightRounding : uint8_t {
  none,          // f32
  f16,           // converted to half for the P·V product (CUDA MMA kernel)
  fp8_e4m3_256,  // FA3 FP8: exp2 offset by 8 (P in [0, 256]) and converted to E4M3 (hopper/softmax.h Max_offset)
};

// The arithmetic of one attention call: which roundings kernels/attention_arithmetic.cc applies.
// Default-constructed = exact (the fast path).
struct AttentionArithmetic {
  QueryRounding query = QueryRounding::none;
  float query_scale = 1.0f;       // fp8_e4m3 query: q_fp8 = e4m3(q / query_scale) (vLLM's q_scale, = k_scale)
  bool query_prescaled = false;   // softmax scale applied to q before rounding (CUDA, FA3's descale aside); else to the score
  bool key_to_f16 = false;        // dequantized keys rounded to f16 before the dot (CUDA MMA converts quantized K)
  bool value_to_f16 = false;      // dequantized values rounded to f16 (CUDA MMA converts quantized V)
  WeightRounding weights = WeightRounding::none;
  bool f16_accumulator = false;   // ggml-cpu one-row kernel with an f16 V: VKQ kept in f16, rounded every step
  bool per_key_softmax = false;   // ggml-cpu one-row kernel: max and sum updated key by key
  bool exact() const {
    return query == QueryRounding::none && !query_prescaled && !key_to_f16 && !value_to_f16 &&
           weights == WeightRounding::none && !f16_accumulator && !per_key_softmax;
  }
  std::string describe() const;  // one line for `kvgate kv show`
};

// The arithmetic `arithmetic` applies to one attention call with these key and value formats and
// n_queries query positions (its kernel choice can depend on them). head_dim: the cache's.
// `key_scale`: the key format's per-tensor scale option (vLLM's q_scale defaults to k_scale).
AttentionArithmetic resolve_arithmetic(Arithmetic arithmetic, const FormatInfo& key, const FormatInfo& value, int64_t n_queries,
                                       int head_dim, float key_scale = 1.0f);

// What the engine rounds outside attention, in words (`kvgate kv show`); empty for none. Under
// llama.cpp the model's forward pass rounds every matmul input to the weights' dot type; under
// llama.cpp-cuda and vllm-fa3 the inputs of F16/BF16 weights to f16/bf16
// (runtime/weights.h round_input_like_engine).
std::string_view arithmetic_matmul_inputs(Arithmetic arithmetic);

// Empty when the engine can run this key/value pair; else why not (for a usage error).
std::string arithmetic_refusal(Arithmetic arithmetic, const FormatInfo& key, const FormatInfo& value);

}  // namespace kvgate::kernels
