#pragma once
// Where a serving engine lives and how to talk to it: one EndpointConfig per KV config under
// test. Configs come from `--endpoint NAME=URL[,NAME=URL...]` or from a small JSON file
// (docs/engine-mode.md, "Endpoints"); both are validated here, and a problem is an input error
// (exit 2) naming the flag or the file and the field.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvgate::serving {

// Which request/response dialect an endpoint speaks. `automatic` is resolved by discovery
// (serving/engine_client.h) before any scoring request is sent.
enum class EngineKind { automatic, vllm, sglang, llama_server, openai };

// "auto" or the engine's name in the engine table (serving/engine_traits.h).
std::string engine_kind_name(EngineKind kind);
// "auto", or an engine table name or alias; nullopt otherwise.
std::optional<EngineKind> parse_engine_kind(std::string_view name);

struct Timeouts {
  std::chrono::milliseconds connect{10'000};
  // One attempt, from submission to the last byte, including the wait for the first byte: a
  // long prefill under load is legitimately slow, so this is generous.
  std::chrono::milliseconds total{600'000};
  // The longest silence allowed once the response body has started; a stream that stops
  // mid-answer fails after this, long before `total`.
  std::chrono::milliseconds stall{120'000};
};

struct EndpointConfig {
  std::string name;  // the KV config label it stands for in results, e.g. "fp8"
  std::string url;   // server root, scheme://host[:port][/prefix]; a trailing "/" or "/v1" is dropped
  std::string model;  // the "model" field sent with requests; empty = what discovery reports
  EngineKind kind = EngineKind::automatic;
  std::string api_key_env;  // environment variable holding the API key; empty = no key
  std::vector<std::pair<std::string, std::string>> headers;  // extra request headers
  Timeouts timeouts;
  int max_inflight = 64;  // requests on the wire at once; more wait in the client's queue
  std::string kv;         // the KV config the user states the engine runs ("" = unknown)
};

// Parses the value of `--endpoint`: NAME=URL pairs separated by commas. Names must be unique,
// non-empty and made of letters, digits and "_-./+"; URLs must be http(s). Errors name the flag
// and the offending pair (input error, exit 2).
std::vector<EndpointConfig> parse_endpoint_flag(std::string_view value);

// Reads an endpoints file: {"endpoints": [ {...}, ... ]} or a bare array of such objects.
// Fields: name, url (required); model, engine, api_key_env, headers (object of strings),
// timeout_s, connect_timeout_s, stall_timeout_s (positive numbers), max_inflight (1..100000),
// kv. Unknown fields are errors, so a typo never silently changes a run. Errors read
// "FILE: endpoints[I].FIELD: problem".
std::vector<EndpointConfig> load_endpoints_file(const std::string& path);
std::vector<EndpointConfig> parse_endpoints_json(std::string_view text, const std::string& source);

// The request headers for an endpoint: its configured headers plus
// "Authorization: Bearer KEY" when api_key_env is set. A missing or empty variable is an
// environment error (exit 3) naming the endpoint and the variable, never the value.
std::vector<std::string> request_headers(const EndpointConfig& endpoint);

// The URL with any user:password@ part replaced by "***@", for messages and results.
std::string redact_url(std::string_view url);

}  // namespace kvgate::serving
