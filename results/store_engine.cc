// The store's engine-mode tables (schema migration 3, docs/schema.md): endpoints behind configs,
// item failures, load replays and the capacity predictions beside them.
#include "core/error.h"
#include "results/record_columns.h"
#include "results/row_digest.h"
#include "results/store.h"
#include "results/store_columns.h"

namespace kvgate::results {

namespace {

// Each engine-mode record's fields beside their columns (results/record_columns.h); `run_id`
// is the writer's. item_failures' are in results/store_columns.h, beside the merge's.
const std::vector<FieldColumn<ConfigEndpoint>>& endpoint_fields() {
  static const std::vector<FieldColumn<ConfigEndpoint>> fields = {
      field<&ConfigEndpoint::config_id>("config_id"),   field<&ConfigEndpoint::name>("name"),
      field<&ConfigEndpoint::url>("url"),               field<&ConfigEndpoint::engine>("engine"),
      field<&ConfigEndpoint::engine_version>("engine_version"), field<&ConfigEndpoint::model>("model"),
      field<&ConfigEndpoint::kv>("kv"),                 field<&ConfigEndpoint::kv_source>("kv_source"),
      field<&ConfigEndpoint::kv_reported>("kv_reported"), field<&ConfigEndpoint::discovery>("discovery"),
  };
  return fields;
}

const std::vector<FieldColumn<LoadReplaySettings>>& load_replay_fields() {
  static const std::vector<FieldColumn<LoadReplaySettings>> fields = {
      field<&LoadReplaySettings::trace>("trace"),
      field<&LoadReplaySettings::format>("format"),
      field<&LoadReplaySettings::requests>("requests"),
      field<&LoadReplaySettings::time_scale>("time_scale"),
      field<&LoadReplaySettings::max_inflight>("max_inflight"),
      field<&LoadReplaySettings::slo_ttft_ms>("slo_ttft_ms"),
      field<&LoadReplaySettings::slo_tpot_ms>("slo_tpot_ms"),
      field<&LoadReplaySettings::block_tokens>("block_tokens"),
      field<&LoadReplaySettings::predict_gpu>("predict_gpu"),
      field<&LoadReplaySettings::predict_model>("predict_model"),
  };
  return fields;
}

const std::vector<FieldColumn<LoadRequest>>& load_request_fields() {
  static const std::vector<FieldColumn<LoadRequest>> fields = {
      field<&LoadRequest::config_id>("config_id"),         field<&LoadRequest::request_index>("request_index"),
      field<&LoadRequest::arrival_ms>("arrival_ms"),       field<&LoadRequest::prompt_tokens>("prompt_tokens"),
      field<&LoadRequest::max_tokens>("max_tokens"),       field<&LoadRequest::ok>("ok"),
      field<&LoadRequest::failure>("failure"),             field<&LoadRequest::output_tokens>("output_tokens"),
      field<&LoadRequest::cached_tokens>("cached_tokens"), field<&LoadRequest::ttft_ms>("ttft_ms"),
      field<&LoadRequest::tpot_ms>("tpot_ms"),             field<&LoadRequest::latency_ms>("latency_ms"),
      field<&LoadRequest::max_gap_ms>("max_gap_ms"),
  };
  return fields;
}

const std::vector<FieldColumn<CapacityPrediction>>& prediction_fields() {
  static const std::vector<FieldColumn<CapacityPrediction>> fields = {
      field<&CapacityPrediction::config_id>("config_id"),
      field<&CapacityPrediction::hit_rate>("hit_rate"),
      field<&CapacityPrediction::ttft_p50_ms>("ttft_p50_ms"),
      field<&CapacityPrediction::ttft_p95_ms>("ttft_p95_ms"),
      field<&CapacityPrediction::ttft_p99_ms>("ttft_p99_ms"),
      field<&CapacityPrediction::tpot_p50_ms>("tpot_p50_ms"),
      field<&CapacityPrediction::tpot_p95_ms>("tpot_p95_ms"),
      field<&CapacityPrediction::output_tokens_per_s>("output_tokens_per_s"),
      field<&CapacityPrediction::kv_token_capacity>("kv_token_capacity"),
      field<&CapacityPrediction::verdict>("verdict"),
  };
  return fields;
}

}  // namespace

void Store::set_config_estimator(int64_t run_id, int64_t config_id, const std::string& estimator,
                                 std::optional<int64_t> top_k) {
  const DigestedTable& t = digested_table("run_configs");
  const bool found = update_row(
      *connection_, t, "run_id = ?1 AND config_id = ?2", {run_id, config_id},
      [&](Row& r) {
        RunConfigRecord c;
        c.kld_estimator = estimator;
        c.top_k = top_k;
        set_columns(t, run_config_fields(), c, r, {"kld_estimator", "top_k"});
      },
      run_id);
  if (!found)
    throw_internal_error(path() + ": run " + std::to_string(run_id) + " has no config " + std::to_string(config_id));
}

void Store::add_config_endpoint(int64_t run_id, const ConfigEndpoint& e) {
  const DigestedTable& t = digested_table("config_endpoints");
  upsert_row(*connection_, t, "run_id = ?1 AND config_id = ?2", {run_id, e.config_id},
             record_row(t, endpoint_fields(), e, {{"run_id", run_id}}), run_id);
}

std::vector<ConfigEndpoint> Store::config_endpoints(int64_t run_id) {
  begin_run_read("config_endpoints", run_id);
  return read_run_records(*connection_, digested_table("config_endpoints"), endpoint_fields(), run_id, "config_id");
}

void Store::record_item_failure(int64_t run_id, const ItemFailure& f) {
  const DigestedTable& t = digested_table("item_failures");
  upsert_row(*connection_, t, "run_id = ?1 AND item_key = ?2", {run_id, f.item_key},
             record_row(t, failure_fields(), f, {{"run_id", run_id}, {"failed_at", now_utc()}}), run_id);
}

std::vector<ItemFailure> Store::item_failures(int64_t run_id) {
  begin_run_read("item_failures", run_id);
  return read_run_records(*connection_, digested_table("item_failures"), failure_fields(), run_id, "item_key");
}

void Store::add_load_replay(int64_t run_id, const LoadReplaySettings& l) {
  const DigestedTable& t = digested_table("load_replays");
  RowInserter(*connection_, t).insert(record_row(t, load_replay_fields(), l, {{"run_id", run_id}}));
}

std::optional<LoadReplaySettings> Store::load_replay(int64_t run_id) {
  begin_run_read("load_replays", run_id);
  std::vector<LoadReplaySettings> rows =
      read_run_records(*connection_, digested_table("load_replays"), load_replay_fields(), run_id, "run_id");
  if (rows.empty()) return std::nullopt;
  return std::move(rows.front());
}

void Store::add_load_requests(int64_t run_id, const std::vector<LoadRequest>& requests) {
  Transaction tx(*connection_);
  const DigestedTable& t = digested_table("load_requests");
  RowInserter insert(*connection_, t);
  for (const LoadRequest& r : requests) insert.insert(record_row(t, load_request_fields(), r, {{"run_id", run_id}}));
  tx.commit();
}

std::vector<LoadRequest> Store::load_requests(int64_t run_id) {
  begin_run_read("load_requests", run_id);
  return read_run_records(*connection_, digested_table("load_requests"), load_request_fields(), run_id,
                          "config_id, request_index");
}

void Store::add_capacity_prediction(int64_t run_id, const CapacityPrediction& p) {
  const DigestedTable& t = digested_table("capacity_predictions");
  RowInserter(*connection_, t).insert(record_row(t, prediction_fields(), p, {{"run_id", run_id}}));
}

std::vector<CapacityPrediction> Store::capacity_predictions(int64_t run_id) {
  begin_run_read("capacity_predictions", run_id);
  return read_run_records(*connection_, digested_table("capacity_predictions"), prediction_fields(), run_id, "config_id");
}

}  // namespace kvgate::results
