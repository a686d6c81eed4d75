#pragma once
// Stored answers as a person reads them: per item and turn, every config's greedy answer beside
// the reference config's, where it first differs, and the item's gold answer. `kvgate runs show
// --answers`, the report's "answers that changed" and the gate report's links all read these.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/report/config_labels.h"
#include "results/stored_run.h"

namespace kvgate::harness {

struct ConfigAnswer {
  std::string spec;
  std::string label;  // as the user typed the config: what the text shows
  results::ConfigRole role = results::ConfigRole::candidate;
  std::optional<std::string> text;  // nullopt: not generated, or a run made before answers were kept
  std::optional<int64_t> tokens;
  std::optional<int64_t> divergence;   // token index of the first difference from the reference's answer
  std::optional<size_t> text_divergence;  // the same as a byte offset into `text` (scoring::first_text_divergence)
  std::optional<bool> gold_match;      // the item's last turn only
};

struct TurnAnswers {
  std::string item_key, domain;
  int64_t turn_index = 0;
  bool last_turn = false;
  std::optional<std::string> gold;  // the item's gold answer, shown on its last turn
  std::vector<ConfigAnswer> answers;  // the reference first, then the run's configs in order
  // Whether `spec`'s answer (any candidate's, for "") differs from the reference's.
  bool changed(const std::string& spec = "") const;
};

struct AnswersFilter {
  bool changed_only = false;
  std::string config;  // canonical spec; "" = every config
  std::string domain;  // "" = every domain
};

struct RunAnswers {
  std::string reference;  // the reference config's spec
  std::vector<ConfigName> names;  // the run's configs, labels beside specs
  std::string label(const std::string& spec) const;
  bool stored = false;    // false: the run holds no answer text (made before answers were kept)
  std::vector<TurnAnswers> turns;  // by item key, then turn index
};

// A stored run's answers, filtered. A `config` filter keeps the reference beside it.
RunAnswers read_answers(const results::StoredRun& run, const AnswersFilter& filter = {});

// The answer split at its first divergence from the reference's: (the part both share, the rest);
// the rest is empty for an unchanged answer.
std::pair<std::string, std::string> split_at_divergence(const ConfigAnswer& a);
// Model output as valid UTF-8 (a token can end mid-character): a cut last character becomes
// "…", any other invalid byte U+FFFD, so XHTML and JSON readers take it.
std::string valid_utf8(const std::string& text);
// Text on one line: newline shown as ⏎, other control characters as spaces (valid_utf8 first).
std::string one_line(const std::string& text);

std::string answers_text(const RunAnswers& answers, int64_t run_id, const AnswersFilter& filter);
nlohmann::json answers_json(const RunAnswers& answers);

// Item keys whose answer under `spec` (in `domain`, "" for all) differs from the reference's.
std::vector<std::string> changed_items(const RunAnswers& answers, const std::string& spec, const std::string& domain = "");

}  // namespace kvgate::harness
