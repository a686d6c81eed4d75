#include "harness/endpoint_kv.h"

namespace kvgate::harness {

std::string endpoint_spec(const std::string& endpoint_name, const kernels::KvConfig& kv) {
  return std::string(kEndpointSpecPrefix) + endpoint_name + "=" + kv.canonical();
}

bool emulates(const kernels::KvConfig& emulation, const kernels::KvConfig& engine) {
  return emulation.key.format == engine.key.format && emulation.value.format == engine.value.format;
}

}  // namespace kvgate::harness
