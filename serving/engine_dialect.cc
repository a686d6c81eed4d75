#include "serving/engine_dialect.h"

#include <algorithm>
#include <climits>

#include "core/error.h"

namespace kvgate::serving::dialect {

EngineRequest post(const char* path, ResponseFormat format, bool stream) {
  EngineRequest out;
  out.path = path;
  out.format = format;
  out.stream = stream;
  return out;
}

json token_array(const std::vector<int32_t>& tokens) {
  json a = json::array();
  for (int32_t t : tokens) a.push_back(t);
  return a;
}

json prompt_of(const GenerateRequest& r) { return r.prompt_tokens.empty() ? json(r.prompt_text) : token_array(r.prompt_tokens); }

void pin_sampling(const EngineTraits& traits, json& body) {
  // Parsed once per engine: every request of a run pins the same fields.
  static const auto parsed = [] {
    std::vector<std::pair<const EngineTraits*, json>> out;
    for (const EngineTraits* e : engine_table()) out.emplace_back(e, json::parse(e->neutral_sampling));
    return out;
  }();
  const std::string_view where = traits.sampling_object;
  json& target = where.empty() ? body : body[std::string(where)];
  for (const auto& [engine, fields] : parsed)
    if (engine == &traits)
      for (const auto& [key, value] : fields.items()) target[key] = value;
}

std::string pinned_body(const EngineTraits& traits, json body) {
  pin_sampling(traits, body);
  return body.dump();
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

EngineRequest openai_generate(const std::string& model, const GenerateRequest& r, json& body) {
  EngineRequest out = post("/v1/completions", ResponseFormat::openai_completions, r.stream);
  if (!model.empty()) body["model"] = model;
  body["prompt"] = prompt_of(r);
  body["max_tokens"] = r.max_tokens;
  if (r.top_logprobs > 0) body["logprobs"] = r.top_logprobs;
  body["stream"] = r.stream;
  if (r.stream) body["stream_options"] = {{"include_usage", true}};
  return out;
}

void read_openai_models(const json& answer, EngineInfo& info) {
  const json* data = get(answer, "data");
  if (data != nullptr && data->is_array() && !data->empty()) {
    if (info.model.empty()) info.model = str_at((*data)[0], "id");
    if (!info.context_length) info.context_length = int_at((*data)[0], "max_model_len");
  }
}

void note_missing_context(EngineInfo& info) {
  if (!info.context_length) info.notes.push_back("it reports no context length: items are not checked against it before the run");
}

}  // namespace kvgate::serving::dialect
