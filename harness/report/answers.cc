#include "harness/report/answers.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "scoring/sequence.h"

namespace kvgate::harness {

bool TurnAnswers::changed(const std::string& spec) const {
  for (const ConfigAnswer& a : answers)
    if (a.role != results::ConfigRole::reference && (spec.empty() || a.spec == spec) && a.divergence) return true;
  return false;
}

std::string RunAnswers::label(const std::string& spec) const {
  for (const ConfigName& n : names)
    if (n.spec == spec) return n.label;
  return spec;
}

RunAnswers read_answers(const results::StoredRun& run, const AnswersFilter& filter) {
  RunAnswers out;
  if (const results::StoredConfig* ref = run.reference()) out.reference = ref->spec;
  out.names = config_names(run.configs);
  std::map<std::string, const std::optional<std::string>*> gold;
  for (const results::ItemInfo& i : run.item_info) gold[i.item_key] = &i.gold_answer;
  std::map<std::pair<std::string, int64_t>, std::optional<bool>> gold_match;  // (item, config id)
  for (const results::RunItemMetrics& m : run.items) gold_match[{m.item_key, m.metrics.config_id}] = m.metrics.exact_match_gold;

  const std::vector<results::RunTurnMetrics>& rows = run.turns;
  std::map<std::string, int64_t> last_turn;
  for (const results::RunTurnMetrics& r : rows) {
    last_turn[r.item_key] = std::max(last_turn[r.item_key], r.turn.turn_index);
    out.stored = out.stored || r.turn.answer.has_value();
  }
  std::map<std::pair<std::string, int64_t>, TurnAnswers> turns;  // (item, turn): the store's order
  for (const results::RunTurnMetrics& r : rows) {
    if (!filter.domain.empty() && r.domain != filter.domain) continue;
    const results::StoredConfig* cfg = run.config(r.turn.config_id);
    if (!cfg) continue;
    const std::string& spec = cfg->spec;
    const results::ConfigRole role = cfg->role;
    if (!filter.config.empty() && role != results::ConfigRole::reference && spec != filter.config) continue;
    TurnAnswers& t = turns[{r.item_key, r.turn.turn_index}];
    t.item_key = r.item_key;
    t.domain = r.domain;
    t.turn_index = r.turn.turn_index;
    t.last_turn = r.turn.turn_index == last_turn[r.item_key];
    if (t.last_turn)
      if (const auto g = gold.find(r.item_key); g != gold.end()) t.gold = *g->second;
    ConfigAnswer a;
    a.spec = spec;
    a.label = out.label(spec);
    a.role = role;
    a.text = r.turn.answer;
    a.tokens = r.turn.answer_tokens;
    a.divergence = r.turn.answer_divergence;
    if (t.last_turn) a.gold_match = gold_match[{r.item_key, r.turn.config_id}];
    t.answers.push_back(std::move(a));
  }
  for (auto& [key, t] : turns) {
    std::stable_sort(t.answers.begin(), t.answers.end(), [&](const ConfigAnswer& x, const ConfigAnswer& y) {
      return (x.role == results::ConfigRole::reference) > (y.role == results::ConfigRole::reference);
    });
    const ConfigAnswer* ref = !t.answers.empty() && t.answers.front().role == results::ConfigRole::reference ? &t.answers.front() : nullptr;
    for (ConfigAnswer& a : t.answers)
      if (ref && a.divergence && a.text && ref->text)
        a.text_divergence = scoring::first_text_divergence(*ref->text, *a.text).value_or(a.text->size());
    if (filter.changed_only && !t.changed(filter.config)) continue;
    out.turns.push_back(std::move(t));
  }
  return out;
}

std::pair<std::string, std::string> split_at_divergence(const ConfigAnswer& a) {
  if (!a.text) return {"", ""};
  if (!a.text_divergence) return {*a.text, ""};
  const size_t at = std::min(*a.text_divergence, a.text->size());
  return {a.text->substr(0, at), a.text->substr(at)};
}

std::string valid_utf8(const std::string& text) {
  std::string out;
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    size_t ok = len > 0 ? 1 : 0;
    while (ok > 0 && ok < len && i + ok < n && (static_cast<unsigned char>(text[i + ok]) & 0xC0) == 0x80) ++ok;
    if (len > 0 && ok == len) {
      out.append(text, i, len);
      i += len;
    } else if (len > 0 && i + ok == n) {
      out += "\u2026";  // a token limit cut the last character in two
      break;
    } else {
      out += "\uFFFD";
      i += std::max<size_t>(ok, 1);
    }
  }
  return out;
}

std::string one_line(const std::string& text) {
  std::string out;
  for (char ch : valid_utf8(text)) {
    if (ch == '\n') out += "\u23CE";
    else if (static_cast<unsigned char>(ch) < 0x20) out += ' ';
    else out += ch;
  }
  return out;
}

std::vector<std::string> changed_items(const RunAnswers& answers, const std::string& spec, const std::string& domain) {
  std::vector<std::string> out;
  for (const TurnAnswers& t : answers.turns)
    if ((domain.empty() || t.domain == domain) && t.changed(spec) &&
        (out.empty() || out.back() != t.item_key))
      out.push_back(t.item_key);
  return out;
}

std::string answers_text(const RunAnswers& answers, int64_t run_id, const AnswersFilter& filter) {
  std::string text;
  if (!answers.stored) {
    return fmt::format("run {} holds no answer text: it was made before kvgate kept the answers (results schema 5); "
                       "run the eval again to read them\n",
                       run_id);
  }
  size_t changed = 0, width = 8;
  for (const TurnAnswers& t : answers.turns) {
    changed += t.changed(filter.config) ? 1 : 0;
    for (const ConfigAnswer& a : t.answers) width = std::max(width, a.label.size() + (a.role == results::ConfigRole::reference ? 6 : 0));
  }
  std::string filters;
  if (filter.changed_only) filters += " --changed";
  if (!filter.config.empty()) filters += " --config " + answers.label(filter.config);
  if (!filter.domain.empty()) filters += " --domain " + filter.domain;
  text += fmt::format("answers of run {}{}: {} turns, {} of them changed against the reference {}\n", run_id,
                      filters.empty() ? "" : " (" + filters.substr(1) + ")", answers.turns.size(), changed,
                      answers.label(answers.reference));
  const std::string legend = canonical_legend(answers.names);
  if (!legend.empty()) text += "  " + legend + "\n";
  text += "  [[...]] marks where an answer first differs from the reference's; gold ok/wrong on an item's last turn\n";
  for (const TurnAnswers& t : answers.turns) {
    text += fmt::format("\n{}  {}  turn {}{}\n", t.item_key, t.domain, t.turn_index,
                        t.gold ? "  gold: " + one_line(*t.gold) : std::string());
    for (const ConfigAnswer& a : t.answers) {
      const std::string name = a.role == results::ConfigRole::reference ? a.label + " (ref)" : a.label;
      const std::string gold = a.gold_match ? (*a.gold_match ? "gold ok   " : "gold wrong") : "          ";
      std::string where = a.divergence ? fmt::format("token {:>3}", *a.divergence) : std::string(a.role == results::ConfigRole::reference ? "" : "same     ");
      if (!a.text) {
        text += fmt::format("  {:<{}}  (no answer stored)\n", name, width);
        continue;
      }
      const auto [same, rest] = split_at_divergence(a);
      text += fmt::format("  {:<{}}  {:>3} tok  {}  {:<9}  {}{}\n", name, width, a.tokens.value_or(0), gold, where,
                          one_line(same), rest.empty() && !a.divergence ? "" : "[[" + one_line(rest) + "]]");
    }
  }
  return text;
}

nlohmann::json answers_json(const RunAnswers& answers) {
  nlohmann::json turns = nlohmann::json::array();
  auto opt = [](const auto& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  for (const TurnAnswers& t : answers.turns) {
    nlohmann::json list = nlohmann::json::array();
    for (const ConfigAnswer& a : t.answers)
      list.push_back({{"config", a.spec},
                      {"label", a.label},
                      {"role", results::config_role_name(a.role)},
                      {"text", opt(a.text)},
                      {"tokens", opt(a.tokens)},
                      {"first_divergence", opt(a.divergence)},
                      {"text_divergence", opt(a.text_divergence)},
                      {"gold_match", opt(a.gold_match)}});
    turns.push_back({{"item", t.item_key},
                     {"domain", t.domain},
                     {"turn", t.turn_index},
                     {"last_turn", t.last_turn},
                     {"gold", opt(t.gold)},
                     {"changed", t.changed()},
                     {"answers", list}});
  }
  return {{"reference", answers.reference},
          {"reference_label", answers.label(answers.reference)},
          {"stored", answers.stored},
          {"turns", turns}};
}

}  // namespace kvgate::harness
