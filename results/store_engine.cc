// The store's engine-mode tables (schema migration 3, docs/schema.md): endpoints behind configs,
// item failures, load replays and the capacity predictions beside them.
#include "core/error.h"
#include "results/row_digest.h"
#include "results/store.h"

namespace kvgate::results {

void Store::set_config_estimator(int64_t run_id, int64_t config_id, const std::string& estimator,
                                 std::optional<int64_t> top_k) {
  const DigestedTable& t = digested_table("run_configs");
  const bool found = update_row(
      *connection_, t, "run_id = ?1 AND config_id = ?2", {run_id, config_id},
      [&](Row& r) {
        r[column_index(t, "kld_estimator")] = estimator;
        r[column_index(t, "top_k")] = top_k;
      },
      run_id);
  if (!found)
    throw_internal_error(path() + ": run " + std::to_string(run_id) + " has no config " + std::to_string(config_id));
}

void Store::add_config_endpoint(int64_t run_id, const ConfigEndpoint& e) {
  upsert_row(*connection_, digested_table("config_endpoints"), "run_id = ?1 AND config_id = ?2", {run_id, e.config_id},
             {run_id, e.config_id, e.name, e.url, e.engine, e.engine_version, e.model, e.kv, e.kv_source, e.kv_reported,
              e.discovery},
             run_id);
}

std::vector<ConfigEndpoint> Store::config_endpoints(int64_t run_id) {
  begin_run_read("config_endpoints", run_id);
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
  upsert_row(*connection_, digested_table("item_failures"), "run_id = ?1 AND item_key = ?2", {run_id, f.item_key},
             {run_id, f.item_key, f.config_id, f.endpoint, f.failure, f.message, now_utc()}, run_id);
}

std::vector<ItemFailure> Store::item_failures(int64_t run_id) {
  begin_run_read("item_failures", run_id);
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
  RowInserter(*connection_, digested_table("load_replays"))
      .insert({run_id, l.trace, l.format, l.requests, l.time_scale, l.max_inflight, l.slo_ttft_ms, l.slo_tpot_ms,
               l.block_tokens, l.predict_gpu, l.predict_model});
}

std::optional<LoadReplaySettings> Store::load_replay(int64_t run_id) {
  begin_run_read("load_replays", run_id);
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
  RowInserter insert(*connection_, digested_table("load_requests"));
  for (const LoadRequest& r : requests)
    insert.insert({run_id, r.config_id, r.request_index, r.arrival_ms, r.prompt_tokens, r.max_tokens, r.ok, r.failure,
                   r.output_tokens, r.cached_tokens, r.ttft_ms, r.tpot_ms, r.latency_ms, r.max_gap_ms});
  tx.commit();
}

std::vector<LoadRequest> Store::load_requests(int64_t run_id) {
  begin_run_read("load_requests", run_id);
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
  RowInserter(*connection_, digested_table("capacity_predictions"))
      .insert({run_id, p.config_id, p.hit_rate, p.ttft_p50_ms, p.ttft_p95_ms, p.ttft_p99_ms, p.tpot_p50_ms,
               p.tpot_p95_ms, p.output_tokens_per_s, p.kv_token_capacity, p.verdict});
}

std::vector<CapacityPrediction> Store::capacity_predictions(int64_t run_id) {
  begin_run_read("capacity_predictions", run_id);
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
