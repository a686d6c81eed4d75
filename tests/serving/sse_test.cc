#include "serving/sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace kvgate::serving {
namespace {

std::vector<SseEvent> parse_in_pieces(const std::string& stream, const std::vector<size_t>& cuts, bool finish = true) {
  std::vector<SseEvent> events;
  SseParser parser([&](const SseEvent& e) { events.push_back(e); });
  size_t at = 0;
  for (size_t cut : cuts) {
    parser.feed(std::string_view(stream).substr(at, cut - at));
    at = cut;
  }
  parser.feed(std::string_view(stream).substr(at));
  if (finish) parser.finish();
  return events;
}

std::vector<std::string> datas(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) out.push_back(e.data);
  return out;
}

TEST(SseParser, OneEventPerBlankLineWithEveryLineEnding) {
  const std::string lf = "data: a\n\ndata: b\n\n";
  const std::string crlf = "data: a\r\n\r\ndata: b\r\n\r\n";
  const std::string cr = "data: a\r\rdata: b\r\r";
  for (const std::string& s : {lf, crlf, cr}) EXPECT_EQ(datas(parse_in_pieces(s, {})), (std::vector<std::string>{"a", "b"})) << s;
}

TEST(SseParser, EverySplitPointGivesTheSameEvents) {
  const std::string stream =
      ": ping\r\n\r\nevent: message\r\ndata: {\"x\": \"\xed\x95\x9c\"}\r\nid: 7\r\n\r\ndata: one\ndata: two\n\ndata:three\r\rdata: [DONE]\n\n";
  const std::vector<std::string> expected = {"{\"x\": \"\xed\x95\x9c\"}", "one\ntwo", "three", "[DONE]"};
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    EXPECT_EQ(datas(parse_in_pieces(stream, {cut})), expected) << "cut at " << cut;
  }
  // One byte at a time.
  std::vector<size_t> all;
  for (size_t i = 1; i < stream.size(); ++i) all.push_back(i);
  const auto events = parse_in_pieces(stream, all);
  EXPECT_EQ(datas(events), expected);
  EXPECT_EQ(events[0].event, "message");
  EXPECT_EQ(events[0].id, "7");
}

TEST(SseParser, RandomSplitsOfALongStreamAgree) {
  std::string stream;
  std::vector<std::string> expected;
  for (int i = 0; i < 200; ++i) {
    const std::string d = "{\"choices\":[{\"text\":\"tok" + std::to_string(i) + "\"}]}";
    stream += (i % 3 == 0 ? "data: " : "data:") + d + (i % 2 ? "\r\n\r\n" : "\n\n");
    if (i % 17 == 0) stream += ": keep-alive\n\n";
    expected.push_back(d);
  }
  Rng rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<size_t> cuts;
    size_t at = 0;
    while (true) {
      at += 1 + rng.below(40);
      if (at >= stream.size()) break;
      cuts.push_back(at);
    }
    ASSERT_EQ(datas(parse_in_pieces(stream, cuts)), expected) << "trial " << trial;
  }
}

TEST(SseParser, CrAtTheEndOfAPieceDoesNotSplitAnEvent) {
  // "\r" ends one read and "\n" starts the next: one line end, not an extra blank line that
  // would dispatch "a" alone.
  const auto events = parse_in_pieces("data: a\r\ndata: b\r\n\r\n", {8});
  EXPECT_EQ(datas(events), (std::vector<std::string>{"a\nb"}));
}

TEST(SseParser, FieldSyntaxEdges) {
  const auto events = parse_in_pieces("data\n\ndata:  two spaces\n\nretry: 10\nunknown: x\ndata: y\n\nevent: only\n\n", {});
  EXPECT_EQ(datas(events), (std::vector<std::string>{"", " two spaces", "y"}));  // an event without data is dropped
}

TEST(SseParser, FinishDispatchesALastEventWithoutItsBlankLine) {
  std::vector<SseEvent> events;
  SseParser parser([&](const SseEvent& e) { events.push_back(e); });
  parser.feed("data: a\n\ndata: last");
  EXPECT_EQ(events.size(), 1u);
  EXPECT_TRUE(parser.finish());
  EXPECT_EQ(datas(events), (std::vector<std::string>{"a", "last"}));
  EXPECT_FALSE(parser.finish());
}

TEST(SseParser, OverlongLineIsAnInputError) {
  SseParser parser([](const SseEvent&) {}, 64);
  parser.feed(std::string(60, 'x'));
  try {
    parser.feed(std::string(10, 'x'));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("exceeds 64 bytes"), std::string::npos);
  }
}

TEST(SseParser, HandlerExceptionsPropagate) {
  SseParser parser([](const SseEvent&) { throw std::runtime_error("bad chunk"); });
  EXPECT_THROW(parser.feed("data: x\n\n"), std::runtime_error);
}

}  // namespace
}  // namespace kvgate::serving
