#pragma once
// What each engine kind is sent and how its answers are read: greedy generation with top-k
// logprobs, teacher-forced scoring of a span, and version/model/KV discovery. Prompts go as
// token ids wherever the engine accepts them, so the engine sees exactly kvgate's tokens (no
// second tokenizer, no BOS added behind our back).
//
//              generation                  span scoring (teacher forced)
//   vllm       POST /v1/completions        POST /v1/completions, prompt_logprobs = k
//   sglang     POST /generate              POST /generate, return_logprob, top_logprobs_num,
//                                          logprob_start_len = context length - 1 (SGLang
//                                          leaves the row at logprob_start_len unscored)
//   llama-     POST /completion            POST /completion per span token: prompt = context +
//   server                                 span[0, i), n_predict 1, n_probs k, cache_prompt (the
//                                          prefix stays in the slot's cache, so each step
//                                          evaluates one new token)
//   openai     POST /v1/completions        not available: the OpenAI API has no prompt logprobs
//
// Every request that samples pins the engine's neutral sampling (serving/engine_traits.h), so
// no default from the model file or the server moves a greedy token. Builders and parsers are
// pure functions on strings, so every dialect is tested without a server;
// serving/engine_client.h sends them.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "serving/completion.h"
#include "serving/endpoint.h"

namespace kvgate::serving {

constexpr int kMaxTopLogprobs = 20;  // what vLLM (--max-logprobs) and OpenAI allow by default

struct GenerateRequest {
  std::vector<int32_t> prompt_tokens;  // sent as ids; must be non-empty unless prompt_text is set
  std::string prompt_text;             // used only when prompt_tokens is empty
  int max_tokens = 32;
  // 0..kMaxTopLogprobs alternatives per generated token. Engines pay per token for them
  // (llama-server sorts the vocabulary), so a caller that reads none asks for none.
  int top_logprobs = 0;
  bool stream = true;
  bool ignore_eos = false;  // load replay: generate exactly max_tokens (where the engine can)
};

struct ScoreRequest {
  std::vector<int32_t> context;  // what precedes the span; non-empty (token 0 has no distribution)
  std::vector<int32_t> span;     // the tokens scored, each under the context and the span before it
  int top_logprobs = kMaxTopLogprobs;  // 1..kMaxTopLogprobs
  // llama-server only: a token whose piece is whole text, which each scoring step is made to
  // sample (logit_bias). The server withholds a sampled token that ends inside a UTF-8
  // character, and its probabilities with it (process_token in tools/server/server-context.cpp),
  // so a step whose argmax is such a byte token (Korean, emoji) would come back without any.
  // The probabilities it reports are of the raw logits, before the bias.
  std::optional<int32_t> plain_token;
};

struct ScoredToken {
  int32_t target = 0;
  // The target's logprob. vLLM and SGLang always return it; llama-server only lists the top
  // k, so it is absent there when the target is not among them (the estimator in
  // scoring/topk_kld.h then bounds it).
  std::optional<double> target_logprob;
  std::vector<TokenLogprob> top;  // best first, at most top_logprobs, every entry with an id
};

struct ScoreResult {
  std::vector<ScoredToken> tokens;  // one per span token
  std::optional<int64_t> cached_prompt_tokens;  // summed over the requests, where reported
};

// One HTTP exchange, relative to the endpoint's base URL.
struct EngineRequest {
  std::string method = "POST";
  std::string path;  // "/v1/completions", ...
  std::string body;  // JSON ("" for GET)
  ResponseFormat format = ResponseFormat::openai_completions;
  bool stream = false;
};

// `model` is the model field to send ("" = omit; llama-server ignores it anyway). Throws
// kvgate::Error (usage) for an unresolved `automatic` kind or out-of-range parameters.
EngineRequest build_generate(EngineKind kind, const std::string& model, const GenerateRequest& request);

// The requests that score one span: one for vLLM and SGLang, span.size() for llama-server.
// Throws kvgate::Error (usage) for the openai kind, which cannot score a given span.
std::vector<EngineRequest> build_score(EngineKind kind, const std::string& model, const ScoreRequest& request);

// Reads the bodies of build_score's requests, in order. A body that lacks the logprobs, scores
// a different token than was sent, or has the wrong length is a kvgate::Error (input) saying so.
ScoreResult parse_score(EngineKind kind, const ScoreRequest& request, const std::vector<std::string>& bodies);

struct EngineInfo {
  EngineKind kind = EngineKind::automatic;
  std::string version;  // as the engine reports it ("" when it does not)
  std::string model;    // the served model's id or path
  // The KV cache dtype as the engine spells it ("auto", "fp8_e4m3", ...): SGLang's /server_info
  // kv_cache_dtype, vLLM's /metrics vllm:cache_config_info cache_dtype; "" when the engine does
  // not expose it (llama-server), and the endpoint's stated `kv` stands unchecked.
  std::string kv_cache_dtype;
  // The model's dtype where the engine says it (SGLang's dtype when not "auto"), as spelled
  // there ("bfloat16"); "" when unknown. Resolves a KV dtype of "auto".
  std::string model_dtype;
  std::optional<int64_t> context_length;  // prompt + generated tokens one request may hold
  // The longest prompt the scheduler admits is max_input_tokens - 1 (SGLang's
  // max_req_input_len: context and KV pool, less a reserve); nullopt when not reported.
  std::optional<int64_t> max_input_tokens;
  std::string raw;  // the discovery answers, compact JSON keyed by path, for the results
  // llama-server: ScoreRequest::plain_token, from POST /tokenize of "." at discovery.
  std::optional<int32_t> plain_token;
  // What discovery could not learn or found worth a word, one sentence each (the harness
  // prints them with the endpoint's name).
  std::vector<std::string> notes;
};

// The KV dtype the engine reports, for the results: "" when it reports none, "auto" with what
// that stores ("auto: the model's dtype, bfloat16"), else its spelling.
std::string reported_kv_label(const EngineInfo& info);

// Why `prompt_tokens` plus `new_tokens` generated do not fit what the engine serves, naming the
// limit; "" when they fit or the engine reported no limit.
std::string context_problem(const EngineInfo& info, int64_t prompt_tokens, int64_t new_tokens);

// llama-server's POST /tokenize request for the plain token, and its answer's last token id
// (nullopt when the answer holds none).
std::string plain_token_request();
std::optional<int32_t> parse_plain_token(const std::string& body);

// `answers`: (path, body) for the discovery paths (engine_traits(kind).discovery, or their
// fallbacks) that answered 200; missing paths are skipped and noted where they would have told
// something. /metrics is Prometheus text, every other answer JSON; an answer that does not
// parse is a kvgate::Error (input).
EngineInfo parse_discovery(EngineKind kind, const std::vector<std::pair<std::string, std::string>>& answers);

// The paths probed, in order, to tell the kind of an `auto` endpoint.
std::vector<std::string> probe_paths();
// Guesses the kind from one probe answer: /props with default_generation_settings or
// build_info is llama-server, /server_info (or the older /get_server_info) with SGLang's
// fields is SGLang, /version with a version string is vLLM. nullopt when the answer says
// nothing.
std::optional<EngineKind> kind_from_probe(const std::string& path, const std::string& body);

}  // namespace kvgate::serving
