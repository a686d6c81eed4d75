// Any OpenAI-compatible server: /v1/completions with the OpenAI API's own fields only (it
// rejects others), no prompt logprobs (answers, no span scoring), discovery through
// /v1/models. What `engine: auto` falls back to when no probe recognizes the server.
#include "serving/engine_dialect.h"

namespace kvgate::serving {

namespace {

using namespace dialect;

EngineRequest openai_only_generate(const EngineTraits& self, const std::string& model, const GenerateRequest& r) {
  json body;
  EngineRequest out = openai_generate(model, r, body);
  out.body = pinned_body(self, std::move(body));
  return out;
}

void openai_read_discovery(const DiscoveryAnswers& answers, EngineInfo& info) {
  json raw = json::object();
  for (const auto& [path, body] : answers) {
    const json& j = raw[path] = parse_json(body, "GET " + path);
    if (path == "/v1/models") read_openai_models(j, info);
  }
  // The OpenAI API has no context length to report: no note.
  info.raw = raw.dump();
}

}  // namespace

// The plain OpenAI API rejects fields it does not know, so only its own.
const EngineTraits kOpenaiEngine{
    .kind = EngineKind::openai,
    .name = "openai",
    .aliases = {"generic"},
    .display = "OpenAI-compatible server",
    .neutral_sampling = R"({"temperature": 0, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0})",
    .sampling_object = "",
    .probes = {},
    .recognizes = nullptr,
    .discovery = {{"/v1/models", ""}},
    .read_discovery = openai_read_discovery,
    .generate = openai_only_generate,
};

}  // namespace kvgate::serving
