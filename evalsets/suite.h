#pragma once
// Suites: a named set of eval sets plus the KV configs to compare and the reference config,
// as CI and nightly jobs run them (ci/suites/*.json, format in docs/evalsets.md).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "evalsets/generate.h"
#include "evalsets/item.h"

namespace kvgate::evalsets {

struct SuiteEvalset {
  bool generated = false;
  // generated sets
  std::string domain;
  uint64_t seed = 0;
  size_t n = 0;
  TokenRange tokens;
  std::vector<int> depths_permille;  // long domains only: "depth", a number or a list
  bool sweep = false;                // long domains only: each document as a depth sweep
  // file sets: as written in the suite, and resolved against the suite file's folder
  std::string path;
  std::string resolved_path;
};

struct Suite {
  std::string file;  // where it was loaded from
  std::string name;
  std::string description;
  std::vector<SuiteEvalset> evalsets;
  std::vector<std::string> kv;  // KV config spec strings, checked by the harness (kernels layer)
  std::string ref = "f16";
  nlohmann::json canonical;  // the suite document with defaults filled in, keys sorted
};

// Parses and validates a suite document; problems are input errors naming the file.
Suite parse_suite(const std::string& json_text, const std::string& file);

// A path (contains '/' or ends in ".json") is loaded as is; a bare name is a built-in suite,
// looked up in $KVGATE_SUITES_DIR, next to the binary (../share/kvgate/suites, suites/) and
// in the source tree's ci/suites.
Suite load_suite(const std::string& name_or_path);
std::string find_builtin_suite(const std::string& name);
std::vector<std::string> suite_search_dirs();

// Generates or loads every eval set, in order; item ids must be unique across the suite.
std::vector<EvalItem> materialize_suite(const Suite& suite);

// xxHash64 over the canonical suite document and the materialized items' canonical bytes, so
// any change of configs, seeds, files or generator output changes the hash.
uint64_t suite_hash(const Suite& suite, const std::vector<EvalItem>& items);

}  // namespace kvgate::evalsets
