#include "serving/completion.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>

#include "core/error.h"

namespace kvgate::serving {
namespace {

using std::chrono::milliseconds;

SteadyClock::time_point at(int ms) { return SteadyClock::time_point(milliseconds(ms)); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CompletionStream, VllmChunksWithTokenIdsTopLogprobsUsageAndDone) {
  CompletionStream s(ResponseFormat::openai_completions);
  s.feed(
      "data: {\"choices\":[{\"index\":0,\"text\":\"Hi\",\"logprobs\":{\"tokens\":[\"token_id:17\"],"
      "\"token_logprobs\":[-0.25],\"top_logprobs\":[{\"token_id:9\":-2.0,\"token_id:17\":-0.25}]},"
      "\"finish_reason\":null,\"token_ids\":[17]}]}\n\n",
      at(10));
  s.feed("data: {\"choices\":[{\"index\":0,\"text\":\" there\",\"logprobs\":{\"tokens\":[\"token_id:5\"],", at(20));
  s.feed("\"token_logprobs\":[-1.5],\"top_logprobs\":[{\"token_id:5\":-1.5}]},\"finish_reason\":\"length\"}]}\n\n", at(25));
  s.feed(
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":2,"
      "\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n",
      at(30));
  const Completion c = s.finish();
  ASSERT_EQ(c.tokens.size(), 2u);
  EXPECT_EQ(c.text, "Hi there");
  EXPECT_EQ(c.tokens[0].text, "Hi");
  EXPECT_EQ(c.tokens[0].id, 17);
  EXPECT_DOUBLE_EQ(*c.tokens[0].logprob, -0.25);
  ASSERT_EQ(c.tokens[0].top.size(), 2u);
  EXPECT_EQ(c.tokens[0].top[0].id, 17);  // best first, whatever order the object had
  EXPECT_EQ(c.tokens[0].top[1].id, 9);
  EXPECT_EQ(c.tokens[0].received, at(10));
  EXPECT_EQ(c.tokens[1].received, at(25));  // the time its chunk completed
  EXPECT_EQ(c.finish_reason, "length");
  EXPECT_EQ(c.usage.prompt_tokens, 12);
  EXPECT_EQ(c.usage.completion_tokens, 2);
  EXPECT_EQ(c.cached_prompt_tokens(), 8);
  EXPECT_TRUE(c.finished);
}

TEST(CompletionStream, OpenAiTextKeysAndChunksWithoutLogprobs) {
  CompletionStream s(ResponseFormat::openai_completions);
  s.feed("data: {\"choices\":[{\"text\":\"a\",\"logprobs\":{\"tokens\":[\"a\"],\"token_logprobs\":[-0.1],"
         "\"top_logprobs\":[{\"a\":-0.1,\"b\":-3}]}}]}\n\n",
         at(1));
  s.feed("data: {\"choices\":[{\"text\":\"b\",\"finish_reason\":null}]}\n\n", at(2));
  s.feed("data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", at(3));
  const Completion c = s.finish();
  ASSERT_EQ(c.tokens.size(), 2u);  // an empty final delta is not a token
  EXPECT_FALSE(c.tokens[0].top[0].id.has_value());
  EXPECT_EQ(c.tokens[0].top[0].text, "a");
  EXPECT_FALSE(c.tokens[1].logprob.has_value());
  EXPECT_EQ(c.finish_reason, "stop");
}

TEST(CompletionStream, ChatDeltasAndContentLogprobs) {
  CompletionStream s(ResponseFormat::openai_chat);
  s.feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", at(1));
  s.feed("data: {\"choices\":[{\"delta\":{\"content\":\"Yes\"},\"logprobs\":{\"content\":[{\"token\":\"Yes\",\"logprob\":-0.5,"
         "\"bytes\":[89,101,115],\"top_logprobs\":[{\"token\":\"No\",\"logprob\":-1.2},{\"token\":\"Yes\",\"logprob\":-0.5}]}]}}]}\n\n",
         at(2));
  s.feed("data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n", at(3));
  const Completion c = s.finish();
  ASSERT_EQ(c.tokens.size(), 1u);
  EXPECT_EQ(c.tokens[0].text, "Yes");
  EXPECT_DOUBLE_EQ(*c.tokens[0].logprob, -0.5);
  ASSERT_EQ(c.tokens[0].top.size(), 2u);
  EXPECT_EQ(c.tokens[0].top[0].text, "Yes");
}

TEST(CompletionStream, LlamaServerChunksAndFinalTimings) {
  CompletionStream s(ResponseFormat::llama_completion);
  s.feed("data: {\"index\":0,\"content\":\" 4\",\"tokens\":[604],\"stop\":false,\"completion_probabilities\":[{\"id\":604,"
         "\"token\":\" 4\",\"bytes\":[32,52],\"logprob\":-0.1,\"top_logprobs\":[{\"id\":604,\"token\":\" 4\",\"bytes\":[],"
         "\"logprob\":-0.1},{\"id\":605,\"token\":\" 5\",\"bytes\":[],\"logprob\":-2.4}]}]}\n\n",
         at(5));
  s.feed("data: {\"index\":0,\"content\":\"\",\"tokens\":[],\"stop\":true,\"stop_type\":\"limit\",\"tokens_evaluated\":30,"
         "\"tokens_predicted\":1,\"timings\":{\"cache_n\":29,\"prompt_n\":1,\"prompt_ms\":3.5,\"predicted_n\":1,\"predicted_ms\":4}}\n\n",
         at(6));
  const Completion c = s.finish();  // llama-server ends /completion streams without [DONE]
  ASSERT_EQ(c.tokens.size(), 1u);
  EXPECT_EQ(c.tokens[0].id, 604);
  EXPECT_EQ(c.tokens[0].top[1].id, 605);
  EXPECT_EQ(c.finish_reason, "length");
  EXPECT_EQ(c.usage.prompt_tokens, 30);
  ASSERT_TRUE(c.timings.has_value());
  EXPECT_EQ(c.timings->prompt_n, 1);
  EXPECT_EQ(c.cached_prompt_tokens(), 29);
}

TEST(CompletionStream, LlamaServerPostSamplingAndOldProbsShapes) {
  CompletionParser post(ResponseFormat::llama_completion);
  post.on_response("{\"content\":\"x\",\"stop\":true,\"stop_type\":\"eos\",\"completion_probabilities\":[{\"id\":3,\"token\":\"x\","
                   "\"prob\":0.5,\"top_probs\":[{\"id\":3,\"token\":\"x\",\"prob\":0.5},{\"id\":4,\"token\":\"y\",\"prob\":0.25}]}]}",
                   at(1));
  const Completion a = post.finish();
  ASSERT_EQ(a.tokens.size(), 1u);
  EXPECT_NEAR(*a.tokens[0].logprob, std::log(0.5), 1e-12);
  EXPECT_NEAR(a.tokens[0].top[1].logprob, std::log(0.25), 1e-12);
  EXPECT_EQ(a.finish_reason, "stop");

  CompletionParser old(ResponseFormat::llama_completion);
  old.on_response("{\"content\":\"ab\",\"stop\":true,\"completion_probabilities\":[{\"content\":\"a\",\"probs\":[{\"tok_str\":\"a\","
                  "\"prob\":0.9}]},{\"content\":\"b\",\"probs\":[{\"tok_str\":\"c\",\"prob\":0.1},{\"tok_str\":\"b\",\"prob\":0.8}]}]}",
                  at(1));
  const Completion b = old.finish();
  ASSERT_EQ(b.tokens.size(), 2u);
  EXPECT_EQ(b.tokens[1].top[0].text, "b");
  EXPECT_EQ(b.text, "ab");
}

TEST(CompletionStream, SglangCumulativeAndIncrementalStreamsAgree) {
  const std::string cumulative =
      "data: {\"text\":\"A\",\"meta_info\":{\"completion_tokens\":1,\"prompt_tokens\":4,\"output_token_logprobs\":[[-0.1,7,null]],"
      "\"output_top_logprobs\":[[[-0.1,7,null],[-2.5,8,null]]],\"finish_reason\":null}}\n\n"
      "data: {\"text\":\"AB\",\"meta_info\":{\"completion_tokens\":2,\"prompt_tokens\":4,\"cached_tokens\":3,"
      "\"output_token_logprobs\":[[-0.1,7,null],[-0.3,9,null]],\"output_top_logprobs\":[[[-0.1,7,null]],[[-0.3,9,null]]],"
      "\"finish_reason\":{\"type\":\"length\",\"length\":2}}}\n\ndata: [DONE]\n\n";
  const std::string incremental =
      "data: {\"text\":\"A\",\"meta_info\":{\"completion_tokens\":1,\"prompt_tokens\":4,\"output_token_logprobs\":[[-0.1,7,null]],"
      "\"output_top_logprobs\":[[[-0.1,7,null],[-2.5,8,null]]],\"finish_reason\":null}}\n\n"
      "data: {\"text\":\"B\",\"meta_info\":{\"completion_tokens\":2,\"prompt_tokens\":4,\"cached_tokens\":3,"
      "\"output_token_logprobs\":[[-0.3,9,null]],\"output_top_logprobs\":[[[-0.3,9,null]]],"
      "\"finish_reason\":{\"type\":\"length\",\"length\":2}}}\n\ndata: [DONE]\n\n";
  for (const std::string& stream : {cumulative, incremental}) {
    CompletionStream s(ResponseFormat::sglang_generate);
    s.feed(stream, at(1));
    const Completion c = s.finish();
    ASSERT_EQ(c.tokens.size(), 2u);
    EXPECT_EQ(c.text, "AB");
    EXPECT_EQ(c.tokens[0].id, 7);
    EXPECT_EQ(c.tokens[0].top.size(), 2u);
    EXPECT_EQ(c.tokens[1].id, 9);
    EXPECT_DOUBLE_EQ(*c.tokens[1].logprob, -0.3);
    EXPECT_EQ(c.finish_reason, "length");
    EXPECT_EQ(c.cached_prompt_tokens(), 3);
  }
}

TEST(CompletionStream, SglangIdsWithoutLogprobsComeFromOutputIds) {
  CompletionStream s(ResponseFormat::sglang_generate);
  s.feed("data: {\"text\":\"x\",\"output_ids\":[41],\"meta_info\":{\"completion_tokens\":1,\"finish_reason\":null}}\n\n"
         "data: {\"text\":\"xy\",\"output_ids\":[41,42],\"meta_info\":{\"completion_tokens\":2,"
         "\"finish_reason\":{\"type\":\"stop\",\"matched\":2}}}\n\ndata: [DONE]\n\n",
         at(1));
  const Completion c = s.finish();
  ASSERT_EQ(c.tokens.size(), 2u);
  EXPECT_EQ(c.tokens[0].id, 41);
  EXPECT_EQ(c.tokens[1].id, 42);
  EXPECT_EQ(c.tokens[1].text, "y");
  EXPECT_EQ(c.finish_reason, "stop");
}

TEST(CompletionStream, FailuresSayWhatWasWrong) {
  {
    CompletionStream s(ResponseFormat::openai_completions);
    s.feed("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", at(1));
    const std::string e = error_of([&] { s.feed("data: {\"choices\": [{\"text\n\n", at(2)); });
    EXPECT_NE(e.find("chunk 1 is not valid JSON"), std::string::npos) << e;
  }
  {
    CompletionStream s(ResponseFormat::openai_completions);
    const std::string e = error_of([&] { s.feed("data: {\"error\":{\"message\":\"out of memory\",\"code\":500}}\n\n", at(1)); });
    EXPECT_NE(e.find("out of memory"), std::string::npos) << e;
  }
  {
    CompletionStream s(ResponseFormat::openai_completions);
    s.feed("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", at(1));
    const std::string e = error_of([&] { s.finish(); });
    EXPECT_NE(e.find("without a terminal marker"), std::string::npos) << e;
    EXPECT_NE(e.find("after 1 tokens"), std::string::npos) << e;
  }
  {
    CompletionStream s(ResponseFormat::sglang_generate);
    const std::string e = error_of([&] {
      s.feed("data: {\"text\":\"\",\"meta_info\":{\"completion_tokens\":0,"
             "\"finish_reason\":{\"type\":\"abort\",\"message\":\"too long\"}}}\n\n",
             at(1));
    });
    EXPECT_NE(e.find("aborted the request: too long"), std::string::npos) << e;
  }
  {
    CompletionStream s(ResponseFormat::llama_completion);
    const std::string e = error_of([&] { s.feed("data: [1,2]\n\n", at(1)); });
    EXPECT_NE(e.find("not a JSON object"), std::string::npos) << e;
  }
}

TEST(CompletionStream, NothingAfterDoneCounts) {
  CompletionStream s(ResponseFormat::openai_completions);
  s.feed("data: {\"choices\":[{\"text\":\"a\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
         "data: {\"choices\":[{\"text\":\"zzz\"}]}\n\n",
         at(1));
  EXPECT_EQ(s.finish().text, "a");
}

TEST(CompletionParser, WholeOpenAiResponseWithSeveralTokens) {
  CompletionParser p(ResponseFormat::openai_completions);
  p.on_response("{\"choices\":[{\"text\":\"ab\",\"logprobs\":{\"tokens\":[\"token_id:1\",\"token_id:2\"],\"token_logprobs\":[-1,-2],"
                "\"top_logprobs\":[{\"token_id:1\":-1},{\"token_id:2\":-2}]},\"finish_reason\":\"length\"}],"
                "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}",
                at(1));
  const Completion c = p.finish();
  ASSERT_EQ(c.tokens.size(), 2u);
  EXPECT_EQ(c.tokens[0].text, "ab");  // one chunk's text goes on its first token when ids replace texts
  EXPECT_EQ(c.tokens[1].text, "");
  EXPECT_EQ(c.tokens[1].id, 2);
  EXPECT_EQ(c.usage.completion_tokens, 2);
}

TEST(TokenIdFromText, OnlyTheVllmSpelling) {
  EXPECT_EQ(token_id_from_text("token_id:0"), 0);
  EXPECT_EQ(token_id_from_text("token_id:49151"), 49151);
  EXPECT_FALSE(token_id_from_text("token_id:").has_value());
  EXPECT_FALSE(token_id_from_text("token_id:-1").has_value());
  EXPECT_FALSE(token_id_from_text("token_id:99999999999").has_value());
  EXPECT_FALSE(token_id_from_text("hello").has_value());
}

}  // namespace
}  // namespace kvgate::serving
