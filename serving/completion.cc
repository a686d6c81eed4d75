#include "serving/completion.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/sse.h"

namespace kvgate::serving {

namespace {

using nlohmann::json;

std::optional<int64_t> opt_int(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return std::nullopt;
  return it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(it->get<double>());
}

std::optional<double> opt_double(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string opt_string(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A probability from post-sampling output; 0 becomes the most negative double rather than -inf
// so that every logprob stays finite for the arithmetic downstream.
double log_of_prob(double p) { return p > 0 ? std::log(p) : -std::numeric_limits<double>::max(); }

std::optional<int32_t> checked_id(const json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id > INT32_MAX) return std::nullopt;
  return static_cast<int32_t>(id);
}

void sort_best_first(std::vector<TokenLogprob>& top) {
  std::stable_sort(top.begin(), top.end(), [](const TokenLogprob& a, const TokenLogprob& b) { return a.logprob > b.logprob; });
}

// OpenAI completions: {"TOKEN": LOGPROB, ...}; vLLM may spell TOKEN "token_id:N".
std::vector<TokenLogprob> top_from_dict(const json& dict) {
  std::vector<TokenLogprob> top;
  if (!dict.is_object()) return top;
  for (const auto& [token, lp] : dict.items()) {
    if (!lp.is_number()) continue;
    TokenLogprob t;
    t.id = token_id_from_text(token);
    if (!t.id) t.text = token;
    t.logprob = lp.get<double>();
    top.push_back(std::move(t));
  }
  sort_best_first(top);
  return top;
}

// Chat-style and llama-server entries: {token, logprob | prob, id?}.
std::optional<TokenLogprob> entry_from_object(const json& e) {
  if (!e.is_object()) return std::nullopt;
  TokenLogprob t;
  if (const auto lp = opt_double(e, "logprob")) t.logprob = *lp;
  else if (const auto p = opt_double(e, "prob")) t.logprob = log_of_prob(*p);
  else return std::nullopt;
  t.text = opt_string(e, "token");
  if (e.contains("id")) t.id = checked_id(e["id"]);
  if (!t.id) {
    if (const auto id = token_id_from_text(t.text)) {
      t.id = id;
      t.text.clear();
    }
  }
  return t;
}

std::vector<TokenLogprob> top_from_list(const json& list) {
  std::vector<TokenLogprob> top;
  if (!list.is_array()) return top;
  for (const json& e : list)
    if (auto t = entry_from_object(e)) top.push_back(std::move(*t));
  sort_best_first(top);
  return top;
}

// Chat-style logprobs.content[]: one generated token each, with its top_logprobs / top_probs.
std::vector<StreamedToken> tokens_from_content(const json& content, SteadyClock::time_point received) {
  std::vector<StreamedToken> out;
  for (const json& e : content) {
    const auto own = entry_from_object(e);
    if (!own) throw_input_error("logprobs entry without a logprob: " + e.dump().substr(0, 200));
    StreamedToken tok;
    tok.text = own->text;
    tok.id = own->id;
    tok.logprob = own->logprob;
    tok.top = top_from_list(e.contains("top_logprobs") ? e["top_logprobs"] : e.value("top_probs", json::array()));
    tok.received = received;
    out.push_back(std::move(tok));
  }
  return out;
}

// SGLang: [logprob, id, text-or-null].
std::optional<TokenLogprob> entry_from_triple(const json& e) {
  if (!e.is_array() || e.size() < 2 || !e[0].is_number()) return std::nullopt;
  TokenLogprob t;
  t.logprob = e[0].get<double>();
  t.id = checked_id(e[1]);
  if (e.size() > 2 && e[2].is_string()) t.text = e[2].get<std::string>();
  return t;
}

void read_usage(const json& u, Usage& usage) {
  if (!u.is_object()) return;
  if (auto v = opt_int(u, "prompt_tokens")) usage.prompt_tokens = v;
  if (auto v = opt_int(u, "completion_tokens")) usage.completion_tokens = v;
  const auto details = u.find("prompt_tokens_details");
  if (details != u.end() && details->is_object())
    if (auto v = opt_int(*details, "cached_tokens")) usage.cached_tokens = v;
}

void read_timings(const json& t, std::optional<EngineTimings>& out) {
  if (!t.is_object()) return;
  EngineTimings timings;
  timings.cache_n = opt_int(t, "cache_n");
  timings.prompt_n = opt_int(t, "prompt_n");
  timings.predicted_n = opt_int(t, "predicted_n");
  timings.prompt_ms = opt_double(t, "prompt_ms");
  timings.predicted_ms = opt_double(t, "predicted_ms");
  out = timings;
}

[[noreturn]] void engine_error(const json& err) {
  std::string message = err.is_object() ? opt_string(err, "message") : (err.is_string() ? err.get<std::string>() : "");
  if (message.empty()) message = err.dump().substr(0, 300);
  throw_input_error("the engine reported an error in the stream: " + message);
}

void append_tokens(Completion& out, std::vector<StreamedToken>&& tokens, const std::string& chunk_text) {
  // A chunk's text belongs to its tokens together; it goes on the first when their own texts
  // are unknown (vLLM writes ids instead of text with return_tokens_as_token_ids).
  if (!tokens.empty()) {
    bool any_text = false;
    for (const auto& t : tokens) any_text = any_text || !t.text.empty();
    if (tokens.size() == 1 || !any_text) {
      for (auto& t : tokens) t.text.clear();
      tokens.front().text = chunk_text;
    }
  }
  out.text += chunk_text;
  for (auto& t : tokens) out.tokens.push_back(std::move(t));
}

}  // namespace

std::optional<int32_t> token_id_from_text(std::string_view text) {
  constexpr std::string_view kPrefix = "token_id:";
  if (text.substr(0, kPrefix.size()) != kPrefix || text.size() == kPrefix.size() || text.size() > kPrefix.size() + 10)
    return std::nullopt;
  int64_t v = 0;
  for (char c : text.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > INT32_MAX) return std::nullopt;
  return static_cast<int32_t>(v);
}

std::optional<int64_t> Completion::cached_prompt_tokens() const {
  if (usage.cached_tokens) return usage.cached_tokens;
  if (timings && timings->cache_n) return timings->cache_n;
  return std::nullopt;
}

CompletionParser::CompletionParser(ResponseFormat format) : format_(format) {}

void CompletionParser::on_event(std::string_view data, SteadyClock::time_point received) {
  if (done_) return;  // nothing after [DONE] counts
  if (data == "[DONE]") {
    done_ = true;
    out_.finished = true;
    return;
  }
  chunk(data, received, false);
}

void CompletionParser::on_response(std::string_view body, SteadyClock::time_point received) {
  chunk(body, received, true);
  // A whole response is complete by construction: it arrived with its end.
  out_.finished = true;
}

Completion CompletionParser::finish() {
  if (!out_.finished)
    throw_input_error("the stream ended without a terminal marker ([DONE], a finish reason or stop) after " +
                      std::to_string(out_.tokens.size()) + " tokens in " + std::to_string(out_.chunks) + " chunks");
  return std::move(out_);
}

void CompletionParser::chunk(std::string_view json_text, SteadyClock::time_point received, bool whole) {
  const size_t index = out_.chunks++;
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw_input_error("chunk " + std::to_string(index) + " is not valid JSON (" + std::string(e.what()) + "): " +
                      std::string(json_text.substr(0, 120)));
  }
  if (!j.is_object()) throw_input_error("chunk " + std::to_string(index) + " is not a JSON object");
  if (j.contains("error")) engine_error(j["error"]);

  switch (format_) {
    case ResponseFormat::openai_completions:
    case ResponseFormat::openai_chat: {
      if (j.contains("usage")) read_usage(j["usage"], out_.usage);
      if (j.contains("timings")) read_timings(j["timings"], out_.timings);
      const auto choices = j.find("choices");
      if (choices == j.end() || !choices->is_array()) {
        if (!j.contains("usage")) throw_input_error("chunk " + std::to_string(index) + " has neither choices nor usage");
        return;
      }
      if (choices->empty()) return;  // the usage-only chunk of stream_options.include_usage
      const json& c = (*choices)[0];
      std::string text;
      if (format_ == ResponseFormat::openai_chat) {
        const json* msg = c.contains("delta") ? &c["delta"] : (c.contains("message") ? &c["message"] : nullptr);
        if (msg != nullptr && msg->is_object()) text = opt_string(*msg, "content");
      } else {
        text = opt_string(c, "text");
      }
      std::vector<StreamedToken> tokens;
      const auto lp = c.find("logprobs");
      if (lp != c.end() && lp->is_object()) {
        if (lp->contains("content") && (*lp)["content"].is_array()) {
          tokens = tokens_from_content((*lp)["content"], received);
        } else if (lp->contains("tokens") && (*lp)["tokens"].is_array()) {
          const json& toks = (*lp)["tokens"];
          const json empty = json::array();
          const json& lps = lp->contains("token_logprobs") ? (*lp)["token_logprobs"] : empty;
          const json& tops = lp->contains("top_logprobs") ? (*lp)["top_logprobs"] : empty;
          for (size_t i = 0; i < toks.size(); ++i) {
            StreamedToken tok;
            const std::string s = toks[i].is_string() ? toks[i].get<std::string>() : "";
            tok.id = token_id_from_text(s);
            if (!tok.id) tok.text = s;
            if (i < lps.size() && lps[i].is_number()) tok.logprob = lps[i].get<double>();
            if (i < tops.size()) tok.top = top_from_dict(tops[i]);
            tok.received = received;
            tokens.push_back(std::move(tok));
          }
        }
      }
      const auto ids = c.find("token_ids");
      if (ids != c.end() && ids->is_array()) {
        if (tokens.empty()) {
          for (const json& id : *ids) {
            StreamedToken tok;
            tok.id = checked_id(id);
            tok.received = received;
            tokens.push_back(std::move(tok));
          }
        } else if (ids->size() == tokens.size()) {
          for (size_t i = 0; i < tokens.size(); ++i) tokens[i].id = checked_id((*ids)[i]);
        }
      }
      if (tokens.empty() && !text.empty()) {
        // No per-token information: one chunk is one token, as engines stream by default.
        StreamedToken tok;
        tok.received = received;
        tokens.push_back(std::move(tok));
      }
      append_tokens(out_, std::move(tokens), text);
      const auto fr = c.find("finish_reason");
      if (fr != c.end() && fr->is_string()) {
        out_.finish_reason = fr->get<std::string>();
        out_.finished = true;
      }
      return;
    }
    case ResponseFormat::llama_completion: {
      const std::string text = opt_string(j, "content");
      std::vector<StreamedToken> tokens;
      if (j.contains("completion_probabilities") && j["completion_probabilities"].is_array()) {
        const json& probs = j["completion_probabilities"];
        const bool old_style = !probs.empty() && probs[0].is_object() && probs[0].contains("probs");
        if (old_style) {
          for (const json& e : probs) {
            StreamedToken tok;
            tok.text = opt_string(e, "content");
            if (e.contains("probs") && e["probs"].is_array())
              for (const json& p : e["probs"]) {
                if (!p.is_object() || !p.contains("prob")) continue;
                tok.top.push_back({opt_string(p, "tok_str"), std::nullopt, log_of_prob(p["prob"].get<double>())});
              }
            sort_best_first(tok.top);
            tok.received = received;
            tokens.push_back(std::move(tok));
          }
        } else {
          tokens = tokens_from_content(probs, received);
        }
      }
      const auto ids = j.find("tokens");
      if (ids != j.end() && ids->is_array() && !ids->empty()) {
        if (tokens.empty()) {
          for (const json& id : *ids) {
            StreamedToken tok;
            tok.id = checked_id(id);
            tok.received = received;
            tokens.push_back(std::move(tok));
          }
        } else if (ids->size() == tokens.size()) {
          for (size_t i = 0; i < tokens.size(); ++i) tokens[i].id = checked_id((*ids)[i]);
        }
      }
      const bool stop = j.value("stop", false);
      if (tokens.empty() && !text.empty() && !(stop && !whole)) {
        StreamedToken tok;
        tok.received = received;
        tokens.push_back(std::move(tok));
      }
      append_tokens(out_, std::move(tokens), text);
      if (auto v = opt_int(j, "tokens_evaluated")) out_.usage.prompt_tokens = v;
      if (auto v = opt_int(j, "tokens_predicted")) out_.usage.completion_tokens = v;
      if (j.contains("timings")) read_timings(j["timings"], out_.timings);
      if (stop) {
        const std::string type = opt_string(j, "stop_type");
        out_.finish_reason = type == "limit" ? "length" : (type == "eos" || type == "word") ? "stop" : type;
        out_.finished = true;
      }
      return;
    }
    case ResponseFormat::sglang_generate: {
      const auto meta_it = j.find("meta_info");
      if (meta_it == j.end() || !meta_it->is_object())
        throw_input_error("chunk " + std::to_string(index) + " has no meta_info object");
      const json& meta = *meta_it;
      const std::string text = opt_string(j, "text");
      // SGLang streams the whole text so far unless the server runs with incremental output;
      // either way only what extends the text already seen is new.
      std::string delta = text;
      if (text.size() >= sglang_text_.size() && text.compare(0, sglang_text_.size(), sglang_text_) == 0) {
        delta = text.substr(sglang_text_.size());
        sglang_text_ = text;
      } else {
        sglang_text_ += text;
      }
      const int64_t total = opt_int(meta, "completion_tokens").value_or(static_cast<int64_t>(out_.tokens.size()));
      const int64_t fresh = std::max<int64_t>(0, total - static_cast<int64_t>(out_.tokens.size()));
      const json empty = json::array();
      const json& lps = meta.contains("output_token_logprobs") && meta["output_token_logprobs"].is_array()
                            ? meta["output_token_logprobs"] : empty;
      const json& tops = meta.contains("output_top_logprobs") && meta["output_top_logprobs"].is_array()
                             ? meta["output_top_logprobs"] : empty;
      const json& output_ids = j.contains("output_ids") && j["output_ids"].is_array() ? j["output_ids"] : empty;
      std::vector<StreamedToken> tokens;
      for (int64_t i = 0; i < fresh; ++i) {
        StreamedToken tok;
        tok.received = received;
        const int64_t oi = static_cast<int64_t>(output_ids.size()) - fresh + i;
        if (oi >= 0) tok.id = checked_id(output_ids[oi]);
        // Cumulative or incremental lists alike end with the newest tokens.
        const int64_t li = static_cast<int64_t>(lps.size()) - fresh + i;
        if (li >= 0) {
          if (auto e = entry_from_triple(lps[li])) {
            tok.logprob = e->logprob;
            if (e->id) tok.id = e->id;
            tok.text = e->text;
          }
        }
        const int64_t ti = static_cast<int64_t>(tops.size()) - fresh + i;
        if (ti >= 0 && tops[ti].is_array()) {
          for (const json& e : tops[ti])
            if (auto t = entry_from_triple(e)) tok.top.push_back(std::move(*t));
          sort_best_first(tok.top);
        }
        tokens.push_back(std::move(tok));
      }
      append_tokens(out_, std::move(tokens), delta);
      if (auto v = opt_int(meta, "prompt_tokens")) out_.usage.prompt_tokens = v;
      if (auto v = opt_int(meta, "completion_tokens")) out_.usage.completion_tokens = v;
      if (auto v = opt_int(meta, "cached_tokens")) out_.usage.cached_tokens = v;
      const auto fr = meta.find("finish_reason");
      if (fr != meta.end() && !fr->is_null()) {
        const std::string type = fr->is_object() ? opt_string(*fr, "type") : (fr->is_string() ? fr->get<std::string>() : "");
        if (type == "abort") {
          const std::string why = fr->is_object() ? opt_string(*fr, "message") : "";
          throw_input_error("the engine aborted the request" + (why.empty() ? std::string() : ": " + why));
        }
        out_.finish_reason = type;
        out_.finished = true;
      }
      return;
    }
  }
}

struct CompletionStream::Impl {
  explicit Impl(ResponseFormat format)
      : parser(format), sse([this](const SseEvent& e) { parser.on_event(e.data, now); }) {}
  CompletionParser parser;
  SseParser sse;
  SteadyClock::time_point now;
};

CompletionStream::CompletionStream(ResponseFormat format) : impl_(std::make_unique<Impl>(format)) {}
CompletionStream::~CompletionStream() = default;
CompletionStream::CompletionStream(CompletionStream&&) noexcept = default;
CompletionStream& CompletionStream::operator=(CompletionStream&&) noexcept = default;

void CompletionStream::feed(std::string_view bytes, SteadyClock::time_point received) {
  impl_->now = received;
  impl_->sse.feed(bytes);
}

Completion CompletionStream::finish() {
  impl_->sse.finish();
  return impl_->parser.finish();
}

const Completion& CompletionStream::partial() const { return impl_->parser.partial(); }

}  // namespace kvgate::serving
