// vLLM: OpenAI /v1/completions with vLLM's extensions (token ids in and out, prompt_logprobs
// for span scoring), discovery through /version, /v1/models and /metrics.
#include <algorithm>

#include "core/error.h"
#include "serving/engine_dialect.h"

namespace kvgate::serving {

namespace {

using namespace dialect;

EngineRequest vllm_generate(const EngineTraits& self, const std::string& model, const GenerateRequest& r) {
  json body;
  EngineRequest out = openai_generate(model, r, body);
  // Ids instead of token text in the logprobs, so alternatives are compared by id.
  if (r.top_logprobs > 0) body["return_tokens_as_token_ids"] = true;
  body["return_token_ids"] = true;
  body["skip_special_tokens"] = false;
  if (r.ignore_eos) body["ignore_eos"] = true;
  out.body = pinned_body(self, std::move(body));
  return out;
}

std::vector<EngineRequest> vllm_score(const EngineTraits& self, const std::string& model, const ScoreRequest& r) {
  std::vector<int32_t> prompt = r.context;
  prompt.insert(prompt.end(), r.span.begin(), r.span.end());
  json body;
  if (!model.empty()) body["model"] = model;
  body["prompt"] = token_array(prompt);
  body["max_tokens"] = 1;
  body["prompt_logprobs"] = r.top_logprobs;
  body["stream"] = false;
  return {{"POST", "/v1/completions", pinned_body(self, std::move(body)), ResponseFormat::openai_completions, false}};
}

// choices[0].prompt_logprobs[i] = {"ID": {"logprob", "rank", "decoded_token"}} for every
// prompt position i (null at 0); it holds the top k plus the prompt token itself.
ScoreResult vllm_parse_score(const ScoreRequest& r, const std::vector<std::string>& bodies) {
  if (bodies.size() != 1) throw_internal_error("vLLM scoring expects one body");
  const json j = parse_json(bodies[0], "vLLM prompt_logprobs");
  const json* choices = j.contains("choices") ? &j["choices"] : nullptr;
  if (choices == nullptr || !choices->is_array() || choices->empty() || !(*choices)[0].contains("prompt_logprobs") ||
      !(*choices)[0]["prompt_logprobs"].is_array())
    throw_input_error("vLLM response has no choices[0].prompt_logprobs (is this a vLLM server?)");
  const json& plp = (*choices)[0]["prompt_logprobs"];
  const size_t n_prompt = r.context.size() + r.span.size();
  if (plp.size() != n_prompt)
    throw_input_error("vLLM returned prompt_logprobs for " + std::to_string(plp.size()) + " positions, kvgate sent " +
                      std::to_string(n_prompt) + " prompt tokens");
  ScoreResult out;
  for (size_t j2 = 0; j2 < r.span.size(); ++j2) {
    const size_t pos = r.context.size() + j2;
    const json& entry = plp[pos];
    if (!entry.is_object()) throw_input_error("vLLM prompt_logprobs[" + std::to_string(pos) + "] is not an object");
    ScoredToken st;
    st.target = r.span[j2];
    for (const auto& [key, value] : entry.items()) {
      const auto id = id_from_key(key);
      if (!id || !value.is_object() || !value.contains("logprob") || !value["logprob"].is_number())
        throw_input_error("vLLM prompt_logprobs[" + std::to_string(pos) + "] has a malformed entry \"" + key + "\"");
      const double lp = value["logprob"].get<double>();
      if (*id == st.target) st.target_logprob = lp;
      const bool in_top = !value.contains("rank") || !value["rank"].is_number_integer() ||
                          value["rank"].get<int64_t>() <= r.top_logprobs;
      if (in_top) st.top.push_back({value.value("decoded_token", std::string()), id, lp});
    }
    if (!st.target_logprob)
      throw_input_error("vLLM prompt_logprobs[" + std::to_string(pos) + "] lacks the prompt token " +
                        std::to_string(st.target) + " (the engine scored different tokens than kvgate sent)");
    best_first(st.top);
    if (st.top.size() > static_cast<size_t>(r.top_logprobs)) st.top.resize(static_cast<size_t>(r.top_logprobs));
    out.tokens.push_back(std::move(st));
  }
  if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("prompt_tokens_details") &&
      j["usage"]["prompt_tokens_details"].is_object() && j["usage"]["prompt_tokens_details"].contains("cached_tokens") &&
      j["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer())
    out.cached_prompt_tokens = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  return out;
}

// The labels of the first sample of `metric` in Prometheus text exposition format
// ({name="value",...}; values escape \\, \" and \n), nullopt when no sample of it is there.
std::optional<json> prometheus_labels(const std::string& text, std::string_view metric) {
  size_t line = 0;
  while (line < text.size()) {
    const size_t eol = std::min(text.find('\n', line), text.size());
    const std::string_view l(text.data() + line, eol - line);
    line = eol + 1;
    if (l.substr(0, metric.size()) != metric || l.size() == metric.size() || l[metric.size()] != '{') continue;
    json labels = json::object();
    size_t i = metric.size() + 1;
    while (i < l.size() && l[i] != '}') {
      const size_t eq = l.find('=', i);
      if (eq == std::string_view::npos || eq + 1 >= l.size() || l[eq + 1] != '"') return std::nullopt;
      std::string name(l.substr(i, eq - i)), value;
      size_t k = eq + 2;
      for (; k < l.size() && l[k] != '"'; ++k) {
        if (l[k] == '\\' && k + 1 < l.size()) {
          ++k;
          value += l[k] == 'n' ? '\n' : l[k];
        } else {
          value += l[k];
        }
      }
      if (k >= l.size()) return std::nullopt;
      labels[name] = value;
      i = k + 1;
      if (i < l.size() && l[i] == ',') ++i;
    }
    return labels;
  }
  return std::nullopt;
}

void vllm_read_discovery(const DiscoveryAnswers& answers, EngineInfo& info) {
  json raw = json::object();
  bool metrics_answered = false;
  for (const auto& [path, body] : answers) {
    if (path == "/metrics") {
      // Prometheus text; only the cache config is kept, the rest is live counters.
      metrics_answered = true;
      const std::optional<json> labels = prometheus_labels(body, "vllm:cache_config_info");
      raw[path] = {{"vllm:cache_config_info", labels ? *labels : json(nullptr)}};
      if (labels && labels->contains("cache_dtype")) info.kv_cache_dtype = (*labels)["cache_dtype"].get<std::string>();
      continue;
    }
    const json& j = raw[path] = parse_json(body, "GET " + path);
    if (path == "/v1/models") read_openai_models(j, info);
    else if (path == "/version") info.version = str_at(j, "version");
  }
  info.raw = raw.dump();
  note_missing_context(info);
  if (info.kv_cache_dtype.empty())
    info.notes.push_back(metrics_answered ? "its /metrics has no vllm:cache_config_info (started with --disable-log-stats?): "
                                            "its KV cache dtype is unknown, the stated KV config stands unchecked"
                                          : "it serves no /metrics: its KV cache dtype is unknown, the stated KV config "
                                            "stands unchecked");
}

// /version with a version string. (vLLM also serves /server_info with dev routes on, as
// {"vllm_config": ...}: SGLang's recognizer refuses that.)
bool vllm_recognizes(std::string_view path, const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  return path == "/version" && j.is_object() && j.contains("version") && j["version"].is_string();
}

}  // namespace

// top_k 0 is vLLM's "disabled" (sampling_params.py:685); vLLM itself resets top_p/top_k/min_p
// at temperature 0 (sampling_params.py:619-623), the penalties it does not.
const EngineTraits kVllmEngine{
    .kind = EngineKind::vllm,
    .name = "vllm",
    .aliases = {},
    .display = "vLLM",
    .neutral_sampling = R"({"temperature": 0, "top_p": 1, "top_k": 0, "min_p": 0, "repetition_penalty": 1,
        "presence_penalty": 0, "frequency_penalty": 0})",
    .sampling_object = "",
    // /version is a generic name another server may answer: asked last.
    .probes = {"/version"},
    .probe_order = 3,
    .recognizes = vllm_recognizes,
    // /metrics: vllm:cache_config_info (v1/metrics/loggers.py:1114-1135), a Prometheus gauge
    // whose labels are the CacheConfig fields, cache_dtype among them.
    .discovery = {{"/version", ""}, {"/v1/models", ""}, {"/metrics", ""}},
    .read_discovery = vllm_read_discovery,
    .kv_dtype_where = "/metrics vllm:cache_config_info{cache_dtype}",
    // vLLM resolves a checkpoint's KV quantization before it builds CacheConfig
    // (engine/arg_utils.py:2329-2332), so what it still calls auto is the model's dtype.
    .auto_means = "the model's dtype (vLLM does not report which)",
    .auto_caveat = "",
    // usage.prompt_tokens_details is filled only with this flag (completion/serving.py:576-579).
    .cached_tokens_hint = "start vLLM with --enable-prompt-tokens-details",
    .generate = vllm_generate,
    .score = vllm_score,
    .parse_score = vllm_parse_score,
};

}  // namespace kvgate::serving
