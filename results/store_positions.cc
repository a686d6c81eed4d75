// Position buckets (docs/schema.md "Position buckets"): written with the item's transaction,
// read back in the store's order.
#include "results/store.h"
#include "results/store_columns.h"

namespace kvgate::results {

void ItemWriter::add_position(const PositionMetrics& p) {
  const DigestedTable& t = digested_table("position_metrics");
  seal_.add(RowInserter(connection_, t).insert(record_row(t, position_fields(), p, {{"item_id", item_row_id_}})));
}

std::vector<RunPositionMetrics> Store::run_position_metrics(int64_t run_id) {
  begin_run_read("position_metrics", run_id);
  const DigestedTable& t = digested_table("position_metrics");
  Statement s(*connection_, run_rows_select(t, "t.config_id, t.turn_index, t.position_from"));
  s.bind(1, run_id);
  std::vector<RunPositionMetrics> out;
  while (s.step()) {
    RunPositionMetrics r{s.column_text(0), s.column_text(1), {}};
    read_record(s, 2, t, position_fields(), r.position);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvgate::results
