#pragma once
// The model shape the capacity simulator needs, from a preset name or a GGUF file: shared by
// `kvgate capacity` and the prediction a load replay stores beside its measurements.
#include <string>

#include "workloads/presets.h"

namespace kvgate::harness {

// Whether --model-arch names a file rather than a preset (a .gguf suffix, a '/', or an existing path).
bool looks_like_model_file(const std::string& s);
// A GGUF file's shape and what its tensors really occupy: weights stay in their stored types.
workloads::ModelShape model_from_gguf(const std::string& path);

}  // namespace kvgate::harness
