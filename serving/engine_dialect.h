#pragma once
// What the engines' own files (serving/engine_<name>.cc) share: reading JSON answers, the
// OpenAI /v1/completions body that vLLM and the plain OpenAI API both take, and the sampling
// pins. Private to serving/; the rest of kvgate sees serving/adapters.h and
// serving/engine_traits.h.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/adapters.h"
#include "serving/engine_traits.h"

namespace kvgate::serving {

// Each engine's entry, defined next to its dialect; engine_traits.cc lists them.
extern const EngineTraits kVllmEngine;
extern const EngineTraits kSglangEngine;
extern const EngineTraits kLlamaServerEngine;
extern const EngineTraits kOpenaiEngine;

namespace dialect {

using nlohmann::json;

// A request to `path` whose answer is read as `format`; the body is set by the caller.
EngineRequest post(const char* path, ResponseFormat format, bool stream);

json token_array(const std::vector<int32_t>& tokens);
// The prompt as ids, or as text where the request has no ids.
json prompt_of(const GenerateRequest& r);
// `traits`' neutral sampling fields (EngineTraits::neutral_sampling), written over whatever
// `body` holds, where the engine reads them (EngineTraits::sampling_object).
void pin_sampling(const EngineTraits& traits, json& body);
// The body as sent: pinned, then serialized.
std::string pinned_body(const EngineTraits& traits, json body);

// `what`: "the response is not JSON (...)" as an input error.
json parse_json(const std::string& body, const std::string& what);
std::optional<int32_t> id_of(const json& v);
std::optional<int32_t> id_from_key(const std::string& key);  // "1234" -> 1234
void best_first(std::vector<TokenLogprob>& top);

const json* get(const json& obj, const char* key);
std::string str_at(const json& obj, const char* key);  // "" unless a string
std::optional<int64_t> int_at(const json& obj, const char* key);

// POST /v1/completions for greedy generation, as the OpenAI API takes it (vLLM adds its own
// fields to the body).
EngineRequest openai_generate(const std::string& model, const GenerateRequest& r, json& body);
// GET /v1/models: the served model's id and, where the server says it, max_model_len.
void read_openai_models(const json& answer, EngineInfo& info);
// For an engine that can report its context length: a note when discovery did not learn it.
void note_missing_context(EngineInfo& info);

}  // namespace dialect
}  // namespace kvgate::serving
