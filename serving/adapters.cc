#include "serving/adapters.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/engine_dialect.h"

// The dispatch from the engine kind to its entry in the engine table (serving/engine_traits.h);
// each engine's dialect is in serving/engine_<name>.cc.
namespace kvgate::serving {

namespace {

using nlohmann::json;

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

// The entry of a kind discovery has resolved; `what` names the operation for the error.
const EngineTraits& resolved(EngineKind kind, const char* what) {
  if (kind == EngineKind::automatic)
    throw_usage_error(std::string(what) + ": the engine kind is not resolved yet (run discovery first)");
  return engine_traits(kind);
}

}  // namespace

EngineRequest build_generate(EngineKind kind, const std::string& model, const GenerateRequest& r) {
  check_generate(r);
  const EngineTraits& t = resolved(kind, "generate");
  return t.generate(t, model, r);
}

std::vector<EngineRequest> build_score(EngineKind kind, const std::string& model, const ScoreRequest& r) {
  check_score(r);
  const EngineTraits& t = resolved(kind, "score");
  if (!t.scores_spans())
    throw_usage_error("the " + std::string(t.name) + " engine kind cannot score a given span (it returns no prompt "
                      "logprobs); use engine " + engine_names_text(true));
  return t.score(t, model, r);
}

ScoreResult parse_score(EngineKind kind, const ScoreRequest& r, const std::vector<std::string>& bodies) {
  const EngineTraits& t = engine_traits(kind);
  if (!t.scores_spans()) throw_internal_error("parse_score: engine kind " + engine_kind_name(kind) + " cannot score");
  return t.parse_score(r, bodies);
}

EngineInfo parse_discovery(EngineKind kind, const std::vector<std::pair<std::string, std::string>>& answers) {
  EngineInfo info;
  info.kind = kind;
  const EngineTraits& t = engine_traits(kind);
  if (t.read_discovery == nullptr) throw_internal_error("parse_discovery: the engine kind is not resolved");
  t.read_discovery(answers, info);
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
  const json* tokens = dialect::get(j, "tokens");
  if (tokens == nullptr || !tokens->is_array() || tokens->empty()) return std::nullopt;
  const json& last = tokens->back();
  // with_pieces answers carry {"id": N, "piece": ...}
  return last.is_object() && last.contains("id") ? dialect::id_of(last["id"]) : dialect::id_of(last);
}

namespace {

// The engines auto-detection asks, in probe order.
std::vector<const EngineTraits*> probed_engines() {
  std::vector<const EngineTraits*> out;
  for (const EngineTraits* e : engine_table())
    if (!e->probes.empty()) out.push_back(e);
  std::stable_sort(out.begin(), out.end(), [](const EngineTraits* a, const EngineTraits* b) { return a->probe_order < b->probe_order; });
  return out;
}

}  // namespace

std::vector<std::string> probe_paths() {
  std::vector<std::string> out;
  for (const EngineTraits* e : probed_engines())
    for (std::string_view path : e->probes) out.emplace_back(path);
  return out;
}

std::optional<EngineKind> kind_from_probe(const std::string& path, const std::string& body) {
  for (const EngineTraits* e : probed_engines())
    for (std::string_view probe : e->probes)
      if (probe == path && e->recognizes(path, body)) return e->kind;
  return std::nullopt;
}

}  // namespace kvgate::serving
