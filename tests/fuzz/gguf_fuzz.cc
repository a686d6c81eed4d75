// libFuzzer entry for the GGUF reader: any input must either parse or raise kvgate::Error.
// Anything else — a sanitizer report, another exception type, a crash — is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "runtime/gguf.h"

namespace {

using kvgate::runtime::GgufArray;
using kvgate::runtime::GgufValue;

// Reads every element the reader promised is in bounds, so ASan sees any lie.
uint64_t touch_array(const GgufArray& a) {
  uint64_t sum = a.count;
  for (uint64_t i = 0; i < a.count; ++i) {
    if (auto u = GgufValue::array_uint(a, i)) sum += *u;
    if (auto f = GgufValue::array_float(a, i)) sum += static_cast<uint64_t>(*f != 0);
  }
  for (std::string_view s : a.strings) sum += s.empty() ? 0 : static_cast<uint8_t>(s.back());
  for (const GgufValue& nested : a.arrays)
    if (const GgufArray* inner = nested.as_array()) sum += touch_array(*inner);
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volatile uint64_t sink = 0;
  try {
    const auto file = kvgate::runtime::GgufFile::parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
    for (const auto& [key, value] : file.metadata()) {
      sink = sink + key.size();
      if (auto s = value.as_string()) sink = sink + s->size();
      if (const GgufArray* a = value.as_array()) sink = sink + touch_array(*a);
    }
    for (const auto& t : file.tensors()) {
      if (t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
    }
    const auto arch = kvgate::runtime::read_model_arch(file);
    sink = sink + arch.kv_bytes_per_token(2.0);
  } catch (const kvgate::Error&) {
  }
  return 0;
}
