// agentic: an operations-assistant session. Each turn is a user request, an assistant tool
// call with JSON arguments, a long tool result (combined logs, a query result table or a
// config file) and an assistant reply stating one exact fact from that result. All replies
// are scored, so replay can show drift growing with turns and context.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "evalsets/gen_common.h"

namespace kvgate::evalsets::gen {
namespace {

using nlohmann::json;

const char* const kServices[] = {"payments-api", "auth-service", "search-indexer", "billing-worker", "gateway",
                                 "notifier"};
const char* const kInfo[] = {"request completed", "cache refreshed", "health check ok", "job scheduled",
                             "connection opened", "batch flushed"};
const char* const kWarn[] = {"slow response", "retrying upstream call", "queue depth high", "certificate expires soon"};
const char* const kError[] = {"connection pool exhausted", "upstream timeout", "invalid token signature",
                              "disk quota exceeded", "deadlock detected", "payload too large"};
const char* const kRegions[] = {"north", "south", "east", "west", "central", "overseas"};
const char* const kConfigKeys[] = {"max_connections", "read_timeout_ms", "retry_limit", "queue_capacity",
                                   "cache_ttl_seconds", "worker_threads", "batch_size", "log_level_threshold",
                                   "heartbeat_interval_ms", "max_payload_kb"};

std::string timestamp(int64_t seconds_of_day) {
  // Long sessions run past midnight; the date moves on rather than the hour passing 23.
  return "2024-05-" + pad(12 + seconds_of_day / 86400, 2) + "T" + pad(seconds_of_day / 3600 % 24, 2) + ":" + pad(seconds_of_day / 60 % 60, 2) + ":" +
         pad(seconds_of_day % 60, 2) + "Z";
}

struct Turn {
  std::string request, tool, reply;
  json arguments;
  std::string result;
  json fact;  // what the reply states, for checking
};

Turn logs_turn(Rng& rng, size_t lines, int64_t& clock) {
  const std::string service = pick(rng, kServices);
  std::string result;
  std::string first_ts, first_msg;
  int64_t error_count = 0;
  const size_t forced = rng.below(lines);  // guarantees the asked service logs an ERROR
  for (size_t i = 0; i < lines; ++i) {
    clock += between(rng, 1, 90);
    std::string svc = pick(rng, kServices);
    const uint64_t roll = rng.below(10);
    std::string level = roll < 6 ? "INFO" : roll < 8 ? "WARN" : "ERROR";
    if (i == forced) {
      svc = service;
      level = "ERROR";
    }
    const std::string msg = level == "INFO" ? pick(rng, kInfo) : level == "WARN" ? pick(rng, kWarn) : pick(rng, kError);
    const std::string detail = " (req=" + pad(between(rng, 0, 999999), 6) + ", " + std::to_string(between(rng, 1, 4000)) + " ms)";
    result += timestamp(clock) + " " + level + " " + svc + " " + msg + detail + "\n";
    if (svc == service && level == "ERROR") {
      if (error_count == 0) {
        first_ts = timestamp(clock);
        first_msg = msg;
      }
      ++error_count;
    }
  }
  Turn t;
  t.tool = "tail_logs";
  t.arguments = {{"file", "/var/log/app.log"}, {"lines", lines}};
  t.result = result;
  if (rng.below(2) == 0) {
    t.request = "Check the combined log. When did " + service + " log its first ERROR, and what was it?";
    t.reply = "The first ERROR from " + service + " was at " + first_ts + ": " + first_msg + ".";
    t.fact = {{"kind", "first_error"}, {"service", service}, {"timestamp", first_ts}, {"message", first_msg}};
  } else {
    t.request = "How many ERROR lines did " + service + " write in that log window?";
    t.reply = service + " wrote " + std::to_string(error_count) + " ERROR lines in the window.";
    t.fact = {{"kind", "error_count"}, {"service", service}, {"count", error_count}};
  }
  return t;
}

Turn query_turn(Rng& rng, size_t rows) {
  const std::string day = iso_date(static_cast<int>(between(rng, 100, 160)));
  std::string result = "region   | store | orders | revenue\n---------+-------+--------+---------\n";
  int64_t best = -1;
  std::string best_row;
  std::set<int64_t> revenues;
  for (size_t i = 0; i < rows; ++i) {
    const std::string region = pick(rng, kRegions);
    const std::string store = std::string("S").append(pad(static_cast<int64_t>(i) + 101, 3));
    int64_t revenue = 0;
    do revenue = between(rng, 1000, 9999999);
    while (!revenues.insert(revenue).second);  // a unique maximum makes the answer unambiguous
    std::string padded_region = region;
    while (padded_region.size() < 8) padded_region += ' ';
    result += padded_region + " | " + store + "  | " + std::to_string(between(rng, 1, 900)) + " | " + cents_text(revenue) + "\n";
    if (revenue > best) {
      best = revenue;
      best_row = store;
    }
  }
  Turn t;
  t.tool = "run_query";
  t.arguments = {{"sql", "SELECT region, store, orders, revenue FROM daily_sales WHERE day = '" + day + "'"}};
  t.result = result;
  t.request = "Pull the daily sales for " + day + ". Which store had the highest revenue, and how much was it?";
  t.reply = "Store " + best_row + " had the highest revenue on " + day + ": " + cents_text(best) + ".";
  t.fact = {{"kind", "max_revenue"}, {"store", best_row}, {"revenue", cents_text(best)}};
  return t;
}

// `release` > 0 names the file config/SERVICE/release-N.yaml, a path no other turn reads;
// `entries` receives every key and value of the file.
Turn file_turn(Rng& rng, size_t keys, size_t release = 0, std::vector<std::pair<std::string, int64_t>>* entries_out = nullptr) {
  const std::string service = pick(rng, kServices);
  const std::string path =
      release > 0 ? "config/" + service + "/release-" + std::to_string(release) + ".yaml" : "config/" + service + ".yaml";
  std::string result = "# " + path + "\nservice: " + service + "\n";
  std::vector<std::pair<std::string, int64_t>> entries;
  for (size_t i = 0; i < keys; ++i) {
    const std::string section = "section_" + std::to_string(i / 10 + 1);
    if (i % 10 == 0) result += section + ":\n";
    const std::string key = std::string(pick(rng, kConfigKeys)) + "_" + std::to_string(i + 1);
    const int64_t value = between(rng, 1, 65535);
    result += "  " + key + ": " + std::to_string(value) + "\n";
    entries.push_back({key, value});
  }
  const auto& asked = entries[rng.below(entries.size())];
  if (entries_out) *entries_out = entries;
  Turn t;
  t.tool = "read_file";
  t.arguments = {{"path", path}};
  t.result = result;
  t.request = "Open " + path + ". What is " + asked.first + " set to?";
  t.reply = asked.first + " is set to " + std::to_string(asked.second) + " in " + path + ".";
  t.fact = {{"kind", "config_value"}, {"key", asked.first}, {"value", std::to_string(asked.second)}};
  return t;
}

}  // namespace

EvalItem make_agentic_item(Rng& rng, size_t target) {
  const size_t n_turns = std::clamp<size_t>(target / 300, 5, 20);
  // Per turn ~120 tokens of request, tool call and reply; the rest goes to the tool result.
  const size_t per_turn = (target > 60 ? target - 60 : 0) / n_turns;
  const size_t result_tokens = per_turn > 120 ? per_turn - 120 : 20;
  EvalItem item;
  item.messages.push_back(system_message(
      "You are an operations assistant. Tools: tail_logs(file, lines), run_query(sql), read_file(path). "
      "Use a tool, then answer with the exact values from its result."));
  json facts = json::array();
  int64_t clock = between(rng, 0, 3600);
  for (size_t i = 0; i < n_turns; ++i) {
    Turn t;
    switch (rng.below(3)) {
      case 0: t = logs_turn(rng, std::max<size_t>(2, result_tokens / 45), clock); break;  // ~45 tokens per log line
      case 1: t = query_turn(rng, std::max<size_t>(2, result_tokens / 25)); break;       // ~25 per row
      default: t = file_turn(rng, std::max<size_t>(3, result_tokens / 12)); break;       // ~12 per key
    }
    const std::string call_id = "call_" + std::to_string(i + 1);
    item.messages.push_back(user_message(t.request));
    Message call{"assistant", "", {}, {}, json::array()};
    call.tool_calls.push_back({{"id", call_id}, {"type", "function"},
                               {"function", {{"name", t.tool}, {"arguments", t.arguments.dump()}}}});
    item.messages.push_back(call);
    item.messages.push_back(Message{"tool", t.result, t.tool, call_id, {}});
    item.messages.push_back(assistant_message(t.reply));
    t.fact["turn"] = i + 1;
    facts.push_back(t.fact);
  }
  item.score = ScoreKind::turns;
  item.answer = item.messages.back().content;
  item.has_answer = true;
  item.meta = {{"turns", n_turns}, {"facts", facts}};
  return item;
}

EvalItem make_long_agentic_item(Rng& rng, size_t target, int depth) {
  // Tool turns of ~2,000 estimated tokens each, then a last turn that asks, without a tool, for
  // another value of a file read earlier: the key's line starts at the depth of the session.
  const size_t n_turns = std::clamp<size_t>(target / 2000, 3, 64);
  EvalItem item;
  item.messages.push_back(system_message(
      "You are an operations assistant. Tools: tail_logs(file, lines), run_query(sql), read_file(path). "
      "Use a tool, then answer with the exact values from its result."));
  const auto message_tokens = [](const Message& m) { return 4 + estimate_tokens(m.content) + estimate_tokens(tool_calls_text(m)); };
  size_t used = message_tokens(item.messages[0]);
  const size_t recall_tokens = 90;  // the last request and reply
  // The evidence turn is the one whose result spans the depth (turns are sized alike).
  const size_t evidence_turn = std::min<size_t>(n_turns - 1, n_turns * static_cast<size_t>(depth) / 1000);
  const size_t goal = (target > recall_tokens ? target - recall_tokens : target) * static_cast<size_t>(depth) / 1000;
  json facts = json::array();
  int64_t clock = between(rng, 0, 3600);
  std::string recall_path, recall_key;
  int64_t recall_value = 0;
  for (size_t i = 0; i < n_turns; ++i) {
    // Each turn takes an equal share of what is left, so estimation errors do not pile up.
    const size_t left = target > used + recall_tokens ? target - used - recall_tokens : 0;
    const size_t share = left / (n_turns - i);
    const size_t result_tokens = share > 140 ? share - 140 : 20;
    Turn t;
    std::vector<std::pair<std::string, int64_t>> entries;
    if (i == evidence_turn) {
      t = file_turn(rng, std::max<size_t>(4, result_tokens / 12), i + 1, &entries);
    } else {
      switch (rng.below(3)) {
        case 0: t = logs_turn(rng, std::max<size_t>(2, result_tokens / 45), clock); break;
        case 1: t = query_turn(rng, std::max<size_t>(2, result_tokens / 25)); break;
        default: t = file_turn(rng, std::max<size_t>(3, result_tokens / 12)); break;
      }
    }
    const std::string call_id = "call_" + std::to_string(i + 1);
    item.messages.push_back(user_message(t.request));
    Message call{"assistant", "", {}, {}, json::array()};
    call.tool_calls.push_back({{"id", call_id}, {"type", "function"},
                               {"function", {{"name", t.tool}, {"arguments", t.arguments.dump()}}}});
    item.messages.push_back(call);
    used += message_tokens(item.messages[item.messages.size() - 2]) + message_tokens(call);
    if (i == evidence_turn) {
      // The recalled key: the one whose line is nearest the goal, other than the one this turn asks.
      const std::string asked_key = t.fact["key"];
      size_t best_gap = SIZE_MAX;
      for (const auto& [key, value] : entries) {
        const size_t line_at = t.result.find("  " + key + ": ");
        const size_t at = used + 4 + estimate_tokens(std::string_view(t.result).substr(0, line_at));
        const size_t gap = at > goal ? at - goal : goal - at;
        if (key != asked_key && gap < best_gap) {
          best_gap = gap;
          recall_key = key;
          recall_value = value;
        }
      }
      recall_path = t.arguments["path"];
    }
    item.messages.push_back(Message{"tool", t.result, t.tool, call_id, {}});
    item.messages.push_back(assistant_message(t.reply));
    used += message_tokens(item.messages[item.messages.size() - 2]) + message_tokens(item.messages.back());
    t.fact["turn"] = i + 1;
    facts.push_back(t.fact);
  }
  item.messages.push_back(user_message("Before we close: in " + recall_path + ", which you opened earlier, what is " +
                                       recall_key + " set to? Answer from that file as you read it."));
  item.messages.push_back(assistant_message(recall_key + " is set to " + std::to_string(recall_value) + " in " + recall_path + "."));
  facts.push_back({{"kind", "recall"}, {"key", recall_key}, {"value", std::to_string(recall_value)}, {"path", recall_path},
                   {"turn", n_turns + 1}, {"from_turn", evidence_turn + 1}});
  item.score = ScoreKind::turns;
  item.answer = item.messages.back().content;
  item.has_answer = true;
  item.meta = {{"turns", n_turns + 1}, {"facts", facts}};
  return item;
}

}  // namespace kvgate::evalsets::gen
