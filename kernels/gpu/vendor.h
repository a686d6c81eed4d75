#pragma once
// The one place that knows whether the kernel source is being compiled for CUDA or HIP: every
// kernel file uses the gpu* names below, so one source serves both vendors (as ggml does).
#if defined(__HIP_PLATFORM_AMD__) || defined(KVGATE_GPU_HIP)
#include <hip/hip_runtime.h>
#define KVGATE_GPU_VENDOR "hip"
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuDeviceProp_t = hipDeviceProp_t;
#define gpuSuccess hipSuccess
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMemcpy hipMemcpy
#define gpuMemset hipMemset
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuDeviceSynchronize hipDeviceSynchronize
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#else
#include <cuda_runtime.h>
#define KVGATE_GPU_VENDOR "cuda"
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuDeviceProp_t = cudaDeviceProp;
#define gpuSuccess cudaSuccess
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMemcpy cudaMemcpy
#define gpuMemset cudaMemset
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuDeviceSynchronize cudaDeviceSynchronize
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#endif
