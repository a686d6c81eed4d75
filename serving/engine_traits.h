#pragma once
// The engine table: one EngineTraits per serving engine kvgate talks to. An entry carries
// everything about its engine: its names, what it can do (score a given span, stream every
// token's id, report its context and KV dtype), how auto-detection recognizes it, where
// discovery asks, the sampling fields every greedy request pins, and its dialect (the request
// builders and answer readers, in serving/engine_<name>.cc next to the entry). The adapters
// (serving/adapters.h), the engine client, the endpoint parser and the harness read it, so
// adding an engine is one entry plus its dialect (docs/adding-an-engine.md);
// docs/engine-mode.md's table "Starting each engine" says the same for people.
//
// Checked against the released sources of vLLM 0.34.0, SGLang 0.5.23 and llama.cpp b11434
// (file:line in each entry's comments).
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serving/adapters.h"
#include "serving/endpoint.h"

namespace kvgate::serving {

struct DiscoveryPath {
  std::string_view path;
  // Asked when `path` answers 404: the name an older release serves ("" = none).
  std::string_view fallback;
};

// Discovery's answers that came back 200: (path, body), in the order asked.
using DiscoveryAnswers = std::vector<std::pair<std::string, std::string>>;

struct EngineTraits {
  EngineKind kind{};
  std::string_view name{};                // the endpoints file's `engine`, and what results store
  std::vector<std::string_view> aliases{};  // other spellings `engine` accepts
  std::string_view display{};               // "vLLM", for messages

  // --- What it can do.
  // Teacher-forced span scoring needs prompt logprobs: an engine without them (`score` null)
  // gives answers but no KLD, and cannot be the reference.
  bool scores_spans() const { return score != nullptr; }
  // Whether a streamed answer may hold back generated tokens its whole (non-streamed) answer
  // lists: llama-server streams a token that ends inside a UTF-8 character only with the token
  // that completes it, under that token's id alone, and never one left incomplete at the end.
  bool stream_withholds_tokens = false;
  // Whether requests need the "model" field, so discovery must run before the first request
  // when the endpoint names none (llama-server serves one model and ignores it).
  bool needs_model = true;
  // POSTed after discovery to learn ScoreRequest::plain_token ("" = not needed).
  std::string_view plain_token_path{};

  // --- Sampling.
  // A JSON object of sampling fields, each set to the value that changes nothing, sent on every
  // request that samples a token. Fields a request leaves out are filled from the model file
  // or the server's defaults: vLLM takes repetition/presence/frequency penalty, top_k/top_p/
  // min_p from generation_config.json (--generation-config auto; config/model.py:1884-1921,
  // completion/protocol.py:313-375); llama-server takes top_k, top_p, min_p, XTC, the penalties,
  // mirostat and the sampler order from the GGUF's general.sampling.* (common/common.cpp:
  // 1127-1145); SGLang's /generate merges --preferred-sampling-params under the request's
  // (managers/tokenizer_manager.py:1549-1550). Any of them would move a greedy answer for
  // reasons that have nothing to do with the KV cache.
  std::string_view neutral_sampling{};
  // Where those fields go: "" = the request's top level, else the name of the nested object.
  std::string_view sampling_object{};

  // --- Discovery.
  // What `engine: auto` asks to recognize this engine: GET each probe path; `recognizes` says
  // whether a 200 answer there is this engine. Engines are asked in increasing probe_order,
  // those whose path nobody else serves first. No probes: never detected (the fallback).
  std::vector<std::string_view> probes{};
  int probe_order = 0;
  bool (*recognizes)(std::string_view path, const std::string& body) = nullptr;
  // Asked in order once the kind is known; read by read_discovery.
  std::vector<DiscoveryPath> discovery{};
  // Fills `info` (version, model, context, KV dtype, raw, notes) from the answers; an answer
  // that does not parse is a kvgate::Error (input).
  void (*read_discovery)(const DiscoveryAnswers& answers, EngineInfo& info) = nullptr;
  // Where the engine reports its KV cache dtype, for messages ("" = it does not).
  std::string_view kv_dtype_where{};
  // What the engine's kv cache dtype "auto" stores, for messages and the results.
  std::string_view auto_means{};
  // What else "auto" may hide, said where a stated config contradicts it ("" = nothing).
  std::string_view auto_caveat{};
  // How to make the engine report prefix-cache hits per request ("" = it always does).
  std::string_view cached_tokens_hint{};

  // --- Dialect (serving/adapters.h states the contracts; requests are already checked).
  // Greedy generation; the body is sent pinned (neutral_sampling).
  EngineRequest (*generate)(const EngineTraits& self, const std::string& model, const GenerateRequest& request) = nullptr;
  // The requests that score one span, in order, and how their bodies are read; null when the
  // engine has no prompt logprobs.
  std::vector<EngineRequest> (*score)(const EngineTraits& self, const std::string& model, const ScoreRequest& request) = nullptr;
  ScoreResult (*parse_score)(const ScoreRequest& request, const std::vector<std::string>& bodies) = nullptr;
};

// Every engine, in the order messages and docs list them.
std::span<const EngineTraits* const> engine_table();
// The entry of a resolved kind; for `automatic`, an entry with no dialect (display "engine").
const EngineTraits& engine_traits(EngineKind kind);
// By name or alias; nullptr otherwise ("auto" is not an engine: parse_engine_kind takes it).
const EngineTraits* find_engine(std::string_view name);
// "vllm, sglang, llama-server, openai", or only the engines that score spans.
std::string engine_names_text(bool scoring_only = false);

}  // namespace kvgate::serving
