#pragma once
// Host API of the GPU element conversion kernels (f16, bf16, FP8 with per-tensor scale).
// They run the same scalar code as the CPU reference (core/float_convert.h), so their bytes
// must equal the CPU's bit for bit; tests/gpu checks that on a device.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvgate::kernels::gpu {

enum class ElementFormat : uint8_t { f16, bf16, fp8_e4m3, fp8_e5m2, fp8_e4m3fnuz };

// Number of usable devices (0 when the driver or a device is missing; never throws).
int device_count();
// Name of device 0 (empty if none).
std::string device_name();
const char* vendor();  // "cuda" or "hip"

size_t element_bytes(ElementFormat format);

// Host buffers in, host buffers out: uploads, runs the kernel, downloads. Throws
// kvgate::Error (environment) on a driver failure. stored = encode(x / scale) for FP8.
void quantize_elements(ElementFormat format, float scale, const float* x, size_t n, uint8_t* out);
void dequantize_elements(ElementFormat format, float scale, const uint8_t* in, size_t n, float* y);

}  // namespace kvgate::kernels::gpu
