#include "harness/report/engine_report.h"

#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "harness/endpoint_kv.h"
#include "harness/report/report_html.h"
#include "serving/engine_traits.h"

namespace kvgate::harness {

namespace {

std::string num(double v, const char* spec) { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-"; }
nlohmann::json json_num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

std::string spec_of(const EngineRunView& v, int64_t config_id) {
  for (const results::StoredConfig& c : v.configs)
    if (c.config_id == config_id) return c.spec;
  return "config#" + std::to_string(config_id);
}

nlohmann::json summary_json(const scoring::LoadSummary& s) {
  return {{"requests", s.requests},
          {"succeeded", s.succeeded},
          {"failed", s.failed},
          {"ttft_ms", {{"p50", json_num(s.ttft_p50)}, {"p95", json_num(s.ttft_p95)}, {"p99", json_num(s.ttft_p99)}}},
          {"tpot_ms", {{"p50", json_num(s.tpot_p50)}, {"p95", json_num(s.tpot_p95)}, {"p99", json_num(s.tpot_p99)}}},
          {"latency_ms", {{"p50", json_num(s.latency_p50)}, {"p99", json_num(s.latency_p99)}}},
          {"duration_s", json_num(s.duration_s)},
          {"requests_per_s", json_num(s.requests_per_s)},
          {"output_tokens_per_s", json_num(s.output_tokens_per_s)},
          {"good_requests", s.good},
          {"goodput_per_s", json_num(s.goodput_per_s)},
          {"goodput_share", json_num(s.goodput_share)},
          {"prefix_hit_rate", json_num(s.hit_rate)},
          {"hit_reported", s.hit_reported}};
}

// "endpoint 'fp8' (vLLM) reported no cached prompt tokens ..." for an endpoint config that
// answered (`answered` > 0) without one (`reported` == 0).
std::optional<std::string> uncached_note(const results::ConfigEndpoint& e, int64_t answered, int64_t reported) {
  if (answered == 0 || reported > 0) return std::nullopt;
  const auto kind = serving::parse_engine_kind(e.engine);
  const serving::EngineTraits& t = serving::engine_traits(kind.value_or(serving::EngineKind::automatic));
  return fmt::format("endpoint '{}' ({}) reported no cached prompt tokens in {} answers, so its prefix-cache hits are "
                     "unknown, not zero{}",
                     e.name, t.display, answered,
                     t.cached_tokens_hint.empty() ? "" : ": " + std::string(t.cached_tokens_hint));
}

nlohmann::json prediction_json(const results::CapacityPrediction& p) {
  return {{"prefix_hit_rate", json_num(p.hit_rate)},
          {"ttft_ms", {{"p50", json_num(p.ttft_p50_ms)}, {"p95", json_num(p.ttft_p95_ms)}, {"p99", json_num(p.ttft_p99_ms)}}},
          {"tpot_ms", {{"p50", json_num(p.tpot_p50_ms)}, {"p95", json_num(p.tpot_p95_ms)}}},
          {"output_tokens_per_s", json_num(p.output_tokens_per_s)},
          {"kv_token_capacity", p.kv_token_capacity},
          {"verdict", p.verdict}};
}

}  // namespace

const results::ConfigEndpoint* EngineRunView::endpoint_of(int64_t config_id) const {
  for (const results::ConfigEndpoint& e : endpoints)
    if (e.config_id == config_id) return &e;
  return nullptr;
}

std::string EngineRunView::estimator_note() const {
  for (const results::StoredConfig& c : configs)
    if (c.kld_estimator == "topk")
      return fmt::format("KLD and Δp are top-k estimates (k = {}; scoring/topk_kld.h: a lower bound of the full KLD)",
                         c.top_k.value_or(0));
  return "";
}

EngineRunView read_engine_view(const results::StoredRun& run) {
  EngineRunView v;
  v.configs = run.configs;
  v.endpoints = run.endpoints;
  v.failures = run.failures;
  v.load = run.load_replay;
  // Both sides as stored (results::StoredConfig::kv); a spec this build cannot read is not paired.
  for (const results::ConfigEndpoint& e : v.endpoints)
    for (const results::StoredConfig& c : v.configs) {
      if (c.served_by_endpoint() || !c.kv) continue;
      const results::StoredConfig* served = run.config(e.config_id);
      if (served && served->kv && emulates(*c.kv, *served->kv)) v.cross_pairs.emplace_back(c.spec, spec_of(v, e.config_id));
    }
  if (!v.load) {
    if (v.endpoints.empty()) return v;
    std::map<int64_t, std::pair<int64_t, int64_t>> answers;  // config id -> (answered, with cached tokens)
    for (const results::RunTurnMetrics& t : run.turns)
      if (t.turn.prompt_tokens) {
        ++answers[t.turn.config_id].first;
        if (t.turn.cached_tokens) ++answers[t.turn.config_id].second;
      }
    for (const results::ConfigEndpoint& e : v.endpoints)
      if (auto note = uncached_note(e, answers[e.config_id].first, answers[e.config_id].second)) v.notes.push_back(*note);
    return v;
  }
  const std::vector<results::LoadRequest>& rows = run.load_requests;
  const std::vector<results::CapacityPrediction>& predictions = run.capacity_predictions;
  const scoring::LoadSlo slo{v.load->slo_ttft_ms, v.load->slo_tpot_ms};
  for (const results::StoredConfig& c : v.configs) {
    std::vector<scoring::RequestTiming> timings;
    for (const results::LoadRequest& r : rows)
      if (r.config_id == c.config_id)
        timings.push_back({r.ok, r.arrival_ms, r.ttft_ms, r.tpot_ms, r.latency_ms, r.prompt_tokens, r.output_tokens,
                           r.cached_tokens});
    LoadConfigSummary s;
    s.config_id = c.config_id;
    s.spec = c.spec;
    if (const results::ConfigEndpoint* e = v.endpoint_of(c.config_id)) s.endpoint = e->name;
    s.measured = scoring::summarize_load(timings, slo);
    for (const results::CapacityPrediction& p : predictions)
      if (p.config_id == c.config_id) s.predicted = p;
    if (const results::ConfigEndpoint* e = v.endpoint_of(c.config_id))
      if (auto note = uncached_note(*e, s.measured.succeeded, s.measured.hit_reported)) v.notes.push_back(*note);
    v.load_summaries.push_back(std::move(s));
  }
  return v;
}

std::string endpoints_text(const EngineRunView& v) {
  if (!v.engine_mode()) return "";
  std::string out = "endpoints\n";
  for (const results::ConfigEndpoint& e : v.endpoints)
    out += fmt::format("  {:<28} {} {} {} ({}{}), model {}, kv {} ({}{})\n", spec_of(v, e.config_id), e.name, e.url,
                       e.engine, e.engine_version.empty() ? "version not reported" : "version ", e.engine_version,
                       e.model.empty() ? "-" : e.model, e.kv, e.kv_source,
                       e.kv_reported.empty() ? "" : ", engine reports " + e.kv_reported);
  const std::string note = v.estimator_note();
  if (!note.empty()) out += "  " + note + "\n";
  for (const std::string& n : v.notes) out += "  note: " + n + "\n";
  return out;
}

std::string failures_text(const EngineRunView& v) {
  if (v.failures.empty()) return "";
  std::string out = fmt::format("failed items ({}; not stored, a resumed run measures them again)\n", v.failures.size());
  for (const results::ItemFailure& f : v.failures)
    out += fmt::format("  {:<24} {} {} {}: {}\n", f.item_key, f.failed_at, f.endpoint, f.failure, f.message);
  return out;
}

std::string load_text(const EngineRunView& v) {
  if (!v.load) return "";
  const results::LoadReplaySettings& l = *v.load;
  std::string out = fmt::format(
      "load replay  {} ({}), {} requests, time scale {}, max in flight {}; SLO TTFT <= {} ms, TPOT <= {} ms\n", l.trace,
      l.format, l.requests, l.time_scale, l.max_inflight > 0 ? std::to_string(l.max_inflight) : "endpoint's",
      l.slo_ttft_ms, l.slo_tpot_ms);
  out += fmt::format("{:<30} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>7} {:>7}   {}\n", "measured (engine)", "ok/n",
                     "TTFT p50", "TTFT p95", "TTFT p99", "TPOT p50", "TPOT p95", "goodput/s", "good %", "hit %",
                     fmt::format("predicted on {} ({}): hit %, TTFT p50/p95, TPOT p50", l.predict_gpu, l.predict_model));
  for (const LoadConfigSummary& s : v.load_summaries) {
    const scoring::LoadSummary& m = s.measured;
    std::string predicted = "-";
    if (s.predicted)
      predicted = fmt::format("{} / {} / {} / {} ms", num(100 * s.predicted->hit_rate, "{:.1f}"),
                              num(s.predicted->ttft_p50_ms, "{:.1f}"), num(s.predicted->ttft_p95_ms, "{:.1f}"),
                              num(s.predicted->tpot_p50_ms, "{:.2f}"));
    out += fmt::format("{:<30} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>7} {:>7}   {}\n", s.spec.substr(0, 30),
                       fmt::format("{}/{}", m.succeeded, m.requests), num(m.ttft_p50, "{:.1f}"), num(m.ttft_p95, "{:.1f}"),
                       num(m.ttft_p99, "{:.1f}"), num(m.tpot_p50, "{:.2f}"), num(m.tpot_p95, "{:.2f}"),
                       num(m.goodput_per_s, "{:.3f}"), num(100 * m.goodput_share, "{:.1f}"), num(100 * m.hit_rate, "{:.1f}"),
                       predicted);
  }
  return out;
}

std::string engine_markdown(const EngineRunView& v) {
  std::string out;
  if (v.engine_mode()) {
    out += "\n## Endpoints\n\n";
    const std::string note = v.estimator_note();
    if (!note.empty()) out += note + ".\n\n";
    for (const std::string& n : v.notes) out += "Note: " + n + ".\n\n";
    out += "| config | endpoint | URL | engine | version | model | KV (source) |\n|---|---|---|---|---|---|---|\n";
    for (const results::ConfigEndpoint& e : v.endpoints)
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} ({}{}) |\n", spec_of(v, e.config_id), e.name, e.url, e.engine,
                         e.engine_version.empty() ? "-" : e.engine_version, e.model.empty() ? "-" : e.model, e.kv,
                         e.kv_source, e.kv_reported.empty() ? "" : ", reported " + e.kv_reported);
  }
  if (!v.failures.empty()) {
    out += fmt::format("\n## Failed items\n\n{} item(s) failed on an endpoint and are not stored; `--resume` measures them "
                       "again.\n\n| item | endpoint | failure | message |\n|---|---|---|---|\n",
                       v.failures.size());
    for (const results::ItemFailure& f : v.failures)
      out += fmt::format("| {} | {} | {} | {} |\n", f.item_key, f.endpoint, f.failure, f.message);
  }
  if (v.load) {
    const results::LoadReplaySettings& l = *v.load;
    out += fmt::format("\n## Load replay\n\n`{}` ({}), {} requests, time scale {}, SLO TTFT <= {} ms and TPOT <= {} ms. "
                       "Predicted: `kvgate capacity` on {} with {}.\n\n",
                       l.trace, l.format, l.requests, l.time_scale, l.slo_ttft_ms, l.slo_tpot_ms, l.predict_gpu,
                       l.predict_model);
    out += "| config | ok/n | TTFT p50 ms | TTFT p95 ms | TPOT p50 ms | goodput/s | good % | hit % | predicted hit % | "
           "predicted TTFT p50 ms | predicted TPOT p50 ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const LoadConfigSummary& s : v.load_summaries) {
      const scoring::LoadSummary& m = s.measured;
      const auto& p = s.predicted;
      out += fmt::format("| {} | {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", s.spec, m.succeeded, m.requests,
                         num(m.ttft_p50, "{:.1f}"), num(m.ttft_p95, "{:.1f}"), num(m.tpot_p50, "{:.2f}"),
                         num(m.goodput_per_s, "{:.3f}"), num(100 * m.goodput_share, "{:.1f}"),
                         num(100 * m.hit_rate, "{:.1f}"), p ? num(100 * p->hit_rate, "{:.1f}") : "-",
                         p ? num(p->ttft_p50_ms, "{:.1f}") : "-", p ? num(p->tpot_p50_ms, "{:.2f}") : "-");
    }
  }
  return out;
}

std::string engine_html(const EngineRunView& v) {
  auto row = [](const std::vector<std::string>& cells, const char* tag) {
    std::string r = "<tr>";
    for (const std::string& c : cells) r += fmt::format("<{0}>{1}</{0}>", tag, xml_escape(c));
    return r + "</tr>\n";
  };
  std::string h;
  if (v.engine_mode()) {
    h += "<h2>Endpoints</h2>\n";
    const std::string note = v.estimator_note();
    if (!note.empty()) h += "<p class=\"note\">" + xml_escape(note) + ".</p>\n";
    for (const std::string& n : v.notes) h += "<p class=\"note\">" + xml_escape(n) + ".</p>\n";
    h += "<table>" + row({"kv config", "endpoint", "URL", "engine", "version", "model", "KV (source)"}, "th");
    for (const results::ConfigEndpoint& e : v.endpoints)
      h += row({spec_of(v, e.config_id), e.name, e.url, e.engine, e.engine_version.empty() ? "-" : e.engine_version,
                e.model.empty() ? "-" : e.model,
                e.kv + " (" + e.kv_source + (e.kv_reported.empty() ? "" : ", reported " + e.kv_reported) + ")"},
               "td");
    h += "</table>\n";
  }
  if (!v.failures.empty()) {
    h += fmt::format("<h2>Failed items</h2>\n<p class=\"note\">{} item(s) failed on an endpoint and are not stored; "
                     "<code>--resume</code> measures them again.</p>\n<table>",
                     v.failures.size());
    h += row({"item", "endpoint", "failure", "message"}, "th");
    for (const results::ItemFailure& f : v.failures) h += row({f.item_key, f.endpoint, f.failure, f.message}, "td");
    h += "</table>\n";
  }
  if (v.load) {
    const results::LoadReplaySettings& l = *v.load;
    h += fmt::format("<h2>Load replay</h2>\n<p class=\"note\">{} ({}), {} requests, time scale {}, SLO TTFT &lt;= {} ms "
                     "and TPOT &lt;= {} ms; predicted: kvgate capacity on {} with {}.</p>\n<table>",
                     xml_escape(l.trace), xml_escape(l.format), l.requests, l.time_scale, l.slo_ttft_ms, l.slo_tpot_ms,
                     xml_escape(l.predict_gpu), xml_escape(l.predict_model));
    h += row({"kv config", "ok/n", "TTFT p50 ms", "TTFT p95 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p95 ms", "goodput/s",
              "good %", "hit %", "predicted hit %", "predicted TTFT p50 ms", "predicted TTFT p95 ms", "predicted TPOT p50 ms"},
             "th");
    for (const LoadConfigSummary& s : v.load_summaries) {
      const scoring::LoadSummary& m = s.measured;
      const auto& p = s.predicted;
      h += row({s.spec, fmt::format("{}/{}", m.succeeded, m.requests), num(m.ttft_p50, "{:.1f}"), num(m.ttft_p95, "{:.1f}"),
                num(m.ttft_p99, "{:.1f}"), num(m.tpot_p50, "{:.2f}"), num(m.tpot_p95, "{:.2f}"), num(m.goodput_per_s, "{:.3f}"),
                num(100 * m.goodput_share, "{:.1f}"), num(100 * m.hit_rate, "{:.1f}"),
                p ? num(100 * p->hit_rate, "{:.1f}") : "-", p ? num(p->ttft_p50_ms, "{:.1f}") : "-",
                p ? num(p->ttft_p95_ms, "{:.1f}") : "-", p ? num(p->tpot_p50_ms, "{:.2f}") : "-"},
               "td");
    }
    h += "</table>\n";
  }
  return h;
}

nlohmann::json engine_json(const EngineRunView& v) {
  nlohmann::json out = nlohmann::json::object();
  if (v.engine_mode()) {
    out["endpoints"] = nlohmann::json::array();
    for (const results::ConfigEndpoint& e : v.endpoints)
      out["endpoints"].push_back({{"config_id", e.config_id},
                                  {"spec", spec_of(v, e.config_id)},
                                  {"name", e.name},
                                  {"url", e.url},
                                  {"engine", e.engine},
                                  {"engine_version", e.engine_version},
                                  {"model", e.model},
                                  {"kv", e.kv},
                                  {"kv_source", e.kv_source},
                                  {"kv_reported", e.kv_reported}});
  }
  if (!v.notes.empty()) out["notes"] = v.notes;
  if (!v.failures.empty()) {
    out["failed_items"] = nlohmann::json::array();
    for (const results::ItemFailure& f : v.failures)
      out["failed_items"].push_back({{"item", f.item_key},
                                     {"endpoint", f.endpoint},
                                     {"failure", f.failure},
                                     {"message", f.message},
                                     {"failed_at", f.failed_at}});
  }
  if (v.load) {
    const results::LoadReplaySettings& l = *v.load;
    nlohmann::json configs = nlohmann::json::array();
    for (const LoadConfigSummary& s : v.load_summaries)
      configs.push_back({{"config_id", s.config_id},
                         {"spec", s.spec},
                         {"endpoint", s.endpoint},
                         {"measured", summary_json(s.measured)},
                         {"predicted", s.predicted ? prediction_json(*s.predicted) : nlohmann::json(nullptr)}});
    out["load_replay"] = {{"trace", l.trace},
                          {"format", l.format},
                          {"requests", l.requests},
                          {"time_scale", l.time_scale},
                          {"max_inflight", l.max_inflight},
                          {"slo_ttft_ms", l.slo_ttft_ms},
                          {"slo_tpot_ms", l.slo_tpot_ms},
                          {"block_tokens", l.block_tokens},
                          {"predict_gpu", l.predict_gpu},
                          {"predict_model", l.predict_model},
                          {"configs", configs}};
  }
  return out;
}

}  // namespace kvgate::harness
