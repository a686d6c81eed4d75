#pragma once
// Completion responses of OpenAI-compatible engines, streamed (SSE chunks) or whole, turned into
// one shape: the generated tokens, each with its text, its id where the engine gives it, its
// logprob and the top-k alternatives, and the client-side steady-clock time its chunk arrived,
// so TTFT, TPOT and inter-token gaps come from the stream itself; plus the finish reason, the
// usage counts (with prefix-cache hits) and llama-server's timings.
//
// Dialects (ResponseFormat):
//   openai_completions  /v1/completions: choices[0].text; logprobs either OpenAI's
//                       {tokens, token_logprobs, top_logprobs: [{TOKEN: LOGPROB}]} (vLLM writes
//                       TOKEN as "token_id:N" with return_tokens_as_token_ids) or the
//                       chat-style {content: [...]} llama-server uses; choices[0].token_ids
//                       (vLLM return_token_ids); usage; llama-server's timings.
//   openai_chat         /v1/chat/completions: choices[0].delta.content (message.content when not
//                       streamed), logprobs.content[].top_logprobs.
//   llama_completion    llama-server /completion: content, tokens, stop, stop_type,
//                       completion_probabilities[{id, token, logprob, top_logprobs[{id, token,
//                       logprob}]}] (or prob/top_probs with post_sampling_probs, or the older
//                       probs[{tok_str, prob}]), tokens_evaluated/predicted, timings.
//   sglang_generate     SGLang /generate: text (cumulative by default), output_ids,
//                       meta_info with completion_tokens, output_token_logprobs [[logprob, id, text]],
//                       output_top_logprobs, finish_reason {type}, prompt/cached_tokens.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvgate::serving {

using SteadyClock = std::chrono::steady_clock;

struct TokenLogprob {
  std::string text;
  std::optional<int32_t> id;  // absent where the engine gives only text
  double logprob = 0.0;
};

struct StreamedToken {
  std::string text;  // may be empty: a chunk of several tokens carries its text on the first
  std::optional<int32_t> id;
  std::optional<double> logprob;
  std::vector<TokenLogprob> top;  // best first, as many as the engine returned
  SteadyClock::time_point received;
};

struct Usage {
  std::optional<int64_t> prompt_tokens;
  std::optional<int64_t> completion_tokens;
  std::optional<int64_t> cached_tokens;  // prompt tokens served from the prefix cache
};

// llama-server's per-request timings (server_slot_stats in tools/server/server-common.cpp).
struct EngineTimings {
  std::optional<int64_t> cache_n;      // prompt tokens reused from the slot's cache
  std::optional<int64_t> prompt_n;     // prompt tokens processed
  std::optional<int64_t> predicted_n;  // tokens generated
  std::optional<double> prompt_ms, predicted_ms;
};

struct Completion {
  std::vector<StreamedToken> tokens;
  std::string text;           // every text delta, concatenated
  std::string finish_reason;  // "stop", "length", ... ("" when the engine did not say)
  Usage usage;
  std::optional<EngineTimings> timings;
  bool finished = false;  // a terminal marker arrived: [DONE], a finish reason or stop: true
  size_t chunks = 0;

  // usage.cached_tokens, else timings.cache_n.
  std::optional<int64_t> cached_prompt_tokens() const;
};

enum class ResponseFormat { openai_completions, openai_chat, llama_completion, sglang_generate };

// Folds chunks (or one whole response) into a Completion. Every malformed chunk, an "error"
// object from the engine, or an SGLang abort is a kvgate::Error (input) whose text says what
// was wrong; the HTTP client turns it into a failed request naming the endpoint.
class CompletionParser {
 public:
  explicit CompletionParser(ResponseFormat format);
  // One SSE event's data: a JSON chunk, or "[DONE]".
  void on_event(std::string_view data, SteadyClock::time_point received);
  // A whole (non-streamed) JSON response.
  void on_response(std::string_view body, SteadyClock::time_point received);
  // The stream is over: throws unless a terminal marker arrived (a stream the server closed
  // cleanly mid-answer must not pass as a short answer).
  Completion finish();
  const Completion& partial() const { return out_; }

 private:
  void chunk(std::string_view json_text, SteadyClock::time_point received, bool whole);
  ResponseFormat format_;
  Completion out_;
  std::string sglang_text_;  // SGLang's cumulative text so far
  bool done_ = false;
};

// The streaming path in one object: SSE framing plus a CompletionParser, fed raw body bytes.
class CompletionStream {
 public:
  explicit CompletionStream(ResponseFormat format);
  ~CompletionStream();
  CompletionStream(CompletionStream&&) noexcept;
  CompletionStream& operator=(CompletionStream&&) noexcept;
  void feed(std::string_view bytes, SteadyClock::time_point received);
  Completion finish();
  const Completion& partial() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "token_id:123" -> 123 (vLLM's return_tokens_as_token_ids spelling); nullopt otherwise.
std::optional<int32_t> token_id_from_text(std::string_view text);

}  // namespace kvgate::serving
