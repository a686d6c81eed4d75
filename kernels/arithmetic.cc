// Arithmetic presets: which kernel an engine runs for a key/value pair and a batch of
// queries, and what that kernel rounds. Every rule cites the engine source it mirrors.
#include "kernels/arithmetic.h"

#include <string>

#include "kernels/kv_format.h"

namespace kvgate::kernels {
namespace {

struct EngineName {
  Arithmetic arithmetic;
  std::string_view name;
};
constexpr EngineName kEngineNames[] = {
    {Arithmetic::exact, "exact"},
    {Arithmetic::llama_cpp, "llama.cpp"},
    {Arithmetic::llama_cpp_cuda, "llama.cpp-cuda"},
    {Arithmetic::vllm_fa3, "vllm-fa3"},
};

// llama.cpp's -ctk/-ctv types (common/arg.cpp kv_cache_types), for refusals.
constexpr std::string_view kLlamaCppCacheTypes = "f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1";

bool is_16_bit(const FormatInfo& f) { return f.id == FormatId::f16 || f.id == FormatId::bf16; }

}  // namespace

std::string_view arithmetic_name(Arithmetic e) {
  for (const EngineName& n : kEngineNames)
    if (n.arithmetic == e) return n.name;
  return "exact";
}

std::optional<Arithmetic> find_arithmetic(std::string_view name) {
  for (const EngineName& n : kEngineNames)
    if (n.name == name) return n.arithmetic;
  return std::nullopt;
}

std::string arithmetic_names_joined() {
  std::string out;
  for (const EngineName& n : kEngineNames) out.append(out.empty() ? "" : ", ").append(n.name);
  return out;
}

std::string_view query_rounding_name(QueryRounding q) {
  switch (q) {
    case QueryRounding::unsupported: return "unsupported";
    case QueryRounding::none: return "f32";
    case QueryRounding::f16: return "f16";
    case QueryRounding::bf16: return "bf16";
    case QueryRounding::q8_0: return "q8_0";
    case QueryRounding::q8_1: return "q8_1";
    case QueryRounding::q8_1_cuda: return "q8_1 (CUDA: f32 block scale)";
    case QueryRounding::fp8_e4m3: return "fp8_e4m3";
  }
  return "f32";
}

std::string_view arithmetic_matmul_inputs(Arithmetic arithmetic) {
  if (arithmetic == Arithmetic::llama_cpp)
    return "each matmul input rounded to the weights' dot type, as ggml-cpu converts it "
           "(q8_1 for Q4_1/Q5_1 weights, q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL, q8_K for k-quants, f16 for F16)";
  if (arithmetic == Arithmetic::llama_cpp_cuda || arithmetic == Arithmetic::vllm_fa3)
    return "each matmul input next to F16 or BF16 weights rounded to f16 or bf16, as the engine's 16-bit GEMMs "
           "take it (inputs of quantized weights stay f32)";
  return {};
}

std::string AttentionArithmetic::describe() const {
  if (exact()) return "f32 query, f32 softmax and accumulation (exact)";
  std::string out = "query " + std::string(query_rounding_name(query));
  if (query == QueryRounding::fp8_e4m3 && query_scale != 1.0f) out += " of q / " + std::to_string(query_scale);
  out += query_prescaled ? " after the softmax scale" : ", softmax scale on the score";
  if (key_to_f16) out += "; keys as f16";
  out += per_key_softmax ? "; online softmax key by key" : "";
  if (weights == WeightRounding::f16) out += "; P as f16";
  if (weights == WeightRounding::fp8_e4m3_256) out += "; P as fp8_e4m3 (exp offset by 8, P in [0, 256])";
  if (value_to_f16) out += "; values as f16";
  out += f16_accumulator ? "; V accumulated in f16, rounded every step" : "; f32 accumulation";
  return out;
}

AttentionArithmetic resolve_arithmetic(Arithmetic arithmetic, const FormatInfo& key, const FormatInfo& value, int64_t n_queries,
                                       int head_dim, float key_scale) {
  AttentionArithmetic a;
  switch (arithmetic) {
    case Arithmetic::exact:
      return a;
    case Arithmetic::llama_cpp: {
      // ggml-cpu ops.cpp:9546-9567: K and V both f16 (or both f32) with >= 64 query rows
      // (GGML_FA_TILE_Q) take the tiled kernel, which keeps Q in f32 and accumulates in f32.
      const bool same_float = key.id == value.id && (key.id == FormatId::f16 || key.id == FormatId::f32);
      if (same_float && n_queries >= 64) return a;
      // Everything else runs the one-row kernel (ops.cpp:8842-9078): Q converted to K's
      // vec_dot_type unscaled (:8960), s = dot * scale (:8966), max and sum per key; an f16 V
      // accumulates in f16 (ggml_vec_mad_f16, rounded to f16 each step), any other V in f32.
      a.query = key.arithmetic.llama_cpp;
      a.per_key_softmax = true;
      a.f16_accumulator = value.id == FormatId::f16;
      return a;
    }
    case Arithmetic::llama_cpp_cuda: {
      // fattn.cu ggml_cuda_get_best_fattn_kernel on Ada/Hopper: the vector kernel for head_dim a
      // multiple of 64 up to 256, K and V with vector instances, <= 2 query rows when either is
      // quantized, 1 row otherwise; else the MMA f16 kernel.
      const bool quantized = key.arithmetic.ggml_quantized || value.arithmetic.ggml_quantized;
      const bool vector = head_dim % 64 == 0 && head_dim <= 256 && key.arithmetic.cuda_vector && value.arithmetic.cuda_vector &&
                          (quantized ? n_queries <= 2 : n_queries == 1);
      a.query_prescaled = true;
      if (vector) {
        // fattn-vec.cuh:97-201: Q times the softmax scale, then q8_1 for a quantized K (f32
        // otherwise); V dequantized to f32 and f32 accumulators on NVIDIA (no V_DOT2_F32_F16).
        a.query = key.arithmetic.llama_cpp_cuda;
        return a;
      }
      // fattn-mma-f16.cuh: Q scaled and converted to half; quantized K and V converted to f16
      // first (need_f16_K/V, fattn-common.cuh:1031-1090); P converted to half for P·V; f32
      // accumulators.
      a.query = QueryRounding::f16;
      a.key_to_f16 = key.id != FormatId::f16;
      a.value_to_f16 = value.id != FormatId::f16;
      a.weights = WeightRounding::f16;
      return a;
    }
    case Arithmetic::vllm_fa3: {
      // vLLM quantizes the query for FP8 caches only (attention/layer.py query_quant); FA3's
      // FP8 kernel then runs P in E4M3 with the exp2 offset of 8 (hopper/softmax.h Max_offset).
      if (key.arithmetic.vllm_fa3 != QueryRounding::fp8_e4m3) return a;
      a.query = QueryRounding::fp8_e4m3;
      a.query_scale = key_scale;
      a.weights = WeightRounding::fp8_e4m3_256;
      return a;
    }
  }
  return a;
}

std::string arithmetic_refusal(Arithmetic arithmetic, const FormatInfo& key, const FormatInfo& value) {
  switch (arithmetic) {
    case Arithmetic::exact:
      return {};
    case Arithmetic::llama_cpp:
    case Arithmetic::llama_cpp_cuda:
      for (const FormatInfo* f : {&key, &value}) {
        const QueryRounding q = arithmetic == Arithmetic::llama_cpp ? f->arithmetic.llama_cpp : f->arithmetic.llama_cpp_cuda;
        if (q == QueryRounding::unsupported)
          return std::string(arithmetic_name(arithmetic)) + " has no cache type " + std::string(f->name) +
                 " (its -ctk/-ctv types: " + std::string(kLlamaCppCacheTypes) + ")";
      }
      return {};
    case Arithmetic::vllm_fa3:
      for (const FormatInfo* f : {&key, &value})
        if (f->arithmetic.vllm_fa3 == QueryRounding::unsupported)
          return "vLLM's FlashAttention 3 backend reads fp8_e4m3 (--kv-cache-dtype fp8) and 16-bit caches only, not " +
                 std::string(f->name);
      if ((key.arithmetic.vllm_fa3 == QueryRounding::fp8_e4m3) != (value.arithmetic.vllm_fa3 == QueryRounding::fp8_e4m3) ||
          (is_16_bit(key) && is_16_bit(value) && key.id != value.id))
        return "vLLM stores keys and values in one --kv-cache-dtype; " + std::string(key.name) + "/" +
               std::string(value.name) + " is not a vLLM cache";
      return {};
  }
  return {};
}

}  // namespace kvgate::kernels
