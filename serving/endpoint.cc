#include "serving/endpoint.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"

namespace kvgate::serving {

namespace {

using nlohmann::json;

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.' || c == '/' || c == '+';
    if (!ok) return false;
  }
  return true;
}

// Empty when the URL is acceptable, else the problem.
std::string url_problem(std::string_view url) {
  size_t rest = 0;
  if (url.rfind("http://", 0) == 0) rest = 7;
  else if (url.rfind("https://", 0) == 0) rest = 8;
  else return "must start with http:// or https://";
  if (rest == url.size() || url[rest] == '/' || url[rest] == ':') return "has no host";
  for (char c : url)
    if (static_cast<unsigned char>(c) <= ' ' || c == '"' || c == '<' || c == '>' || c == '\\')
      return "contains a space, control character or quote";
  if (url.find('?') != std::string_view::npos || url.find('#') != std::string_view::npos)
    return "must not carry a query or fragment (paths are appended to it)";
  // The port, if given, must be one a socket can have: libcurl would refuse 99999 only at the
  // first request, as a connection failure (exit 3) rather than the typo it is.
  std::string_view authority = url.substr(rest, url.find('/', rest) - rest);
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) authority.remove_prefix(at + 1);
  const size_t bracket = authority.rfind(']');
  const size_t colon = authority.rfind(':');
  if (colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket)) {
    const std::string_view port = authority.substr(colon + 1);
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535)
      return "has port '" + echo_user_text(port) + "', not a number from 1 to 65535";
  }
  if (authority.empty() || authority.front() == ':') return "has no host";
  return "";
}

// The server root: users often paste the OpenAI base URL (".../v1"), but kvgate appends full
// paths (/v1/completions, /completion, /generate), so a trailing /v1 is dropped.
std::string base_url(std::string url) {
  while (url.size() > 1 && url.back() == '/') url.pop_back();
  if (url.size() > 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  while (url.size() > 1 && url.back() == '/') url.pop_back();
  return url;
}

bool valid_header_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool valid_header_value(std::string_view value) {
  for (char c : value)
    if (c == '\r' || c == '\n' || c == '\0') return false;
  return true;
}

std::chrono::milliseconds seconds_field(const json& v, const std::string& where) {
  if (!v.is_number()) throw_input_error(where + ": must be a number of seconds");
  const double s = v.get<double>();
  if (!std::isfinite(s) || s <= 0 || s > 86400.0 * 7) throw_input_error(where + ": must be > 0 and at most 7 days, got " + v.dump());
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(s * 1000.0)));
}

std::string string_field(const json& v, const std::string& where) {
  if (!v.is_string()) throw_input_error(where + ": must be a string");
  return v.get<std::string>();
}

EndpointConfig parse_one(const json& obj, const std::string& where) {
  if (!obj.is_object()) throw_input_error(where + ": must be an object");
  EndpointConfig e;
  static const std::set<std::string> known = {"name", "url", "model", "engine", "api_key_env", "headers", "timeout_s",
                                              "connect_timeout_s", "stall_timeout_s", "max_inflight", "kv"};
  for (const auto& [key, value] : obj.items())
    if (!known.count(key))
      throw_input_error(where + "." + echo_user_text(key) +
                        ": unknown field (known: name, url, model, engine, api_key_env, headers, timeout_s, "
                        "connect_timeout_s, stall_timeout_s, max_inflight, kv)");
  if (!obj.contains("name")) throw_input_error(where + ".name: missing");
  if (!obj.contains("url")) throw_input_error(where + ".url: missing");
  e.name = string_field(obj["name"], where + ".name");
  if (!valid_name(e.name))
    throw_input_error(where + ".name: \"" + echo_user_text(e.name) + "\" must be 1-128 letters, digits or _-./+");
  e.url = string_field(obj["url"], where + ".url");
  if (const std::string p = url_problem(e.url); !p.empty()) throw_input_error(where + ".url: " + p);
  e.url = base_url(e.url);
  if (obj.contains("model")) e.model = string_field(obj["model"], where + ".model");
  if (obj.contains("engine")) {
    const std::string k = string_field(obj["engine"], where + ".engine");
    const auto kind = parse_engine_kind(k);
    if (!kind)
      throw_input_error(where + ".engine: \"" + echo_user_text(k) + "\" is not one of auto, vllm, sglang, llama-server, openai");
    e.kind = *kind;
  }
  if (obj.contains("api_key_env")) {
    e.api_key_env = string_field(obj["api_key_env"], where + ".api_key_env");
    if (e.api_key_env.empty() || e.api_key_env.find('=') != std::string::npos)
      throw_input_error(where + ".api_key_env: must name an environment variable");
  }
  if (obj.contains("headers")) {
    const json& h = obj["headers"];
    if (!h.is_object()) throw_input_error(where + ".headers: must be an object of header name to string value");
    for (const auto& [name, value] : h.items()) {
      if (!valid_header_name(name))
        throw_input_error(where + ".headers: \"" + echo_user_text(name) + "\" is not a valid header name");
      if (!value.is_string()) throw_input_error(where + ".headers." + echo_user_text(name) + ": must be a string");
      const std::string v = value.get<std::string>();
      if (!valid_header_value(v)) throw_input_error(where + ".headers." + echo_user_text(name) + ": contains a line break");
      e.headers.emplace_back(name, v);
    }
  }
  if (obj.contains("timeout_s")) e.timeouts.total = seconds_field(obj["timeout_s"], where + ".timeout_s");
  if (obj.contains("connect_timeout_s")) e.timeouts.connect = seconds_field(obj["connect_timeout_s"], where + ".connect_timeout_s");
  if (obj.contains("stall_timeout_s")) e.timeouts.stall = seconds_field(obj["stall_timeout_s"], where + ".stall_timeout_s");
  if (obj.contains("max_inflight")) {
    const json& m = obj["max_inflight"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > 100000)
      throw_input_error(where + ".max_inflight: must be an integer in 1..100000");
    e.max_inflight = static_cast<int>(m.get<int64_t>());
  }
  if (obj.contains("kv")) e.kv = string_field(obj["kv"], where + ".kv");
  return e;
}

}  // namespace

std::string engine_kind_name(EngineKind kind) {
  switch (kind) {
    case EngineKind::automatic: return "auto";
    case EngineKind::vllm: return "vllm";
    case EngineKind::sglang: return "sglang";
    case EngineKind::llama_server: return "llama-server";
    case EngineKind::openai: return "openai";
  }
  return "auto";
}

std::optional<EngineKind> parse_engine_kind(std::string_view name) {
  if (name == "auto") return EngineKind::automatic;
  if (name == "vllm") return EngineKind::vllm;
  if (name == "sglang") return EngineKind::sglang;
  if (name == "llama-server" || name == "llama_server" || name == "llama.cpp") return EngineKind::llama_server;
  if (name == "openai" || name == "generic") return EngineKind::openai;
  return std::nullopt;
}

std::vector<EndpointConfig> parse_endpoint_flag(std::string_view value) {
  std::vector<EndpointConfig> out;
  std::set<std::string> names;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = value.find(',', start);
    const std::string_view pair = value.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::string shown = "--endpoint: \"" + echo_user_text(pair) + "\": ";
    const size_t eq = pair.find('=');
    if (eq == std::string_view::npos) throw_input_error(shown + "expected NAME=URL");
    EndpointConfig e;
    e.name = std::string(pair.substr(0, eq));
    e.url = std::string(pair.substr(eq + 1));
    if (!valid_name(e.name)) throw_input_error(shown + "name must be 1-128 letters, digits or _-./+");
    if (const std::string p = url_problem(e.url); !p.empty()) throw_input_error(shown + "URL " + p);
    e.url = base_url(e.url);
    if (!names.insert(e.name).second) throw_input_error(shown + "endpoint name \"" + e.name + "\" is given twice");
    out.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<EndpointConfig> parse_endpoints_json(std::string_view text, const std::string& source) {
  const json doc = parse_json_input(text, source);
  const json* list = &doc;
  std::string prefix = "";
  if (doc.is_object()) {
    for (const auto& [key, value] : doc.items())
      if (key != "endpoints")
        throw_input_error(source + ": " + echo_user_text(key) + ": unknown top-level field (expected \"endpoints\")");
    if (!doc.contains("endpoints")) throw_input_error(source + ": endpoints: missing");
    list = &doc["endpoints"];
    prefix = "endpoints";
  }
  if (!list->is_array() || list->empty())
    throw_input_error(source + ": " + (prefix.empty() ? std::string("top level") : prefix) + ": must be a non-empty array of endpoints");
  std::vector<EndpointConfig> out;
  std::set<std::string> names;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string where = source + ": " + prefix + "[" + std::to_string(i) + "]";
    EndpointConfig e = parse_one((*list)[i], where);
    if (!names.insert(e.name).second) throw_input_error(where + ".name: \"" + e.name + "\" is used by an earlier endpoint");
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<EndpointConfig> load_endpoints_file(const std::string& path) {
  return parse_endpoints_json(read_whole_file(path, kMaxConfigFileBytes), path);
}

std::vector<std::string> request_headers(const EndpointConfig& endpoint) {
  std::vector<std::string> out;
  out.reserve(endpoint.headers.size() + 1);
  for (const auto& [name, value] : endpoint.headers) out.push_back(name + ": " + value);
  if (!endpoint.api_key_env.empty()) {
    const char* key = std::getenv(endpoint.api_key_env.c_str());
    if (key == nullptr || *key == '\0')
      throw_environment_error("endpoint '" + endpoint.name + "' (" + redact_url(endpoint.url) + "): environment variable " +
                              endpoint.api_key_env + " (api_key_env) is not set or empty");
    if (!valid_header_value(key))
      throw_environment_error("endpoint '" + endpoint.name + "': environment variable " + endpoint.api_key_env +
                              " contains a line break");
    out.push_back(std::string("Authorization: Bearer ") + key);
  }
  return out;
}

std::string redact_url(std::string_view url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const size_t host_start = scheme + 3;
  const size_t path = url.find('/', host_start);
  const std::string_view authority = url.substr(host_start, path == std::string_view::npos ? std::string_view::npos : path - host_start);
  const size_t at = authority.rfind('@');
  if (at == std::string_view::npos) return std::string(url);
  return std::string(url.substr(0, host_start)) + "***@" + std::string(url.substr(host_start + at + 1));
}

}  // namespace kvgate::serving
