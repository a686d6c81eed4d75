#include "tests/serving/fixtures.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kvgate::testing {

namespace {

[[noreturn]] void bad(const std::string& file, size_t line, const std::string& what) {
  throw std::runtime_error(file + ":" + std::to_string(line) + ": " + what);
}

}  // namespace

Fixture load_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read the fixture");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  Fixture f;
  f.file = path;
  std::string request_text;
  size_t at = 0, line = 0;
  bool have_request_line = false;
  while (at < text.size()) {
    const size_t eol = text.find('\n', at);
    if (eol == std::string::npos) bad(path, line + 1, "the file ends before the '<' status line");
    const std::string l = text.substr(at, eol - at);
    at = eol + 1;
    ++line;
    if (l.rfind("#", 0) == 0) {
      f.comment += l.substr(std::min<size_t>(l.size(), 2)) + "\n";
    } else if (l.rfind(">", 0) == 0) {
      const std::string rest = l.substr(std::min<size_t>(l.size(), 2));
      if (!have_request_line) {
        const size_t sp = rest.find(' ');
        if (sp == std::string::npos) bad(path, line, "expected '> METHOD PATH'");
        f.method = rest.substr(0, sp);
        f.path = rest.substr(sp + 1);
        have_request_line = true;
      } else {
        request_text += rest + "\n";
      }
    } else if (l.rfind("<", 0) == 0) {
      if (!have_request_line) bad(path, line, "a status line before the '> METHOD PATH' line");
      const std::string rest = l.substr(std::min<size_t>(l.size(), 2));
      const size_t sp = rest.find(' ');
      if (sp == std::string::npos) bad(path, line, "expected '< STATUS CONTENT-TYPE'");
      f.status = std::stoi(rest.substr(0, sp));
      f.content_type = rest.substr(sp + 1);
      f.body = text.substr(at);
      break;
    } else if (!l.empty()) {
      bad(path, line, "a line outside the comment, request and response parts");
    }
  }
  if (f.content_type.empty()) bad(path, line, "no '<' status line");
  if (!request_text.empty()) {
    try {
      f.request = nlohmann::json::parse(request_text);
    } catch (const nlohmann::json::parse_error& e) {
      bad(path, 0, std::string("the request is not JSON: ") + e.what());
    }
  }
  if (f.content_type == "application/json") {
    // A fixture's JSON body must parse, or the fixture itself is broken, not the code under test.
    try {
      (void)nlohmann::json::parse(f.body);
    } catch (const nlohmann::json::parse_error& e) {
      bad(path, line + 1, std::string("the JSON body does not parse: ") + e.what());
    }
  }
  return f;
}

Fixture fixture(const std::string& name) { return load_fixture(std::string(KVGATE_FIXTURES_DIR) + "/" + name); }

std::vector<Fixture> engine_fixtures(const std::string& engine) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(std::string(KVGATE_FIXTURES_DIR) + "/" + engine))
    if (e.path().extension() == ".http") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  std::vector<Fixture> out;
  for (const std::string& f : files) out.push_back(load_fixture(f));
  return out;
}

std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t eol = std::min(body.find('\n', at), body.size());
    const std::string l = body.substr(at, eol - at);
    at = eol + 1;
    if (l.rfind("data: ", 0) == 0) out.push_back(l.substr(6));
  }
  return out;
}

}  // namespace kvgate::testing
