#pragma once
// A recording stub of kernels/gpu's host API (gpu_stub.cc), linked in place of the GPU library
// so runtime/gpu_model.cc runs without a device or a GPU toolchain. Each call is recorded with
// whether the real library's call waits for the device there (the contract gpu_ops.h states:
// blocking upload/download, device_synchronize, regrowing pinned memory); device pointers are
// fake and never dereferenced, host buffers are real.
#include <string>
#include <vector>

namespace kvgate::gpu_stub {

struct Call {
  std::string what;    // "launch:matmul", "launch:rms_norm", "download", ...
  bool waits = false;  // the real call waits for the device
  std::string detail;  // e.g. the matmul path and row count
};

std::vector<Call>& calls();
// The next `times` matmul_flag_fetch calls bring back a raised flag (the exact path found a
// value it cannot split).
void raise_matmul_flag(int times);

}  // namespace kvgate::gpu_stub
