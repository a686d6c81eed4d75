#include "harness/report/per_turn.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "scoring/metrics.h"

namespace kvgate::harness {
namespace {

std::string cell(double v, const char* spec, int width) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v, width) : fmt::format("{:>{}}", "-", width);
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

PerTurn per_turn(const results::StoredRun& run) {
  std::map<std::string, int64_t> turns_of_item;
  for (const results::RunTurnMetrics& t : run.turns)
    turns_of_item[t.item_key] = std::max(turns_of_item[t.item_key], t.turn.turn_index + 1);
  std::map<int64_t, std::vector<scoring::SessionTurnScores>> by_config;
  std::set<std::string> sessions;
  for (const results::RunTurnMetrics& t : run.turns) {
    if (turns_of_item[t.item_key] < 2 || !run.config(t.turn.config_id)) continue;
    sessions.insert(t.item_key);
    const results::TurnMetrics& m = t.turn;
    by_config[m.config_id].push_back({m.turn_index, static_cast<double>(m.context_tokens), m.kld_mean, m.same_top1,
                                      m.ttft_ms, m.tpot_ms});
  }
  PerTurn p;
  p.sessions = sessions.size();
  for (const results::RunConfigRecord& c : run.configs) {
    const auto it = by_config.find(c.config_id);
    if (it == by_config.end()) continue;
    ConfigTurns ct{c.label.empty() ? c.spec : c.label, c.spec, c.role == results::ConfigRole::reference, {}};
    for (const auto& turn : scoring::means_over_sessions(it->second)) ct.turns.push_back(turn);
    p.configs.push_back(std::move(ct));
  }
  return p;
}

std::string per_turn_text(const PerTurn& p) {
  if (p.sessions == 0 || p.configs.empty()) return "";
  size_t width = 6;
  for (const ConfigTurns& c : p.configs) width = std::max(width, c.label.size() + (c.reference ? 6 : 0));
  std::string text = fmt::format("per turn over {} multi-turn sessions (means over the sessions that reach the turn; "
                                 "KLD and top-1 against the reference)\n",
                                 p.sessions);
  const std::string top1 = scoring::metric_heading(scoring::metric_info(scoring::Metric::same_top1), true);
  text += fmt::format("  {:<{}} {:>5} {:>8} {:>9} {:>10} {:>12} {:>9} {:>9}\n", "config", width, "turn", "sessions",
                      "context", scoring::metric_info(scoring::Metric::kld_mean).label, top1, "TTFT ms", "TPOT ms");
  for (const ConfigTurns& c : p.configs)
    for (const auto& [turn, m] : c.turns)
      text += fmt::format("  {:<{}} {:>5} {:>8} {} {} {} {} {}\n", c.reference ? c.label + " (ref)" : c.label, width, turn,
                          m.sessions, cell(m.context_tokens, "{:>{}.0f}", 9), cell(m.kld_mean, "{:>{}.6f}", 10),
                          cell(100.0 * m.same_top1, "{:>{}.2f}", 12), cell(m.ttft_ms, "{:>{}.1f}", 9),
                          cell(m.tpot_ms, "{:>{}.1f}", 9));
  return text;
}

nlohmann::json per_turn_json(const PerTurn& p) {
  nlohmann::json turns = nlohmann::json::array();
  for (const ConfigTurns& c : p.configs)
    for (const auto& [turn, m] : c.turns)
      turns.push_back({{"label", c.label},
                       {"spec", c.spec},
                       {"turn", turn},
                       {"sessions", m.sessions},
                       {"context_tokens", number_or_null(m.context_tokens)},
                       {"kld_mean", number_or_null(m.kld_mean)},
                       {"same_top1", number_or_null(m.same_top1)},
                       {"ttft_ms", number_or_null(m.ttft_ms)},
                       {"tpot_ms", number_or_null(m.tpot_ms)}});
  return {{"sessions", p.sessions}, {"turns", turns}};
}

}  // namespace kvgate::harness
