#pragma once
// The item tables' records as columns (results/record_columns.h): each field of ItemMetrics,
// TurnMetrics, TokenClassMetrics and PositionMetrics beside the column that stores it. The item
// writer's inserts, the store's reads and the merge's reads of these tables are made from these
// lists and the tables' column lists; `item_id`, the row id of the item, is the writer's.
#include <vector>

#include "results/record_columns.h"
#include "results/store.h"

namespace kvgate::results {

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
