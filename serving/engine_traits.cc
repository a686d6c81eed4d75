#include "serving/engine_traits.h"

namespace kvgate::serving {

namespace {

// top_k 0 is vLLM's "disabled" (sampling_params.py:685); vLLM itself resets top_p/top_k/min_p
// at temperature 0 (sampling_params.py:619-623), the penalties it does not.
const EngineTraits kVllm{
    EngineKind::vllm,
    "vLLM",
    R"({"temperature": 0, "top_p": 1, "top_k": 0, "min_p": 0, "repetition_penalty": 1, "presence_penalty": 0,
        "frequency_penalty": 0})",
    "",
    // /metrics: vllm:cache_config_info (v1/metrics/loggers.py:1114-1135), a Prometheus gauge
    // whose labels are the CacheConfig fields, cache_dtype among them.
    {{"/version", ""}, {"/v1/models", ""}, {"/metrics", ""}},
    "/metrics vllm:cache_config_info{cache_dtype}",
    // vLLM resolves a checkpoint's KV quantization before it builds CacheConfig
    // (engine/arg_utils.py:2329-2332), so what it still calls auto is the model's dtype.
    "the model's dtype (vLLM does not report which)",
    "",
    // usage.prompt_tokens_details is filled only with this flag (completion/serving.py:576-579).
    "start vLLM with --enable-prompt-tokens-details",
};

// SGLang's top_k -1 is the whole vocabulary (sampling/sampling_params.py:249-250); temperature
// 0 becomes top_k 1. Its input logprobs are raw whatever the temperature.
const EngineTraits kSglang{
    EngineKind::sglang,
    "SGLang",
    R"({"temperature": 0, "top_p": 1, "top_k": -1, "min_p": 0, "repetition_penalty": 1, "presence_penalty": 0,
        "frequency_penalty": 0, "min_new_tokens": 0})",
    "sampling_params",
    // /get_server_info and /get_model_info are deprecated aliases that log a warning per call
    // (entrypoints/http_server.py:802-809, 853-860); /v1/models carries the resolved context
    // length (max_model_len, http_server.py:2005) that /server_info leaves null unless the
    // server was started with --context-length.
    {{"/server_info", "/get_server_info"}, {"/model_info", "/get_model_info"}, {"/v1/models", ""}},
    "/server_info kv_cache_dtype",
    "the model's dtype (its dtype field when not auto)",
    "SGLang also runs an FP8 checkpoint's fp8_e4m3 cache under auto without reporting it: start such a server with "
    "--kv-cache-dtype fp8_e4m3 so that kvgate can see it",
    "",
};

// llama-server: "samplers" replaces the chain the GGUF may order (general.sampling.sequence);
// with only the temperature sampler at 0 the choice is the argmax after the logit biases
// (common/sampling.cpp:329-403). mirostat != 0 would replace the chain altogether.
const EngineTraits kLlamaServer{
    EngineKind::llama_server,
    "llama-server",
    R"({"temperature": 0, "dynatemp_range": 0, "samplers": ["temperature"], "mirostat": 0, "repeat_penalty": 1,
        "presence_penalty": 0, "frequency_penalty": 0, "dry_multiplier": 0, "top_k": 0, "top_p": 1, "min_p": 0,
        "typical_p": 1, "xtc_probability": 0})",
    "",
    {{"/props", ""}, {"/v1/models", ""}},
    "",
    "",
    "",
    "",
};

// The plain OpenAI API rejects fields it does not know, so only its own.
const EngineTraits kOpenai{
    EngineKind::openai,
    "OpenAI-compatible server",
    R"({"temperature": 0, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0})",
    "",
    {{"/v1/models", ""}},
    "",
    "",
    "",
    "",
};

const EngineTraits kUnresolved{EngineKind::automatic, "engine", "{}", "", {}, "", "", "", ""};

}  // namespace

const EngineTraits& engine_traits(EngineKind kind) {
  switch (kind) {
    case EngineKind::vllm: return kVllm;
    case EngineKind::sglang: return kSglang;
    case EngineKind::llama_server: return kLlamaServer;
    case EngineKind::openai: return kOpenai;
    case EngineKind::automatic: return kUnresolved;
  }
  return kUnresolved;
}

}  // namespace kvgate::serving
