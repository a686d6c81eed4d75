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
