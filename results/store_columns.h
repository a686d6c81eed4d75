#pragma once
// The store's records as columns (results/record_columns.h): each field of a record beside the
// column that stores it, one list per table. The store's inserts, updates and reads and the
// merge's reads and writes of these tables are made from these lists and the tables' column
// lists (results/row_digest.cc); a column no field holds is the writer's (a row id, the run's id,
// the run's seal, a time it stamps), named where the writer supplies it. The engine-mode tables'
// lists (but item_failures', which the merge writes too) are in results/store_engine.cc.
#include <string>
#include <vector>

#include "core/error.h"
#include "results/record_columns.h"
#include "results/store.h"

namespace kvgate::results {

// One row of latency_samples: the time of one token of LatencySamples.
struct LatencySample {
  int64_t config_id = 0, turn_index = 0, token_index = 0;
  double t_ms = 0;
};

namespace store_columns {
// The schema's CHECK keeps the column to these four words; anything else is a damaged file.
inline RunStatus parse_run_status(const std::string& text, int64_t run_id) {
  for (const RunStatus st : {RunStatus::running, RunStatus::complete, RunStatus::failed, RunStatus::interrupted})
    if (text == run_status_name(st)) return st;
  throw_input_error("run " + std::to_string(run_id) + " has an unknown status '" + text + "' (a damaged results database?)");
}
}  // namespace store_columns

// `item_rows` and `item_rows_digest`, the run's seal, are add_to_run_seal's; the item count is
// not a column. `id` comes first: the status's error names the run.
inline const std::vector<FieldColumn<RunRecord>>& run_fields() {
  static const std::vector<FieldColumn<RunRecord>> fields = {
      field<&RunRecord::id>("id"),
      {"status", [](const RunRecord& r) { return SqlValue(run_status_name(r.status)); },
       [](RunRecord& r, const Statement& s, int at) { r.status = store_columns::parse_run_status(s.column_text(at), r.id); }},
      field<&RunRecord::started_at>("started_at"),
      text_or_null<&RunRecord::finished_at>("finished_at"),
      field<&RunRecord::info, &RunInfo::command>("command"),
      field<&RunRecord::info, &RunInfo::git_sha>("git_sha"),
      field<&RunRecord::info, &RunInfo::build_flags>("build_flags"),
      field<&RunRecord::info, &RunInfo::host>("host"),
      field<&RunRecord::info, &RunInfo::cpu>("cpu"),
      field<&RunRecord::info, &RunInfo::gpu>("gpu"),
      field<&RunRecord::info, &RunInfo::backend>("backend"),
      field<&RunRecord::info, &RunInfo::model_path>("model_path"),
      field<&RunRecord::info, &RunInfo::model_sha256>("model_sha256"),
      field<&RunRecord::info, &RunInfo::suite_name>("suite_name"),
      field<&RunRecord::info, &RunInfo::suite_hash>("suite_hash"),
      field<&RunRecord::info, &RunInfo::seed>("seed"),
      field<&RunRecord::info, &RunInfo::threads>("threads"),
      field<&RunRecord::info, &RunInfo::kvgate_version>("kvgate_version"),
      optional_part<&RunRecord::load, &RunLoad::load_avg_start, true>("load_avg_start"),
      optional_part<&RunRecord::load, &RunLoad::load_avg_max>("load_avg_max"),
      optional_part<&RunRecord::load, &RunLoad::cpu_seconds>("cpu_seconds"),
      optional_part<&RunRecord::load, &RunLoad::wall_seconds>("wall_seconds"),
      optional_part<&RunRecord::load, &RunLoad::cores>("cores"),
      text_or_null<&RunRecord::info, &RunInfo::calibration>("calibration"),  // NULL: not calibrated
  };
  return fields;
}

// A run's config is a row of configs (the spec, shared by every run of the file) and one of
// run_configs (its place in this run); one record holds both.
inline const std::vector<FieldColumn<RunConfigRecord>>& config_fields() {
  static const std::vector<FieldColumn<RunConfigRecord>> fields = {
      field<&RunConfigRecord::config_id>("id"),
      field<&RunConfigRecord::spec>("spec"),
      field<&RunConfigRecord::hash>("hash"),
      field<&RunConfigRecord::bits_per_element>("bits_per_element"),
  };
  return fields;
}

// `run_id` is the writer's. A NULL label (a run made before v7) reads as "", which the reader
// makes the spec.
inline const std::vector<FieldColumn<RunConfigRecord>>& run_config_fields() {
  static const std::vector<FieldColumn<RunConfigRecord>> fields = {
      field<&RunConfigRecord::config_id>("config_id"),
      {"role", [](const RunConfigRecord& r) { return SqlValue(config_role_name(r.role)); },
       [](RunConfigRecord& r, const Statement& s, int at) {
         r.role = s.column_text(at) == config_role_name(ConfigRole::reference) ? ConfigRole::reference : ConfigRole::candidate;
       }},
      field<&RunConfigRecord::kv_bytes_per_token>("kv_bytes_per_token"),
      field<&RunConfigRecord::kld_estimator>("kld_estimator"),
      field<&RunConfigRecord::top_k>("top_k"),
      text_or_null<&RunConfigRecord::label>("label"),
  };
  return fields;
}

// `run_id` and `config_id` are the writer's.
inline const std::vector<FieldColumn<ConfigModel>>& config_model_fields() {
  static const std::vector<FieldColumn<ConfigModel>> fields = {
      field<&ConfigModel::kv_spec>("kv_spec"),         field<&ConfigModel::label>("model_label"),
      field<&ConfigModel::path>("model_path"),         field<&ConfigModel::sha256>("model_sha256"),
      field<&ConfigModel::file_bytes>("file_bytes"),   field<&ConfigModel::weight_bytes>("weight_bytes"),
      field<&ConfigModel::weight_type>("weight_type"),
  };
  return fields;
}

// `id` and `run_id` are the writer's.
inline const std::vector<FieldColumn<ItemInfo>>& item_fields() {
  static const std::vector<FieldColumn<ItemInfo>> fields = {
      field<&ItemInfo::item_key>("item_key"),
      field<&ItemInfo::domain>("domain"),
      field<&ItemInfo::evalset_hash>("evalset_hash"),
      field<&ItemInfo::item_hash>("item_hash"),
      field<&ItemInfo::gold_answer>("gold_answer"),
      optional_part<&ItemInfo::calibration, &ItemCalibration::prefill_ms, true>("calibration_prefill_ms"),
      optional_part<&ItemInfo::calibration, &ItemCalibration::decode_ms>("calibration_decode_ms"),
  };
  return fields;
}

// `item_id` is the writer's.
inline const std::vector<FieldColumn<LatencySample>>& latency_fields() {
  static const std::vector<FieldColumn<LatencySample>> fields = {
      field<&LatencySample::config_id>("config_id"),
      field<&LatencySample::turn_index>("turn_index"),
      field<&LatencySample::token_index>("token_index"),
      field<&LatencySample::t_ms>("t_ms"),
  };
  return fields;
}

// `id` and `run_id` are the writer's.
inline const std::vector<FieldColumn<KernelBenchmark>>& kernel_benchmark_fields() {
  static const std::vector<FieldColumn<KernelBenchmark>> fields = {
      field<&KernelBenchmark::kernel>("kernel"),
      field<&KernelBenchmark::format>("format"),
      field<&KernelBenchmark::backend>("backend"),
      field<&KernelBenchmark::head_dim>("head_dim"),
      field<&KernelBenchmark::tokens>("tokens"),
      field<&KernelBenchmark::iterations>("iterations"),
      field<&KernelBenchmark::ns_per_iteration>("ns_per_iteration"),
      field<&KernelBenchmark::bytes_per_second>("bytes_per_second"),
      field<&KernelBenchmark::bound_bytes_per_second>("bound_bytes_per_second"),
  };
  return fields;
}

// `id` and `decided_at` are the writer's.
inline const std::vector<FieldColumn<GateDecision>>& gate_decision_fields() {
  static const std::vector<FieldColumn<GateDecision>> fields = {
      field<&GateDecision::baseline_run_id>("baseline_run_id"),
      field<&GateDecision::candidate_run_id>("candidate_run_id"),
      field<&GateDecision::config_id>("config_id"),
      field<&GateDecision::check_name>("check_name"),
      field<&GateDecision::metric>("metric"),
      field<&GateDecision::passed>("passed"),
      field<&GateDecision::baseline_value>("baseline_value"),
      field<&GateDecision::candidate_value>("candidate_value"),
      field<&GateDecision::delta>("delta"),
      field<&GateDecision::ci_low>("ci_low"),
      field<&GateDecision::ci_high>("ci_high"),
      field<&GateDecision::threshold>("threshold"),
      field<&GateDecision::detail>("detail"),
  };
  return fields;
}

// `run_id` is the writer's. Only a shard has an origin (NULL otherwise, read back as "").
inline const std::vector<FieldColumn<RunPlan>>& run_plan_fields() {
  static const std::vector<FieldColumn<RunPlan>> fields = {
      field<&RunPlan::plan_hash>("plan_hash"),
      field<&RunPlan::plan>("plan"),
      field<&RunPlan::plan_items>("plan_items"),
      field<&RunPlan::shard_index>("shard_index"),
      field<&RunPlan::shard_count>("shard_count"),
      {"shard_origin", [](const RunPlan& p) { return p.shard_index ? SqlValue(p.shard_origin) : SqlValue(); },
       [](RunPlan& p, const Statement& s, int at) { p.shard_origin = s.column_text(at); }},
  };
  return fields;
}

// `run_id` is the writer's.
inline const std::vector<FieldColumn<PlanItem>>& plan_item_fields() {
  static const std::vector<FieldColumn<PlanItem>> fields = {
      field<&PlanItem::position>("position"),
      field<&PlanItem::item_key>("item_key"),
      field<&PlanItem::shard_index>("shard_index"),
  };
  return fields;
}

// `run_id`, the merged run's, is the writer's.
inline const std::vector<FieldColumn<MergeSource>>& merge_source_fields() {
  static const std::vector<FieldColumn<MergeSource>> fields = {
      field<&MergeSource::shard_index>("shard_index"),     field<&MergeSource::shard_count>("shard_count"),
      field<&MergeSource::source_db>("source_db"),         field<&MergeSource::source_run_id>("source_run_id"),
      field<&MergeSource::host>("host"),                   field<&MergeSource::started_at>("started_at"),
      field<&MergeSource::finished_at>("finished_at"),     field<&MergeSource::digest>("digest"),
  };
  return fields;
}

// `run_id` is the writer's (the store stamps `failed_at`; a merge copies the shard's).
inline const std::vector<FieldColumn<ItemFailure>>& failure_fields() {
  static const std::vector<FieldColumn<ItemFailure>> fields = {
      field<&ItemFailure::item_key>("item_key"), field<&ItemFailure::config_id>("config_id"),
      field<&ItemFailure::endpoint>("endpoint"), field<&ItemFailure::failure>("failure"),
      field<&ItemFailure::message>("message"),   field<&ItemFailure::failed_at>("failed_at"),
  };
  return fields;
}

inline const std::vector<FieldColumn<ItemMetrics>>& item_metrics_fields() {
  static const std::vector<FieldColumn<ItemMetrics>> fields = {
      field<&ItemMetrics::config_id>("config_id"),
      field<&ItemMetrics::scored_tokens>("scored_tokens"),
      field<&ItemMetrics::kld_mean>("kld_mean"),
      field<&ItemMetrics::kld_max>("kld_max"),
      field<&ItemMetrics::kld_p99>("kld_p99"),
      field<&ItemMetrics::delta_p_mean>("delta_p_mean"),
      field<&ItemMetrics::delta_p_rms>("delta_p_rms"),
      field<&ItemMetrics::same_top1>("same_top1"),
      field<&ItemMetrics::nll_mean>("nll_mean"),
      field<&ItemMetrics::nll_ref_mean>("nll_ref_mean"),
      field<&ItemMetrics::generated_tokens>("generated_tokens"),
      field<&ItemMetrics::first_divergence>("first_divergence"),
      field<&ItemMetrics::exact_match_ref>("exact_match_ref"),
      field<&ItemMetrics::exact_match_gold>("exact_match_gold"),
  };
  return fields;
}

inline const std::vector<FieldColumn<TurnMetrics>>& turn_metrics_fields() {
  static const std::vector<FieldColumn<TurnMetrics>> fields = {
      field<&TurnMetrics::config_id>("config_id"),
      field<&TurnMetrics::turn_index>("turn_index"),
      field<&TurnMetrics::context_tokens>("context_tokens"),
      field<&TurnMetrics::scored_tokens>("scored_tokens"),
      field<&TurnMetrics::kld_mean>("kld_mean"),
      field<&TurnMetrics::same_top1>("same_top1"),
      field<&TurnMetrics::ttft_ms>("ttft_ms"),
      field<&TurnMetrics::tpot_ms>("tpot_ms"),
      field<&TurnMetrics::prompt_tokens>("prompt_tokens"),
      field<&TurnMetrics::cached_tokens>("cached_tokens"),
      field<&TurnMetrics::answer>("answer"),
      field<&TurnMetrics::answer_tokens>("answer_tokens"),
      field<&TurnMetrics::answer_divergence>("answer_divergence"),
      field<&TurnMetrics::ttft_cpu_ms>("ttft_cpu_ms"),
      field<&TurnMetrics::tpot_cpu_ms>("tpot_cpu_ms"),
  };
  return fields;
}

inline const std::vector<FieldColumn<TokenClassMetrics>>& token_class_fields() {
  static const std::vector<FieldColumn<TokenClassMetrics>> fields = {
      field<&TokenClassMetrics::config_id>("config_id"),
      field<&TokenClassMetrics::token_class>("token_class"),
      field<&TokenClassMetrics::scored_tokens>("scored_tokens"),
      field<&TokenClassMetrics::kld_sum>("kld_sum"),
      field<&TokenClassMetrics::delta_p_sum>("delta_p_sum"),
      field<&TokenClassMetrics::same_top1>("same_top1"),
  };
  return fields;
}

inline const std::vector<FieldColumn<PositionMetrics>>& position_fields() {
  static const std::vector<FieldColumn<PositionMetrics>> fields = {
      field<&PositionMetrics::config_id>("config_id"),
      field<&PositionMetrics::turn_index>("turn_index"),
      field<&PositionMetrics::position_from>("position_from"),
      field<&PositionMetrics::position_to>("position_to"),
      field<&PositionMetrics::scored_tokens>("scored_tokens"),
      field<&PositionMetrics::kld_sum>("kld_sum"),
      field<&PositionMetrics::delta_p_sum>("delta_p_sum"),
      field<&PositionMetrics::same_top1>("same_top1"),
  };
  return fields;
}

// "SELECT i.item_key, i.domain, <the table's columns as t.*> FROM <table> t JOIN items i ..." for
// one run's rows, in the store's order (`order`: the table's columns after the item key); the
// record's columns start at 2.
inline std::string run_rows_select(const DigestedTable& table, std::string_view order) {
  return "SELECT i.item_key, i.domain, " + digest_columns(table, "t") + " FROM " + std::string(table.name) +
         " t JOIN items i ON i.id = t.item_id WHERE i.run_id = ?1 ORDER BY i.item_key, " + std::string(order);
}

}  // namespace kvgate::results
