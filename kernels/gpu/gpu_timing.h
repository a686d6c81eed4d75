#pragma once
// Device time of a launch, for the benchmarks and the bounds they report: GPU sources only
// (includes the vendor runtime).
#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/gpu/vendor.h"

namespace kvgate::kernels::gpu {

// Mean milliseconds per call of `launch` over `iterations`, timed with device events on the
// default stream after one warm-up call.
template <class Fn>
inline double time_ms(int iterations, Fn&& launch) {
  const auto ok = [](gpuError_t err, const char* what) {
    if (err != gpuSuccess)
      throw_environment_error(std::string("GPU ") + KVGATE_GPU_VENDOR + " " + what + ": " + gpuGetErrorString(err));
  };
  launch();
  ok(gpuDeviceSynchronize(), "warm-up");
  gpuEvent_t start, stop;
  ok(gpuEventCreate(&start), "event");
  ok(gpuEventCreate(&stop), "event");
  ok(gpuEventRecord(start, 0), "event record");
  for (int i = 0; i < iterations; ++i) launch();
  ok(gpuEventRecord(stop, 0), "event record");
  ok(gpuEventSynchronize(stop), "event sync");
  float ms = 0.0f;
  ok(gpuEventElapsedTime(&ms, start, stop), "event time");
  (void)gpuEventDestroy(start);
  (void)gpuEventDestroy(stop);
  return static_cast<double>(ms) / std::max(iterations, 1);
}

}  // namespace kvgate::kernels::gpu
