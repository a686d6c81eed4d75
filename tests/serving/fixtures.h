#pragma once
// Engine fixtures: one HTTP exchange of a real engine per file, request and complete response
// body, written from the engine's released code path (the file's comment names the release and
// the source lines) rather than from kvgate's reading of it. The fake server serves them
// (FakeServerOptions::fixtures), the adapter tests parse them.
//
// File format (tests/serving/fixtures/<engine>/<case>.http):
//   # comment lines: release, source file:line, what the case shows
//   > METHOD PATH
//   > request body, JSON, on one or more '>' lines (none for a GET)
//   < STATUS CONTENT-TYPE
//   the response body, byte for byte, to the end of the file (an SSE stream keeps its blank
//   lines; a JSON body its one line)
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvgate::testing {

struct Fixture {
  std::string file;     // path, for messages
  std::string comment;  // the '#' lines, without the '#'
  std::string method, path;
  nlohmann::json request;  // null for a request without a body
  int status = 200;
  std::string content_type;
  std::string body;
};

// Throws std::runtime_error naming the file and line for a malformed fixture.
Fixture load_fixture(const std::string& path);
// tests/serving/fixtures/`name` (e.g. "sglang/score.http").
Fixture fixture(const std::string& name);
// Every fixture of one engine's directory, sorted by file name.
std::vector<Fixture> engine_fixtures(const std::string& engine);

// The SSE events of a streamed body: each "data: ..." payload, in order.
std::vector<std::string> sse_payloads(const std::string& body);

}  // namespace kvgate::testing
