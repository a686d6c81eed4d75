#pragma once
// Lets the scalar conversions be shared verbatim by the CPU reference and the CUDA/HIP kernels,
// so quantization is bit-identical across backends by construction.
#if defined(__HIPCC__)
#include <hip/hip_runtime.h>  // defines __host__/__device__ for clang's HIP mode
#endif
#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVGATE_HD __host__ __device__ __forceinline__
#else
#define KVGATE_HD inline
#endif

// Unrolls a loop with a compile-time trip count on the device, so an array the loop indexes
// stays in registers (the decode spans the attention kernels fill: rolled, they went through
// local memory, as ptxas's stack frame showed); nothing on the host.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVGATE_UNROLL _Pragma("unroll")
#else
#define KVGATE_UNROLL
#endif

// One float operation, correctly rounded and never contracted into an FMA with its neighbour:
// the device's __f*_rn intrinsics; on the host the plain operators, which kvgate's quantizers
// compile with -ffp-contract=off (kernels/CMakeLists.txt). Code that must give the same bits on
// the CPU and the GPU (ggml blocks, the GPU row functions) writes its arithmetic with these.
namespace kvgate {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
KVGATE_HD float rn_mul(float a, float b) { return __fmul_rn(a, b); }
KVGATE_HD float rn_add(float a, float b) { return __fadd_rn(a, b); }
KVGATE_HD float rn_sub(float a, float b) { return __fsub_rn(a, b); }
KVGATE_HD float rn_div(float a, float b) { return __fdiv_rn(a, b); }
#else
KVGATE_HD float rn_mul(float a, float b) { return a * b; }
KVGATE_HD float rn_add(float a, float b) { return a + b; }
KVGATE_HD float rn_sub(float a, float b) { return a - b; }
KVGATE_HD float rn_div(float a, float b) { return a / b; }
#endif
}  // namespace kvgate
