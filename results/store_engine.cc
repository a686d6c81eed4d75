// The store's engine-mode tables (schema migration 3, docs/schema.md): endpoints behind configs,
// item failures, load replays and the capacity predictions beside them.
#include "core/error.h"
#include "results/store.h"

namespace kvgate::results {

namespace {

// The same ISO 8601 UTC text with milliseconds as the other time columns.
constexpr const char* kNowUtc = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

}  // namespace

void Store::set_config_estimator(int64_t run_id, int64_t config_id, const std::string& estimator,
                                 std::optional<int64_t> top_k) {
  Statement s(*connection_,
              "UPDATE run_configs SET kld_estimator = ?1, top_k = ?2 WHERE run_id = ?3 AND config_id = ?4 RETURNING run_id");
  s.bind(1, estimator).bind(2, top_k).bind(3, run_id).bind(4, config_id);
  if (!s.step())
    throw_internal_error(path() + ": run " + std::to_string(run_id) + " has no config " + std::to_string(config_id));
}

void Store::add_config_endpoint(int64_t run_id, const ConfigEndpoint& e) {
  Statement s(*connection_,
              "INSERT INTO config_endpoints (run_id, config_id, name, url, engine, engine_version, model, kv, kv_source, "
              "kv_reported, discovery) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) "
              "ON CONFLICT (run_id, config_id) DO UPDATE SET name = excluded.name, url = excluded.url, "
              "engine = excluded.engine, engine_version = excluded.engine_version, model = excluded.model, "
              "kv = excluded.kv, kv_source = excluded.kv_source, kv_reported = excluded.kv_reported, "
              "discovery = excluded.discovery");
  s.bind(1, run_id).bind(2, e.config_id).bind(3, e.name).bind(4, e.url).bind(5, e.engine).bind(6, e.engine_version);
  s.bind(7, e.model).bind(8, e.kv).bind(9, e.kv_source).bind(10, e.kv_reported).bind(11, e.discovery);
  s.run();
}

std::vector<ConfigEndpoint> Store::config_endpoints(int64_t run_id) {
  Statement s(*connection_,
              "SELECT config_id, name, url, engine, engine_version, model, kv, kv_source, kv_reported, discovery "
              "FROM config_endpoints WHERE run_id = ?1 ORDER BY config_id");
  s.bind(1, run_id);
  std::vector<ConfigEndpoint> out;
  while (s.step())
    out.push_back({s.column_int(0), s.column_text(1), s.column_text(2), s.column_text(3), s.column_text(4),
                   s.column_text(5), s.column_text(6), s.column_text(7), s.column_text(8), s.column_text(9)});
  return out;
}

void Store::record_item_failure(int64_t run_id, const ItemFailure& f) {
  Statement s(*connection_,
              std::string("INSERT INTO item_failures (run_id, item_key, config_id, endpoint, failure, message, failed_at) "
                          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ") +
                  kNowUtc +
                  ") ON CONFLICT (run_id, item_key) DO UPDATE SET config_id = excluded.config_id, "
                  "endpoint = excluded.endpoint, failure = excluded.failure, message = excluded.message, "
                  "failed_at = excluded.failed_at");
  s.bind(1, run_id).bind(2, f.item_key).bind(3, f.config_id).bind(4, f.endpoint).bind(5, f.failure).bind(6, f.message);
  s.run();
}

std::vector<ItemFailure> Store::item_failures(int64_t run_id) {
  Statement s(*connection_,
              "SELECT item_key, config_id, endpoint, failure, message, failed_at FROM item_failures WHERE run_id = ?1 "
              "ORDER BY item_key");
  s.bind(1, run_id);
  std::vector<ItemFailure> out;
  while (s.step())
    out.push_back({s.column_text(0), s.column_optional_int(1), s.column_text(2), s.column_text(3), s.column_text(4),
                   s.column_text(5)});
  return out;
}

void Store::add_load_replay(int64_t run_id, const LoadReplaySettings& l) {
  Statement s(*connection_,
              "INSERT INTO load_replays (run_id, trace, format, requests, time_scale, max_inflight, slo_ttft_ms, "
              "slo_tpot_ms, block_tokens, predict_gpu, predict_model) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  s.bind(1, run_id).bind(2, l.trace).bind(3, l.format).bind(4, l.requests).bind(5, l.time_scale);
  s.bind(6, l.max_inflight).bind(7, l.slo_ttft_ms).bind(8, l.slo_tpot_ms).bind(9, l.block_tokens);
  s.bind(10, l.predict_gpu).bind(11, l.predict_model);
  s.run();
}

std::optional<LoadReplaySettings> Store::load_replay(int64_t run_id) {
  Statement s(*connection_,
              "SELECT trace, format, requests, time_scale, max_inflight, slo_ttft_ms, slo_tpot_ms, block_tokens, "
              "predict_gpu, predict_model FROM load_replays WHERE run_id = ?1");
  s.bind(1, run_id);
  if (!s.step()) return std::nullopt;
  return LoadReplaySettings{s.column_text(0),   s.column_text(1),   s.column_int(2),  s.column_double(3),
                            s.column_int(4),    s.column_double(5), s.column_double(6), s.column_int(7),
                            s.column_text(8),   s.column_text(9)};
}

void Store::add_load_requests(int64_t run_id, const std::vector<LoadRequest>& requests) {
  Transaction tx(*connection_);
  Statement s(*connection_,
              "INSERT INTO load_requests (run_id, config_id, request_index, arrival_ms, prompt_tokens, max_tokens, ok, "
              "failure, output_tokens, cached_tokens, ttft_ms, tpot_ms, latency_ms, max_gap_ms) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
  for (const LoadRequest& r : requests) {
    s.reset();
    s.bind(1, run_id).bind(2, r.config_id).bind(3, r.request_index).bind(4, r.arrival_ms).bind(5, r.prompt_tokens);
    s.bind(6, r.max_tokens).bind(7, r.ok).bind(8, r.failure).bind(9, r.output_tokens).bind(10, r.cached_tokens);
    s.bind(11, r.ttft_ms).bind(12, r.tpot_ms).bind(13, r.latency_ms).bind(14, r.max_gap_ms);
    s.run();
  }
  tx.commit();
}

std::vector<LoadRequest> Store::load_requests(int64_t run_id) {
  Statement s(*connection_,
              "SELECT config_id, request_index, arrival_ms, prompt_tokens, max_tokens, ok, failure, output_tokens, "
              "cached_tokens, ttft_ms, tpot_ms, latency_ms, max_gap_ms FROM load_requests WHERE run_id = ?1 "
              "ORDER BY config_id, request_index");
  s.bind(1, run_id);
  std::vector<LoadRequest> out;
  while (s.step()) {
    LoadRequest r;
    r.config_id = s.column_int(0);
    r.request_index = s.column_int(1);
    r.arrival_ms = s.column_double(2);
    r.prompt_tokens = s.column_int(3);
    r.max_tokens = s.column_int(4);
    r.ok = s.column_int(5) != 0;
    r.failure = s.column_text(6);
    r.output_tokens = s.column_int(7);
    r.cached_tokens = s.column_optional_int(8);
    r.ttft_ms = s.column_double(9);
    r.tpot_ms = s.column_double(10);
    r.latency_ms = s.column_double(11);
    r.max_gap_ms = s.column_double(12);
    out.push_back(std::move(r));
  }
  return out;
}

void Store::add_capacity_prediction(int64_t run_id, const CapacityPrediction& p) {
  Statement s(*connection_,
              "INSERT INTO capacity_predictions (run_id, config_id, hit_rate, ttft_p50_ms, ttft_p95_ms, ttft_p99_ms, "
              "tpot_p50_ms, tpot_p95_ms, output_tokens_per_s, kv_token_capacity, verdict) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  s.bind(1, run_id).bind(2, p.config_id).bind(3, p.hit_rate).bind(4, p.ttft_p50_ms).bind(5, p.ttft_p95_ms);
  s.bind(6, p.ttft_p99_ms).bind(7, p.tpot_p50_ms).bind(8, p.tpot_p95_ms).bind(9, p.output_tokens_per_s);
  s.bind(10, p.kv_token_capacity).bind(11, p.verdict);
  s.run();
}

std::vector<CapacityPrediction> Store::capacity_predictions(int64_t run_id) {
  Statement s(*connection_,
              "SELECT config_id, hit_rate, ttft_p50_ms, ttft_p95_ms, ttft_p99_ms, tpot_p50_ms, tpot_p95_ms, "
              "output_tokens_per_s, kv_token_capacity, verdict FROM capacity_predictions WHERE run_id = ?1 "
              "ORDER BY config_id");
  s.bind(1, run_id);
  std::vector<CapacityPrediction> out;
  while (s.step())
    out.push_back({s.column_int(0), s.column_double(1), s.column_double(2), s.column_double(3), s.column_double(4),
                   s.column_double(5), s.column_double(6), s.column_double(7), s.column_int(8), s.column_text(9)});
  return out;
}

}  // namespace kvgate::results
