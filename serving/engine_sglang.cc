// SGLang: its native /generate with input ids, input logprobs for span scoring, discovery
// through /server_info, /model_info and /v1/models.
#include "core/error.h"
#include "serving/engine_dialect.h"

namespace kvgate::serving {

namespace {

using namespace dialect;

EngineRequest sglang_generate(const EngineTraits& self, const std::string&, const GenerateRequest& r) {
  EngineRequest out = post("/generate", ResponseFormat::sglang_generate, r.stream);
  json body;
  if (r.prompt_tokens.empty()) body["text"] = r.prompt_text;
  else body["input_ids"] = token_array(r.prompt_tokens);
  body["sampling_params"] = {{"max_new_tokens", r.max_tokens}, {"skip_special_tokens", false}};
  if (r.ignore_eos) body["sampling_params"]["ignore_eos"] = true;
  if (r.top_logprobs > 0) {
    body["return_logprob"] = true;
    body["top_logprobs_num"] = r.top_logprobs;
    body["logprob_start_len"] = -1;  // output tokens only
  }
  body["stream"] = r.stream;
  out.body = pinned_body(self, std::move(body));
  return out;
}

std::vector<EngineRequest> sglang_score(const EngineTraits& self, const std::string&, const ScoreRequest& r) {
  std::vector<int32_t> prompt = r.context;
  prompt.insert(prompt.end(), r.span.begin(), r.span.end());
  json body;
  body["input_ids"] = token_array(prompt);
  // SGLang's input logprobs are the raw log-softmax whatever the sampling
  // (layers/logprob_processor.py); the one sampled token does not matter here.
  body["sampling_params"] = {{"max_new_tokens", 1}};
  body["return_logprob"] = true;
  // One position early: SGLang leaves the row at logprob_start_len unscored
  // (sglang_parse_score), so the context's last token stands there and span[0] is row 1.
  body["logprob_start_len"] = static_cast<int64_t>(r.context.size()) - 1;
  body["top_logprobs_num"] = r.top_logprobs;
  body["stream"] = false;
  return {{"POST", "/generate", pinned_body(self, std::move(body)), ResponseFormat::sglang_generate, false}};
}

// meta_info.input_token_logprobs[i] = [logprob, id, text] for prompt position
// logprob_start_len + i, input_top_logprobs[i] = [[logprob, id, text], ...]. The row at
// logprob_start_len itself is never scored: SGLang returns [None] + the logprobs of positions
// logprob_start_len + 1 .. end, ids from logprob_start_len on, and a null top list first
// (managers/scheduler_components/logprob_result_processor.py:26-84). So kvgate asks from the
// context's last token, checks that dropped row names it, and reads the span from row 1.
ScoreResult sglang_parse_score(const ScoreRequest& r, const std::vector<std::string>& bodies) {
  if (bodies.size() != 1) throw_internal_error("SGLang scoring expects one body");
  json j = parse_json(bodies[0], "SGLang /generate");
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

// SGLang's spellings of a model dtype that resolve "auto" (arg_groups/fields/model.py:160-176).
bool names_a_dtype(const std::string& dtype) { return !dtype.empty() && dtype != "auto"; }

void sglang_read_discovery(const DiscoveryAnswers& answers, EngineInfo& info) {
  json raw = json::object();
  for (const auto& [path, body] : answers) {
    const json& j = raw[path] = parse_json(body, "GET " + path);
    if (path == "/v1/models") {
      read_openai_models(j, info);
    } else if (path == "/server_info" || path == "/get_server_info") {
      // The resolved server args plus the scheduler's info (utils/common.py:3584-3593).
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
        const json pinned = json::parse(kSglangEngine.neutral_sampling);
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
  note_missing_context(info);
  if (info.kv_cache_dtype.empty()) info.notes.push_back("it reports no kv_cache_dtype: the stated KV config stands unchecked");
}

// /server_info (or the older /get_server_info) with SGLang's fields; vLLM serves /server_info
// too, with dev routes on, as {"vllm_config": ...}.
bool sglang_recognizes(std::string_view, const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  return j.is_object() && !j.contains("vllm_config") && (j.contains("kv_cache_dtype") || j.contains("model_path"));
}

}  // namespace

// SGLang's top_k -1 is the whole vocabulary (sampling/sampling_params.py:249-250); temperature
// 0 becomes top_k 1. Its input logprobs are raw whatever the temperature.
const EngineTraits kSglangEngine{
    .kind = EngineKind::sglang,
    .name = "sglang",
    .aliases = {},
    .display = "SGLang",
    .neutral_sampling = R"({"temperature": 0, "top_p": 1, "top_k": -1, "min_p": 0, "repetition_penalty": 1,
        "presence_penalty": 0, "frequency_penalty": 0, "min_new_tokens": 0})",
    .sampling_object = "sampling_params",
    .probes = {"/server_info", "/get_server_info"},
    .probe_order = 2,
    .recognizes = sglang_recognizes,
    // /get_server_info and /get_model_info are deprecated aliases that log a warning per call
    // (entrypoints/http_server.py:802-809, 853-860); /v1/models carries the resolved context
    // length (max_model_len, http_server.py:2005) that /server_info leaves null unless the
    // server was started with --context-length.
    .discovery = {{"/server_info", "/get_server_info"}, {"/model_info", "/get_model_info"}, {"/v1/models", ""}},
    .read_discovery = sglang_read_discovery,
    .kv_dtype_where = "/server_info kv_cache_dtype",
    .auto_means = "the model's dtype (its dtype field when not auto)",
    // SGLang gives an FP8 checkpoint (kv_cache_quant_algo FP8) an fp8_e4m3 cache in the model
    // runner (mem_cache/kv_cache_dtype.py:49-57) while /server_info keeps the launch value, so
    // kvgate cannot tell it from the model's dtype and holds "auto" to the latter.
    .auto_caveat = "SGLang also runs an FP8 checkpoint's fp8_e4m3 cache under auto without reporting it: start such a "
                   "server with --kv-cache-dtype fp8_e4m3 so that kvgate can see it",
    .cached_tokens_hint = "",
    .generate = sglang_generate,
    .score = sglang_score,
    .parse_score = sglang_parse_score,
};

}  // namespace kvgate::serving
