// One kernel source for CUDA (nvcc) and HIP (clang -xhip); see vendor.h.
#include "kernels/gpu/gpu_convert.h"

#include <string>

#include "core/error.h"
#include "core/float_convert.h"
#include "kernels/gpu/vendor.h"

namespace kvgate::kernels::gpu {
namespace {

void check(gpuError_t err, const char* what) {
  if (err != gpuSuccess)
    throw_environment_error(std::string("GPU ") + KVGATE_GPU_VENDOR + " " + what + ": " + gpuGetErrorString(err));
}

__device__ __forceinline__ uint16_t encode16(ElementFormat f, float x) {
  return f == ElementFormat::f16 ? f32_to_f16(x) : f32_to_bf16(x);
}
__device__ __forceinline__ float decode16(ElementFormat f, uint16_t h) {
  return f == ElementFormat::f16 ? f16_to_f32(h) : bf16_to_f32(h);
}
__device__ __forceinline__ Fp8Kind fp8_kind(ElementFormat f) {
  return f == ElementFormat::fp8_e4m3 ? Fp8Kind::e4m3fn
         : f == ElementFormat::fp8_e5m2 ? Fp8Kind::e5m2
                                        : Fp8Kind::e4m3fnuz;
}

__global__ void quantize_kernel(ElementFormat f, float scale, const float* x, size_t n, uint8_t* out) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (f == ElementFormat::f16 || f == ElementFormat::bf16) {
      reinterpret_cast<uint16_t*>(out)[i] = encode16(f, x[i]);
    } else {
      out[i] = f32_to_fp8(x[i] / scale, fp8_kind(f));  // a division, as the CPU reference does
    }
  }
}

__global__ void dequantize_kernel(ElementFormat f, float scale, const uint8_t* in, size_t n, float* y) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (f == ElementFormat::f16 || f == ElementFormat::bf16) {
      y[i] = decode16(f, reinterpret_cast<const uint16_t*>(in)[i]);
    } else {
      y[i] = fp8_to_f32(in[i], fp8_kind(f)) * scale;
    }
  }
}

// RAII device buffer so an exception on the way out never leaks device memory.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { check(gpuMalloc(&ptr, bytes ? bytes : 1), "malloc"); }
  ~DeviceBuffer() { (void)gpuFree(ptr); }  // nothing useful to do with a failure here
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

unsigned grid_for(size_t n) {
  size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 ? (blocks ? blocks : 1) : 65535);
}

}  // namespace

int device_count() {
  int n = 0;
  if (gpuGetDeviceCount(&n) != gpuSuccess) {
    (void)gpuGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string device_name() {
  if (device_count() == 0) return {};
  gpuDeviceProp_t prop{};
  if (gpuGetDeviceProperties(&prop, 0) != gpuSuccess) return {};
  return prop.name;
}

const char* vendor() { return KVGATE_GPU_VENDOR; }

size_t element_bytes(ElementFormat format) {
  return format == ElementFormat::f16 || format == ElementFormat::bf16 ? 2 : 1;
}

void quantize_elements(ElementFormat format, float scale, const float* x, size_t n, uint8_t* out) {
  DeviceBuffer dx(n * sizeof(float)), dout(n * element_bytes(format));
  check(gpuMemcpy(dx.ptr, x, n * sizeof(float), gpuMemcpyHostToDevice), "upload");
  quantize_kernel<<<grid_for(n), 256>>>(format, scale, static_cast<const float*>(dx.ptr), n,
                                        static_cast<uint8_t*>(dout.ptr));
  check(gpuGetLastError(), "quantize launch");
  check(gpuMemcpy(out, dout.ptr, n * element_bytes(format), gpuMemcpyDeviceToHost), "download");
}

void dequantize_elements(ElementFormat format, float scale, const uint8_t* in, size_t n, float* y) {
  DeviceBuffer din(n * element_bytes(format)), dy(n * sizeof(float));
  check(gpuMemcpy(din.ptr, in, n * element_bytes(format), gpuMemcpyHostToDevice), "upload");
  dequantize_kernel<<<grid_for(n), 256>>>(format, scale, static_cast<const uint8_t*>(din.ptr), n,
                                          static_cast<float*>(dy.ptr));
  check(gpuGetLastError(), "dequantize launch");
  check(gpuMemcpy(y, dy.ptr, n * sizeof(float), gpuMemcpyDeviceToHost), "download");
}

}  // namespace kvgate::kernels::gpu
