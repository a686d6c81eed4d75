#pragma once
// How an endpoint's config is named in the results and which in-process config emulates it: the
// plan names and pairs configs this way when a run begins (eval/), and the engine view pairs the
// stored configs the same way when a run is read back (report/).
#include <string>
#include <string_view>

#include "kernels/kv_config.h"
#include "results/stored_run.h"

namespace kvgate::harness {

// The results name of a config served by an endpoint: "endpoint:NAME=CANONICAL", never equal
// to an in-process spec, so a cross-check run holds both and gates pair engine with engine.
using results::kEndpointSpecPrefix;
std::string endpoint_spec(const std::string& endpoint_name, const kernels::KvConfig& kv);

// Whether in-process config `emulation` emulates what an engine running `engine` stores: the
// same key and value formats, whatever the options (a rotation, the engine's arithmetic) the
// emulation adds to match the engine. The cross-check pairs such configs.
bool emulates(const kernels::KvConfig& emulation, const kernels::KvConfig& engine);

}  // namespace kvgate::harness
