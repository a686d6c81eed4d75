#include "serving/adapters.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/engine_traits.h"

namespace kvgate::serving {

namespace {

using nlohmann::json;

json token_array(const std::vector<int32_t>& tokens) {
  json a = json::array();
  for (int32_t t : tokens) a.push_back(t);
  return a;
}

// The engine's neutral sampling fields (engine_traits), written over whatever `body` holds.
void pin_sampling(EngineKind kind, json& body) {
  static const auto parsed = [] {
    std::vector<std::pair<EngineKind, json>> out;
    for (EngineKind k : {EngineKind::vllm, EngineKind::sglang, EngineKind::llama_server, EngineKind::openai})
      out.emplace_back(k, json::parse(engine_traits(k).neutral_sampling));
    return out;
  }();
  const std::string_view where = engine_traits(kind).sampling_object;
  json& target = where.empty() ? body : body[std::string(where)];
  for (const auto& [k, fields] : parsed)
    if (k == kind)
      for (const auto& [key, value] : fields.items()) target[key] = value;
}

void check_generate(const GenerateRequest& r) {
  if (r.prompt_tokens.empty() && r.prompt_text.empty()) throw_usage_error("generate: empty prompt");
  if (r.max_tokens < 1) throw_usage_error("generate: max_tokens must be at least 1");
  if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs)
    throw_usage_error("generate: top logprobs must be in 0.." + std::to_string(kMaxTopLogprobs));
}

void check_score(const ScoreRequest& r) {
  if (r.context.empty()) throw_usage_error("score: the context must hold at least one token");
  if (r.span.empty()) throw_usage_error("score: empty span");
  if (r.top_logprobs < 1 || r.top_logprobs > kMaxTopLogprobs)
    throw_usage_error("score: top logprobs must be in 1.." + std::to_string(kMaxTopLogprobs));
}

json parse_json(const std::string& body, const std::string& what) {
  try {
    return json::parse(body);
  } catch (const json::parse_error& e) {
    throw_input_error(what + ": the response is not JSON (" + std::string(e.what()) + "): " + body.substr(0, 120));
  }
}

std::optional<int32_t> id_of(const json& v) {
  if (v.is_number_integer()) {
    const int64_t id = v.get<int64_t>();
    if (id >= 0 && id <= INT32_MAX) return static_cast<int32_t>(id);
  }
  return std::nullopt;
}

std::optional<int32_t> id_from_key(const std::string& key) {
  if (key.empty() || key.size() > 10) return std::nullopt;
  int64_t v = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > INT32_MAX) return std::nullopt;
  return static_cast<int32_t>(v);
}

void best_first(std::vector<TokenLogprob>& top) {
  std::stable_sort(top.begin(), top.end(), [](const TokenLogprob& a, const TokenLogprob& b) { return a.logprob > b.logprob; });
}

// vLLM: choices[0].prompt_logprobs[i] = {"ID": {"logprob", "rank", "decoded_token"}} for every
// prompt position i (null at 0); it holds the top k plus the prompt token itself.
ScoreResult parse_vllm_score(const ScoreRequest& r, const std::string& body) {
  const json j = parse_json(body, "vLLM prompt_logprobs");
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

// SGLang: meta_info.input_token_logprobs[i] = [logprob, id, text] for prompt position
// logprob_start_len + i, input_top_logprobs[i] = [[logprob, id, text], ...]. The row at
// logprob_start_len itself is never scored: SGLang returns [None] + the logprobs of positions
// logprob_start_len + 1 .. end, ids from logprob_start_len on, and a null top list first
// (managers/scheduler_components/logprob_result_processor.py:26-84). So kvgate asks from the
// context's last token, checks that dropped row names it, and reads the span from row 1.
ScoreResult parse_sglang_score(const ScoreRequest& r, const std::string& body) {
  json j = parse_json(body, "SGLang /generate");
  if (j.is_array() && j.size() == 1) j = j[0];
  if (!j.is_object() || !j.contains("meta_info") || !j["meta_info"].is_object())
    throw_input_error("SGLang response has no meta_info object");
  const json& meta = j["meta_info"];
  if (!meta.contains("input_token_logprobs") || !meta["input_token_logprobs"].is_array())
    throw_input_error("SGLang response has no meta_info.input_token_logprobs (return_logprob ignored?)");
  const json& lps = meta["input_token_logprobs"];
  const json empty = json::array();
  const json& tops = meta.contains("input_top_logprobs") && meta["input_top_logprobs"].is_array() ? meta["input_top_logprobs"] : empty;
  const size_t rows = r.span.size() + 1;
  const std::string start = " (logprob_start_len " + std::to_string(r.context.size() - 1) + ")";
  if (lps.size() != rows)
    throw_input_error("SGLang returned input logprobs for " + std::to_string(lps.size()) + " positions, expected " +
                      std::to_string(rows) + start);
  if (tops.size() != rows)
    throw_input_error("SGLang returned input_top_logprobs for " + std::to_string(tops.size()) + " positions, expected " +
                      std::to_string(rows) + start);
  const json& dropped = lps[0];
  if (!dropped.is_array() || dropped.size() < 2 || !dropped[0].is_null() || id_of(dropped[1]) != r.context.back() ||
      !tops[0].is_null())
    throw_input_error("SGLang input_token_logprobs[0] is " + dropped.dump().substr(0, 80) +
                      ", not the unscored row of the context's last token " + std::to_string(r.context.back()) + start +
                      " (does this SGLang version score the row at logprob_start_len?)");
  ScoreResult out;
  for (size_t i = 0; i < r.span.size(); ++i) {
    const json& e = lps[i + 1];
    if (!e.is_array() || e.size() < 2 || !e[0].is_number())
      throw_input_error("SGLang input_token_logprobs[" + std::to_string(i + 1) + "] has no logprob");
    const auto id = id_of(e[1]);
    if (!id || *id != r.span[i])
      throw_input_error("SGLang scored token " + e[1].dump() + " at span position " + std::to_string(i) +
                        " where kvgate sent " + std::to_string(r.span[i]));
    ScoredToken st;
    st.target = r.span[i];
    st.target_logprob = e[0].get<double>();
    if (tops[i + 1].is_array())
      for (const json& t : tops[i + 1]) {
        if (!t.is_array() || t.size() < 2 || !t[0].is_number()) continue;
        const auto tid = id_of(t[1]);
        if (!tid) continue;
        st.top.push_back({t.size() > 2 && t[2].is_string() ? t[2].get<std::string>() : std::string(), tid, t[0].get<double>()});
      }
    best_first(st.top);
    out.tokens.push_back(std::move(st));
  }
  if (meta.contains("cached_tokens") && meta["cached_tokens"].is_number_integer())
    out.cached_prompt_tokens = meta["cached_tokens"].get<int64_t>();
  return out;
}

// llama-server, one body per span token: completion_probabilities[0].top_logprobs lists the
// top n_probs of the distribution after the prompt (pre-sampling, a softmax of the raw
// logits: get_token_probabilities in tools/server/server-common.cpp).
ScoreResult parse_llama_score(const ScoreRequest& r, const std::vector<std::string>& bodies) {
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

const json* get(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string str_at(const json& obj, const char* key) {
  const json* v = get(obj, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

std::optional<int64_t> int_at(const json& obj, const char* key) {
  const json* v = get(obj, key);
  if (v != nullptr && v->is_number_integer()) return v->get<int64_t>();
  return std::nullopt;
}

}  // namespace

EngineRequest build_generate(EngineKind kind, const std::string& model, const GenerateRequest& r) {
  check_generate(r);
  const json prompt = r.prompt_tokens.empty() ? json(r.prompt_text) : token_array(r.prompt_tokens);
  EngineRequest out;
  out.stream = r.stream;
  json body;
  switch (kind) {
    case EngineKind::vllm:
    case EngineKind::openai: {
      out.path = "/v1/completions";
      out.format = ResponseFormat::openai_completions;
      if (!model.empty()) body["model"] = model;
      body["prompt"] = prompt;
      body["max_tokens"] = r.max_tokens;
      if (r.top_logprobs > 0) body["logprobs"] = r.top_logprobs;
      body["stream"] = r.stream;
      if (r.stream) body["stream_options"] = {{"include_usage", true}};
      if (kind == EngineKind::vllm) {
        // Ids instead of token text in the logprobs, so alternatives are compared by id.
        if (r.top_logprobs > 0) body["return_tokens_as_token_ids"] = true;
        body["return_token_ids"] = true;
        body["skip_special_tokens"] = false;
        if (r.ignore_eos) body["ignore_eos"] = true;
      }
      break;
    }
    case EngineKind::sglang: {
      out.path = "/generate";
      out.format = ResponseFormat::sglang_generate;
      if (r.prompt_tokens.empty()) body["text"] = r.prompt_text;
      else body["input_ids"] = prompt;
      body["sampling_params"] = {{"max_new_tokens", r.max_tokens}, {"skip_special_tokens", false}};
      if (r.ignore_eos) body["sampling_params"]["ignore_eos"] = true;
      if (r.top_logprobs > 0) {
        body["return_logprob"] = true;
        body["top_logprobs_num"] = r.top_logprobs;
        body["logprob_start_len"] = -1;  // output tokens only
      }
      body["stream"] = r.stream;
      break;
    }
    case EngineKind::llama_server: {
      out.path = "/completion";
      out.format = ResponseFormat::llama_completion;
      body["prompt"] = prompt;
      body["n_predict"] = r.max_tokens;
      if (r.top_logprobs > 0) body["n_probs"] = r.top_logprobs;  // the raw softmax, whatever the sampling
      body["cache_prompt"] = true;
      body["return_tokens"] = true;
      body["stream"] = r.stream;
      if (r.ignore_eos) body["ignore_eos"] = true;
      break;
    }
    case EngineKind::automatic:
      throw_usage_error("generate: the engine kind is not resolved yet (run discovery first)");
  }
  pin_sampling(kind, body);
  out.body = body.dump();
  return out;
}

std::vector<EngineRequest> build_score(EngineKind kind, const std::string& model, const ScoreRequest& r) {
  check_score(r);
  std::vector<int32_t> prompt = r.context;
  std::vector<EngineRequest> out;
  switch (kind) {
    case EngineKind::vllm: {
      prompt.insert(prompt.end(), r.span.begin(), r.span.end());
      json body;
      if (!model.empty()) body["model"] = model;
      body["prompt"] = token_array(prompt);
      body["max_tokens"] = 1;
      body["prompt_logprobs"] = r.top_logprobs;
      body["stream"] = false;
      pin_sampling(kind, body);
      out.push_back({"POST", "/v1/completions", body.dump(), ResponseFormat::openai_completions, false});
      return out;
    }
    case EngineKind::sglang: {
      prompt.insert(prompt.end(), r.span.begin(), r.span.end());
      json body;
      body["input_ids"] = token_array(prompt);
      // SGLang's input logprobs are the raw log-softmax whatever the sampling
      // (layers/logprob_processor.py); the one sampled token does not matter here.
      body["sampling_params"] = {{"max_new_tokens", 1}};
      body["return_logprob"] = true;
      // One position early: SGLang leaves the row at logprob_start_len unscored
      // (parse_sglang_score), so the context's last token stands there and span[0] is row 1.
      body["logprob_start_len"] = static_cast<int64_t>(r.context.size()) - 1;
      body["top_logprobs_num"] = r.top_logprobs;
      body["stream"] = false;
      pin_sampling(kind, body);
      out.push_back({"POST", "/generate", body.dump(), ResponseFormat::sglang_generate, false});
      return out;
    }
    case EngineKind::llama_server: {
      out.reserve(r.span.size());
      for (size_t i = 0; i < r.span.size(); ++i) {
        json body;
        body["prompt"] = token_array(prompt);
        body["n_predict"] = 1;
        body["n_probs"] = r.top_logprobs;
        body["cache_prompt"] = true;
        body["stream"] = false;
        if (r.plain_token) body["logit_bias"] = json::array({json::array({*r.plain_token, 1000.0})});
        pin_sampling(kind, body);
        out.push_back({"POST", "/completion", body.dump(), ResponseFormat::llama_completion, false});
        prompt.push_back(r.span[i]);
      }
      return out;
    }
    case EngineKind::openai:
      throw_usage_error("the openai engine kind cannot score a given span (the OpenAI API returns no prompt "
                        "logprobs); use engine vllm, sglang or llama-server");
    case EngineKind::automatic:
      throw_usage_error("score: the engine kind is not resolved yet (run discovery first)");
  }
  return out;
}

ScoreResult parse_score(EngineKind kind, const ScoreRequest& r, const std::vector<std::string>& bodies) {
  switch (kind) {
    case EngineKind::vllm:
      if (bodies.size() != 1) throw_internal_error("vLLM scoring expects one body");
      return parse_vllm_score(r, bodies[0]);
    case EngineKind::sglang:
      if (bodies.size() != 1) throw_internal_error("SGLang scoring expects one body");
      return parse_sglang_score(r, bodies[0]);
    case EngineKind::llama_server:
      return parse_llama_score(r, bodies);
    default:
      throw_internal_error("parse_score: engine kind " + engine_kind_name(kind) + " cannot score");
  }
}

namespace {

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

// SGLang's spellings of a model dtype that resolve "auto" (arg_groups/fields/model.py:160-176).
bool names_a_dtype(const std::string& dtype) { return !dtype.empty() && dtype != "auto"; }

}  // namespace

EngineInfo parse_discovery(EngineKind kind, const std::vector<std::pair<std::string, std::string>>& answers) {
  EngineInfo info;
  info.kind = kind;
  const EngineTraits& traits = engine_traits(kind);
  json raw = json::object();
  bool metrics_answered = false;
  for (const auto& [path, body] : answers) {
    if (path == "/metrics") {
      // vLLM's Prometheus text; only the cache config is kept, the rest is live counters.
      metrics_answered = true;
      const std::optional<json> labels = prometheus_labels(body, "vllm:cache_config_info");
      raw[path] = {{"vllm:cache_config_info", labels ? *labels : json(nullptr)}};
      if (labels && labels->contains("cache_dtype")) info.kv_cache_dtype = (*labels)["cache_dtype"].get<std::string>();
      continue;
    }
    const json j = parse_json(body, "GET " + path);
    raw[path] = j;
    if (path == "/v1/models") {
      const json* data = get(j, "data");
      if (data != nullptr && data->is_array() && !data->empty()) {
        if (info.model.empty()) info.model = str_at((*data)[0], "id");
        if (!info.context_length) info.context_length = int_at((*data)[0], "max_model_len");
      }
    } else if (path == "/props") {  // llama-server: get_res_props in tools/server/server-context.cpp
      info.version = str_at(j, "build_info");
      const std::string alias = str_at(j, "model_alias");
      if (!alias.empty()) info.model = alias;
      else if (info.model.empty()) info.model = str_at(j, "model_path");
      if (const json* g = get(j, "default_generation_settings")) info.context_length = int_at(*g, "n_ctx");
    } else if (path == "/version") {
      info.version = str_at(j, "version");
    } else if (path == "/server_info" || path == "/get_server_info") {
      // SGLang: the resolved server args plus the scheduler's info (utils/common.py:3584-3593).
      info.version = str_at(j, "version");
      info.kv_cache_dtype = str_at(j, "kv_cache_dtype");
      if (names_a_dtype(str_at(j, "dtype"))) info.model_dtype = str_at(j, "dtype");
      const std::string served = str_at(j, "served_model_name");
      if (!served.empty()) info.model = served;
      else if (info.model.empty()) info.model = str_at(j, "model_path");
      if (auto c = int_at(j, "context_length")) info.context_length = c;
      info.max_input_tokens = int_at(j, "max_req_input_len");
    } else if (path == "/model_info" || path == "/get_model_info") {
      if (info.model.empty()) info.model = str_at(j, "model_path");
      // --preferred-sampling-params fills what a /generate request leaves out.
      if (const json* preferred = get(j, "preferred_sampling_params"); preferred != nullptr && preferred->is_object()) {
        const json pinned = json::parse(traits.neutral_sampling);
        std::string unpinned;
        for (const auto& [key, value] : preferred->items())
          if (!pinned.contains(key)) unpinned += (unpinned.empty() ? "" : ", ") + key;
        if (!unpinned.empty())
          info.notes.push_back("the server's --preferred-sampling-params set " + unpinned +
                               ", which kvgate's greedy requests do not pin: its greedy answers follow them");
      }
    }
  }
  info.raw = raw.dump();
  if (!info.context_length && kind != EngineKind::openai)
    info.notes.push_back("it reports no context length: items are not checked against it before the run");
  if (kind == EngineKind::vllm && info.kv_cache_dtype.empty())
    info.notes.push_back(metrics_answered ? "its /metrics has no vllm:cache_config_info (started with --disable-log-stats?): "
                                            "its KV cache dtype is unknown, the stated KV config stands unchecked"
                                          : "it serves no /metrics: its KV cache dtype is unknown, the stated KV config "
                                            "stands unchecked");
  if (kind == EngineKind::llama_server)
    info.notes.push_back("llama-server does not report its KV cache type: the stated KV config stands unchecked");
  if (kind == EngineKind::sglang && info.kv_cache_dtype.empty())
    info.notes.push_back("it reports no kv_cache_dtype: the stated KV config stands unchecked");
  return info;
}

std::string reported_kv_label(const EngineInfo& info) {
  if (info.kv_cache_dtype != "auto") return info.kv_cache_dtype;
  if (!info.model_dtype.empty()) return "auto: the model's dtype, " + info.model_dtype;
  return "auto: " + std::string(engine_traits(info.kind).auto_means);
}

std::string context_problem(const EngineInfo& info, int64_t prompt_tokens, int64_t new_tokens) {
  // SGLang refuses a prompt of max_req_input_len tokens or more (managers/utils.py:272).
  if (info.max_input_tokens && prompt_tokens >= *info.max_input_tokens)
    return "a prompt of " + std::to_string(prompt_tokens) + " tokens is not below the " +
           std::to_string(*info.max_input_tokens) + " tokens the scheduler admits (max_req_input_len)";
  if (info.context_length && prompt_tokens + new_tokens > *info.context_length)
    return std::to_string(prompt_tokens) + " prompt tokens and up to " + std::to_string(new_tokens) +
           " generated ones are more than the " + std::to_string(*info.context_length) + " tokens of context it serves";
  return "";
}

std::string plain_token_request() { return json{{"content", "."}, {"add_special", false}}.dump(); }

std::optional<int32_t> parse_plain_token(const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error&) {
    return std::nullopt;
  }
  const json* tokens = get(j, "tokens");
  if (tokens == nullptr || !tokens->is_array() || tokens->empty()) return std::nullopt;
  const json& last = tokens->back();
  // with_pieces answers carry {"id": N, "piece": ...}
  return last.is_object() && last.contains("id") ? id_of(last["id"]) : id_of(last);
}

std::vector<std::string> probe_paths() { return {"/props", "/server_info", "/get_server_info", "/version"}; }

std::optional<EngineKind> kind_from_probe(const std::string& path, const std::string& body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error&) {
    return std::nullopt;
  }
  if (!j.is_object()) return std::nullopt;
  if (path == "/props" && (j.contains("default_generation_settings") || j.contains("build_info"))) return EngineKind::llama_server;
  // vLLM serves /server_info too, with dev routes on, as {"vllm_config": ...}.
  if ((path == "/server_info" || path == "/get_server_info") && !j.contains("vllm_config") &&
      (j.contains("kv_cache_dtype") || j.contains("model_path")))
    return EngineKind::sglang;
  if (path == "/version" && j.contains("version") && j["version"].is_string()) return EngineKind::vllm;
  return std::nullopt;
}

}  // namespace kvgate::serving
