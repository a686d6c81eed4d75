#pragma once
// Host side: calls fn(std::integral_constant<WeightType, T>{}) for the run-time type t, so each
// weight kernel is instantiated per stored type and the element decode's switch folds away.
// gpu_ops.cu's GEMV/GEMM and gpu_blas.cu's f16 tile decode dispatch through this one switch.
#include <string>
#include <type_traits>

#include "core/error.h"
#include "kernels/gpu/weight_blocks.h"

namespace kvgate::kernels::gpu {

template <typename Fn>
void with_weight_type(WeightType t, Fn&& fn) {
  switch (t) {
    case WeightType::f32: return fn(std::integral_constant<WeightType, WeightType::f32>{});
    case WeightType::f16: return fn(std::integral_constant<WeightType, WeightType::f16>{});
    case WeightType::bf16: return fn(std::integral_constant<WeightType, WeightType::bf16>{});
    case WeightType::q4_0: return fn(std::integral_constant<WeightType, WeightType::q4_0>{});
    case WeightType::q4_1: return fn(std::integral_constant<WeightType, WeightType::q4_1>{});
    case WeightType::q5_0: return fn(std::integral_constant<WeightType, WeightType::q5_0>{});
    case WeightType::q5_1: return fn(std::integral_constant<WeightType, WeightType::q5_1>{});
    case WeightType::q8_0: return fn(std::integral_constant<WeightType, WeightType::q8_0>{});
    case WeightType::q4_k: return fn(std::integral_constant<WeightType, WeightType::q4_k>{});
    case WeightType::q6_k: return fn(std::integral_constant<WeightType, WeightType::q6_k>{});
  }
  throw_usage_error("GPU weight of an unknown type " + std::to_string(static_cast<int>(t)));
}

}  // namespace kvgate::kernels::gpu
