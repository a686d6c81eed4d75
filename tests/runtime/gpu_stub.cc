// The recording stub of kernels/gpu's host API (gpu_stub.h). Each function records itself and
// whether the real one waits for the device; nothing runs, and device pointers are fake
// addresses that nothing here or in runtime/gpu_model.cc dereferences.
#include "tests/runtime/gpu_stub.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "kernels/gpu/gpu_convert.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/gpu_ops.h"
#include "kernels/gpu/weight_planes.h"

namespace kvgate::gpu_stub {
namespace {
int g_raise = 0;
bool g_raised = false;
uintptr_t g_next_address = 0x100000000ull;

void* fake_device_memory(size_t bytes) {
  void* p = reinterpret_cast<void*>(g_next_address);
  g_next_address += (bytes + 255) / 256 * 256 + 256;
  return p;
}
void record(std::string what, bool waits, std::string detail = {}) {
  calls().push_back({std::move(what), waits, std::move(detail)});
}
}  // namespace

std::vector<Call>& calls() {
  static std::vector<Call> c;
  return c;
}
void raise_matmul_flag(int times) { g_raise = times; }

}  // namespace kvgate::gpu_stub

namespace kvgate::kernels::gpu {

using gpu_stub::record;

int device_count() { return 1; }
std::string device_name() { return "recording stub"; }
const char* vendor() { return "cuda"; }

// ---- gpu_ops.h ----
DeviceMemory::DeviceMemory(size_t bytes) { reserve(bytes); }
DeviceMemory::~DeviceMemory() = default;
DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  ptr_ = std::exchange(other.ptr_, nullptr);
  bytes_ = std::exchange(other.bytes_, 0);
  return *this;
}
void DeviceMemory::reserve(size_t bytes) {
  if (ptr_ && bytes <= bytes_) return;
  record("alloc (stream-ordered)", false);
  ptr_ = gpu_stub::fake_device_memory(bytes);
  bytes_ = bytes;
}
void DeviceMemory::upload(const void*, size_t, size_t) { record("upload", true); }
void DeviceMemory::download(void* host, size_t bytes, size_t) const {
  std::memset(host, 0, bytes);
  record("download", true);
}
void DeviceMemory::upload_async(const PinnedHost& host, size_t bytes) {
  if (bytes > host.size()) std::abort();  // the forward must stage what it uploads
  record("upload_async", false);
}

PinnedHost::~PinnedHost() { std::free(ptr_); }
void PinnedHost::reserve(size_t bytes) {
  if (ptr_ && bytes <= bytes_) return;
  record("pinned alloc", ptr_ != nullptr);  // regrowing frees pinned memory, which waits
  std::free(ptr_);
  ptr_ = std::malloc(bytes ? bytes : 1);
  bytes_ = bytes;
}

void device_synchronize() { record("device_synchronize", true); }
uint64_t host_waits() { return 0; }

UploadedWeight upload_weight(WeightType type, const uint8_t*, int rows, int cols, size_t) {
  UploadedWeight out;
  out.memory = DeviceMemory(quant_row_bytes(type, cols) * static_cast<size_t>(rows));
  out.view.data = out.memory.bytes();
  out.view.type = type;
  out.view.rows = rows;
  out.view.cols = cols;
  record("upload", true, "weight");
  return out;
}

void gather_rows(const DeviceWeight&, const int32_t*, int, float*) { record("launch:gather", false); }
void rms_norm_rows(const float*, int, int, const float*, float, float*) { record("launch:rms_norm", false); }
void gemm_xwt(const float*, int n, const DeviceWeight& w, float*, bool) {
  record("launch:matmul", false, "f32 " + std::to_string(n) + "x" + std::to_string(w.rows));
}
bool gemv_planes(const float*, int, int, const DeviceWeight* const*, float* const*, bool) { return true; }
bool have_tensor_core_gemm() { return true; }
void matmul(MatmulPath path, const float*, int n, const DeviceWeight& w, float*, bool accumulate) {
  const char* name = path == MatmulPath::exact ? "exact" : path == MatmulPath::sixteen_bit ? "sixteen_bit" : "f32";
  record("launch:matmul", false,
         std::string(name) + " " + std::to_string(n) + "x" + std::to_string(w.rows) + (accumulate ? " +=" : ""));
}
void matmul_many(MatmulPath path, const float*, int n, int count, const DeviceWeight* const* w, float* const*) {
  // As the real one: one launch for decode-sized batches, else one matmul each.
  const char* name = path == MatmulPath::exact ? "exact" : path == MatmulPath::sixteen_bit ? "sixteen_bit" : "f32";
  const int launches = n <= kGemvMaxTokens ? 1 : count;
  for (int i = 0; i < launches; ++i)
    record("launch:matmul", false,
           std::string(name) + " " + std::to_string(n) + "x" + std::to_string(w[i]->rows) +
               (launches == 1 && count > 1 ? " (" + std::to_string(count) + " weights)" : ""));
}
void round_matmul_input(ggml::DotInput t, const DeviceWeight&, float*, int) {
  if (t != ggml::DotInput::f32) record("launch:round_input", false);
}
void rope_pairs(float*, int, float*, int, int, int, int, int64_t, const float*) { record("launch:rope", false); }
void silu_mul(float*, const float*, size_t) { record("launch:silu_mul", false); }
void add_into(float*, const float*, size_t) { record("launch:add", false); }
void matmul_flag_reset() { record("memset_async:flag", false); }
void matmul_flag_fetch() {
  gpu_stub::g_raised = gpu_stub::g_raise > 0;
  if (gpu_stub::g_raise > 0) --gpu_stub::g_raise;
  record("copy_async:flag", false);
}
bool matmul_flag_raised() { return gpu_stub::g_raised; }
int* matmul_flag_device() { return nullptr; }

// ---- gpu_kv.h ----
struct DevicePagedKv::Impl {
  PagedKvShape shape;
  int capacity = 0;
  int length = 0;
};
DevicePagedKv::DevicePagedKv(const PagedKvShape& shape, int capacity_tokens, std::vector<int32_t>)
    : impl_(new Impl{shape, capacity_tokens, 0}) {
  record("kv cache alloc", false);
}
DevicePagedKv::~DevicePagedKv() = default;
const PagedKvShape& DevicePagedKv::shape() const { return impl_->shape; }
int DevicePagedKv::length() const { return impl_->length; }
int DevicePagedKv::capacity() const { return impl_->capacity; }
void DevicePagedKv::append_device(const float*, const float*, int n_new) {
  impl_->length += n_new;
  record("launch:kv_append", false);
}
void DevicePagedKv::attention_device(int, const float*, int, float, float*, int) { record("launch:attention", false); }
void DevicePagedKv::truncate(int n) {
  impl_->length = n;
  record("truncate", false);
}
void DevicePagedKv::copy_prefix_from(const DevicePagedKv& source, int n) {
  (void)source;
  impl_->length = n;
  record("copy pages", false);
}

}  // namespace kvgate::kernels::gpu
