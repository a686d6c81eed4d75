// agentic: an operations-assistant session. Each turn is a user request, an assistant tool
// call with JSON arguments, a long tool result (combined logs, a query result table or a
// config file) and an assistant reply stating one exact fact from that result. All replies
// are scored, so replay can show drift growing with turns and context.
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

Turn file_turn(Rng& rng, size_t keys) {
  const std::string service = pick(rng, kServices);
  const std::string path = "config/" + service + ".yaml";
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

}  // namespace kvgate::evalsets::gen
