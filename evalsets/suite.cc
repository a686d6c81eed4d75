#include "evalsets/suite.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"
#include "core/hash.h"

#ifndef KVGATE_SOURCE_SUITES_DIR
#define KVGATE_SOURCE_SUITES_DIR ""
#endif

namespace kvgate::evalsets {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kMaxSuiteBytes = 1u << 20;

[[noreturn]] void fail(const std::string& file, const std::string& problem) { throw_input_error(file + ": " + problem); }

uint64_t require_uint(const json& obj, const char* key, const std::string& where, const std::string& file) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(file, where + "missing field \"" + key + "\"");
  if (!it->is_number_unsigned()) fail(file, where + "\"" + key + "\" must be a non-negative integer");
  return it->get<uint64_t>();
}

std::string require_string(const json& obj, const char* key, const std::string& where, const std::string& file) {
  auto it = obj.find(key);
  if (it == obj.end()) fail(file, where + "missing field \"" + key + "\"");
  if (!it->is_string() || it->get_ref<const std::string&>().empty())
    fail(file, where + "\"" + key + "\" must be a non-empty string");
  return it->get<std::string>();
}

std::string executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

}  // namespace

Suite parse_suite(const std::string& json_text, const std::string& file) {
  if (json_text.size() > kMaxSuiteBytes) fail(file, "larger than 1 MiB; a suite names eval sets, it does not hold them");
  const json j = parse_json_input(json_text, file);
  if (!j.is_object()) fail(file, "a suite must be a JSON object");
  for (const auto& [key, value] : j.items())
    if (key != "name" && key != "description" && key != "evalsets" && key != "kv" && key != "ref")
      fail(file, "unknown field \"" + key + "\"");
  Suite s;
  s.file = file;
  s.name = require_string(j, "name", "", file);
  if (j.contains("description")) {
    if (!j["description"].is_string()) fail(file, "\"description\" must be a string");
    s.description = j["description"].get<std::string>();
  }
  if (j.contains("ref")) s.ref = require_string(j, "ref", "", file);
  auto kv = j.find("kv");
  if (kv == j.end() || !kv->is_array() || kv->empty()) fail(file, "\"kv\" must be a non-empty array of KV config specs");
  std::set<std::string> seen_kv;
  for (size_t i = 0; i < kv->size(); ++i) {
    const json& spec = (*kv)[i];
    if (!spec.is_string() || spec.get_ref<const std::string&>().empty())
      fail(file, "kv[" + std::to_string(i) + "] must be a non-empty string");
    if (!seen_kv.insert(spec.get<std::string>()).second)
      fail(file, "kv[" + std::to_string(i) + "] \"" + spec.get<std::string>() + "\" is listed twice");
    s.kv.push_back(spec.get<std::string>());
  }
  auto sets = j.find("evalsets");
  if (sets == j.end() || !sets->is_array() || sets->empty()) fail(file, "\"evalsets\" must be a non-empty array");
  const fs::path base = fs::path(file).parent_path();
  json canonical_sets = json::array();
  for (size_t i = 0; i < sets->size(); ++i) {
    const json& e = (*sets)[i];
    const std::string where = "evalsets[" + std::to_string(i) + "]: ";
    if (!e.is_object()) fail(file, where + "must be an object");
    SuiteEvalset set;
    if (e.contains("path")) {
      for (const auto& [key, value] : e.items())
        if (key != "path") fail(file, where + "a file eval set has only \"path\" (found \"" + key + "\")");
      set.path = require_string(e, "path", where, file);
      set.resolved_path = fs::path(set.path).is_absolute() ? set.path : (base / set.path).string();
      canonical_sets.push_back({{"path", set.path}});
    } else {
      for (const auto& [key, value] : e.items())
        if (key != "domain" && key != "seed" && key != "n" && key != "tokens_min" && key != "tokens_max" && key != "depth" &&
            key != "sweep")
          fail(file, where + "unknown field \"" + key + "\"");
      set.generated = true;
      set.domain = require_string(e, "domain", where, file);
      if (!is_known_domain(set.domain)) fail(file, where + "unknown domain \"" + set.domain + "\" (" + domain_list_text() + ")");
      set.seed = require_uint(e, "seed", where, file);
      set.n = require_uint(e, "n", where, file);
      if (set.n == 0 || set.n > 100000) fail(file, where + "\"n\" must be between 1 and 100000");
      const bool has_min = e.contains("tokens_min"), has_max = e.contains("tokens_max");
      if (has_min != has_max) fail(file, where + "give both \"tokens_min\" and \"tokens_max\" or neither");
      if (has_min) {
        set.tokens.min = require_uint(e, "tokens_min", where, file);
        set.tokens.max = require_uint(e, "tokens_max", where, file);
        if (const std::string problem = token_range_problem(set.domain, set.tokens); !problem.empty())
          fail(file, where + problem);
      }
      if (e.contains("depth")) {
        if (!is_long_domain(set.domain)) fail(file, where + "\"depth\" applies to the long domains (retrieval, long_*, long)");
        // Thousandths, as --depth takes them: the JSON number's shortest text must parse exactly.
        const json& given = e["depth"];
        const json list = given.is_array() ? given : json::array({given});
        if (list.empty()) fail(file, where + "\"depth\" must be a number from 0 to 1 or a non-empty list of them");
        for (const json& d : list) {
          if (!d.is_number() || d.get<double>() < 0 || d.get<double>() > 1)
            fail(file, where + "\"depth\" must be a number from 0 to 1 or a non-empty list of them");
          int permille = 0;
          try {
            permille = parse_depth(d.dump());
          } catch (const Error&) {
            fail(file, where + "\"depth\" must be a number from 0 to 1 with at most 3 decimals");
          }
          for (const int seen : set.depths_permille)
            if (seen == permille) fail(file, where + "\"depth\" lists " + d.dump() + " twice");
          set.depths_permille.push_back(permille);
        }
      }
      if (e.contains("sweep")) {
        if (!e["sweep"].is_boolean()) fail(file, where + "\"sweep\" must be true or false");
        set.sweep = e["sweep"].get<bool>();
        if (set.sweep && !is_long_domain(set.domain))
          fail(file, where + "\"sweep\" applies to the long domains (retrieval, long_*, long)");
        if (set.sweep && !set.depths_permille.empty())
          fail(file, where + "a sweep scores every depth of each document; it takes no \"depth\"");
      }
      json c = {{"domain", set.domain}, {"seed", set.seed}, {"n", set.n}};
      if (has_min) {
        c["tokens_min"] = set.tokens.min;
        c["tokens_max"] = set.tokens.max;
      }
      // One depth stays a number, so the hash of a suite written before lists is unchanged.
      if (set.depths_permille.size() == 1) c["depth"] = set.depths_permille[0] / 1000.0;
      if (set.depths_permille.size() > 1) {
        c["depth"] = json::array();
        for (const int d : set.depths_permille) c["depth"].push_back(d / 1000.0);
      }
      if (set.sweep) c["sweep"] = true;
      canonical_sets.push_back(c);
    }
    s.evalsets.push_back(std::move(set));
  }
  s.canonical = {{"name", s.name}, {"evalsets", canonical_sets}, {"kv", s.kv}, {"ref", s.ref}};
  return s;
}

std::vector<std::string> suite_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("KVGATE_SUITES_DIR"); env && *env) dirs.push_back(env);
  const std::string exe = executable_dir();
  if (!exe.empty()) {
    dirs.push_back(exe + "/../share/kvgate/suites");
    dirs.push_back(exe + "/suites");
  }
  if (*KVGATE_SOURCE_SUITES_DIR) dirs.push_back(KVGATE_SOURCE_SUITES_DIR);
  return dirs;
}

std::string find_builtin_suite(const std::string& name) {
  std::string searched;
  for (const std::string& dir : suite_search_dirs()) {
    const std::string candidate = dir + "/" + name + ".json";
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate;
    searched += (searched.empty() ? "" : ", ") + dir;
  }
  throw_usage_error("no built-in suite \"" + echo_user_text(name) + "\" (looked in " + (searched.empty() ? "nothing" : searched) + ")");
}

Suite load_suite(const std::string& name_or_path) {
  const bool is_path = name_or_path.find('/') != std::string::npos ||
                       (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  const std::string path = is_path ? name_or_path : find_builtin_suite(name_or_path);
  std::error_code ec;
  if (!fs::exists(path, ec)) throw_input_error(path + ": no such suite file");
  // A suite names eval sets, it does not hold them: 1 MiB is plenty.
  return parse_suite(read_whole_file(path, kMaxSuiteBytes), path);
}

std::vector<EvalItem> materialize_suite(const Suite& suite) {
  std::vector<EvalItem> items;
  std::map<std::string, std::string> origin;  // id -> which eval set produced it
  for (size_t i = 0; i < suite.evalsets.size(); ++i) {
    const SuiteEvalset& set = suite.evalsets[i];
    std::vector<EvalItem> part;
    if (set.generated) {
      part = generate(GenerateOptions{set.domain, set.seed, set.n, set.tokens, set.depths_permille, set.sweep});
    } else {
      part = load_items(set.resolved_path);
    }
    const std::string where = "evalsets[" + std::to_string(i) + "]";
    for (EvalItem& item : part) {
      auto [it, inserted] = origin.emplace(item.id, where);
      if (!inserted)
        fail(suite.file, where + " and " + it->second + " both have an item with id \"" + item.id + "\"");
      items.push_back(std::move(item));
    }
  }
  return items;
}

uint64_t suite_hash(const Suite& suite, const std::vector<EvalItem>& items) {
  const std::string bytes = suite.canonical.dump() + "\n" + hex_u64(evalset_hash(items)) + "\n";
  return xxhash64(bytes);
}

}  // namespace kvgate::evalsets
