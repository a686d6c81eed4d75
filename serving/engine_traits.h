#pragma once
// What differs between the engine kinds that is data rather than dialect: the sampling fields
// every greedy request pins, where discovery asks (and the older spelling an older server
// answers to), where the engine reports its KV cache dtype and what its "auto" means, and what
// a user starts the engine with so kvgate can see prefix-cache hits. One entry per kind, read
// by the adapters and the harness; docs/engine-mode.md's table "Starting each engine" says the
// same for people.
//
// Checked against the released sources of vLLM 0.34.0, SGLang 0.5.23 and llama.cpp b11434
// (file:line in each field's comment).
#include <string_view>
#include <vector>

#include "serving/endpoint.h"

namespace kvgate::serving {

struct DiscoveryPath {
  std::string_view path;
  // Asked when `path` answers 404: the name an older release serves ("" = none).
  std::string_view fallback;
};

struct EngineTraits {
  EngineKind kind;
  std::string_view display;  // "vLLM", for messages
  // A JSON object of sampling fields, each set to the value that changes nothing, sent on every
  // request that samples a token. Fields a request leaves out are filled from the model file
  // or the server's defaults: vLLM takes repetition/presence/frequency penalty, top_k/top_p/
  // min_p from generation_config.json (--generation-config auto; config/model.py:1884-1921,
  // completion/protocol.py:313-375); llama-server takes top_k, top_p, min_p, XTC, the penalties,
  // mirostat and the sampler order from the GGUF's general.sampling.* (common/common.cpp:
  // 1127-1145); SGLang's /generate merges --preferred-sampling-params under the request's
  // (managers/tokenizer_manager.py:1549-1550). Any of them would move a greedy answer for
  // reasons that have nothing to do with the KV cache.
  std::string_view neutral_sampling;
  // Where those fields go: "" = the request's top level, else the name of the nested object.
  std::string_view sampling_object;
  std::vector<DiscoveryPath> discovery;
  // Where the engine reports its KV cache dtype, for messages ("" = it does not).
  std::string_view kv_dtype_where;
  // What the engine's kv cache dtype "auto" stores, for messages and the results.
  std::string_view auto_means;
  // What else "auto" may hide, said where a stated config contradicts it ("" = nothing): SGLang
  // gives an FP8 checkpoint (kv_cache_quant_algo FP8) an fp8_e4m3 cache in the model runner
  // (mem_cache/kv_cache_dtype.py:49-57) while /server_info keeps the launch value, so kvgate
  // cannot tell it from the model's dtype and holds "auto" to the latter.
  std::string_view auto_caveat;
  // How to make the engine report prefix-cache hits per request ("" = it always does).
  std::string_view cached_tokens_hint;
};

const EngineTraits& engine_traits(EngineKind kind);

}  // namespace kvgate::serving
