// llama-server: its native /completion with token ids, span scoring one token per request
// (n_probs, the prompt kept in the slot's cache), discovery through /props and /v1/models.
#include "core/error.h"
#include "serving/engine_dialect.h"

namespace kvgate::serving {

namespace {

using namespace dialect;

EngineRequest llama_generate(const EngineTraits& self, const std::string&, const GenerateRequest& r) {
  EngineRequest out = post("/completion", ResponseFormat::llama_completion, r.stream);
  json body;
  body["prompt"] = prompt_of(r);
  body["n_predict"] = r.max_tokens;
  if (r.top_logprobs > 0) body["n_probs"] = r.top_logprobs;  // the raw softmax, whatever the sampling
  body["cache_prompt"] = true;
  body["return_tokens"] = true;
  body["stream"] = r.stream;
  if (r.ignore_eos) body["ignore_eos"] = true;
  out.body = pinned_body(self, std::move(body));
  return out;
}

// One request per span token: prompt = context + span[0, i), n_predict 1, n_probs k; the prefix
// stays in the slot's cache, so each step evaluates one new token.
std::vector<EngineRequest> llama_score(const EngineTraits& self, const std::string&, const ScoreRequest& r) {
  std::vector<int32_t> prompt = r.context;
  std::vector<EngineRequest> out;
  out.reserve(r.span.size());
  for (size_t i = 0; i < r.span.size(); ++i) {
    json body;
    body["prompt"] = token_array(prompt);
    body["n_predict"] = 1;
    body["n_probs"] = r.top_logprobs;
    body["cache_prompt"] = true;
    body["stream"] = false;
    if (r.plain_token) body["logit_bias"] = json::array({json::array({*r.plain_token, 1000.0})});
    out.push_back({"POST", "/completion", pinned_body(self, std::move(body)), ResponseFormat::llama_completion, false});
    prompt.push_back(r.span[i]);
  }
  return out;
}

// llama-server, one body per span token: completion_probabilities[0].top_logprobs lists the
// top n_probs of the distribution after the prompt (pre-sampling, a softmax of the raw
// logits: get_token_probabilities in tools/server/server-common.cpp).
ScoreResult llama_parse_score(const ScoreRequest& r, const std::vector<std::string>& bodies) {
  if (bodies.size() != r.span.size())
    throw_internal_error("llama-server scoring: " + std::to_string(bodies.size()) + " bodies for a span of " +
                         std::to_string(r.span.size()));
  ScoreResult out;
  int64_t cached = 0;
  bool any_cached = false;
  for (size_t i = 0; i < r.span.size(); ++i) {
    const json j = parse_json(bodies[i], "llama-server /completion");
    const std::string where = "llama-server response for span token " + std::to_string(i);
    if (!j.is_object() || !j.contains("completion_probabilities") || !j["completion_probabilities"].is_array() ||
        j["completion_probabilities"].empty())
      throw_input_error(where + " has no completion_probabilities (n_probs ignored?)");
    const json& first = j["completion_probabilities"][0];
    const json* list = first.contains("top_logprobs") ? &first["top_logprobs"] : nullptr;
    if (list == nullptr || !list->is_array())
      throw_input_error(where + " has no top_logprobs (post_sampling_probs responses are not raw distributions)");
    if (j.contains("tokens_evaluated") && j["tokens_evaluated"].is_number_integer() &&
        j["tokens_evaluated"].get<int64_t>() != static_cast<int64_t>(r.context.size() + i))
      throw_input_error(where + " evaluated " + j["tokens_evaluated"].dump() + " prompt tokens, kvgate sent " +
                        std::to_string(r.context.size() + i));
    ScoredToken st;
    st.target = r.span[i];
    for (const json& e : *list) {
      if (!e.is_object() || !e.contains("logprob") || !e["logprob"].is_number()) continue;
      const auto id = e.contains("id") ? id_of(e["id"]) : std::nullopt;
      if (!id) throw_input_error(where + ": a top_logprobs entry has no token id");
      const double lp = e["logprob"].get<double>();
      st.top.push_back({e.value("token", std::string()), id, lp});
      if (*id == st.target) st.target_logprob = lp;
    }
    best_first(st.top);
    if (st.top.size() > static_cast<size_t>(r.top_logprobs)) st.top.resize(static_cast<size_t>(r.top_logprobs));
    if (j.contains("timings") && j["timings"].is_object() && j["timings"].contains("cache_n") &&
        j["timings"]["cache_n"].is_number_integer()) {
      cached += j["timings"]["cache_n"].get<int64_t>();
      any_cached = true;
    }
    out.tokens.push_back(std::move(st));
  }
  if (any_cached) out.cached_prompt_tokens = cached;
  return out;
}

void llama_read_discovery(const DiscoveryAnswers& answers, EngineInfo& info) {
  json raw = json::object();
  for (const auto& [path, body] : answers) {
    const json& j = raw[path] = parse_json(body, "GET " + path);
    if (path == "/v1/models") {
      read_openai_models(j, info);
    } else if (path == "/props") {  // get_res_props in tools/server/server-context.cpp
      info.version = str_at(j, "build_info");
      const std::string alias = str_at(j, "model_alias");
      if (!alias.empty()) info.model = alias;
      else if (info.model.empty()) info.model = str_at(j, "model_path");
      if (const json* g = get(j, "default_generation_settings")) info.context_length = int_at(*g, "n_ctx");
    }
  }
  info.raw = raw.dump();
  note_missing_context(info);
  info.notes.push_back("llama-server does not report its KV cache type: the stated KV config stands unchecked");
}

// /props with default_generation_settings or build_info.
bool llama_recognizes(std::string_view, const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  return j.is_object() && (j.contains("default_generation_settings") || j.contains("build_info"));
}

}  // namespace

// "samplers" replaces the chain the GGUF may order (general.sampling.sequence); with only the
// temperature sampler at 0 the choice is the argmax after the logit biases
// (common/sampling.cpp:329-403). mirostat != 0 would replace the chain altogether.
const EngineTraits kLlamaServerEngine{
    .kind = EngineKind::llama_server,
    .name = "llama-server",
    .aliases = {"llama_server", "llama.cpp"},
    .display = "llama-server",
    .stream_withholds_tokens = true,
    .needs_model = false,
    // ScoreRequest::plain_token: the last token of "." (serving/adapters.h plain_token_request).
    .plain_token_path = "/tokenize",
    .neutral_sampling = R"({"temperature": 0, "dynatemp_range": 0, "samplers": ["temperature"], "mirostat": 0,
        "repeat_penalty": 1, "presence_penalty": 0, "frequency_penalty": 0, "dry_multiplier": 0, "top_k": 0, "top_p": 1,
        "min_p": 0, "typical_p": 1, "xtc_probability": 0})",
    .sampling_object = "",
    // Nobody else serves /props: asked first.
    .probes = {"/props"},
    .probe_order = 1,
    .recognizes = llama_recognizes,
    .discovery = {{"/props", ""}, {"/v1/models", ""}},
    .read_discovery = llama_read_discovery,
    .generate = llama_generate,
    .score = llama_score,
    .parse_score = llama_parse_score,
};

}  // namespace kvgate::serving
