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
