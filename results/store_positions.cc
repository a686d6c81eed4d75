// Position buckets (docs/schema.md "Position buckets"): written with the item's transaction,
// read back in the store's order.
#include "results/store.h"

namespace kvgate::results {

void ItemWriter::add_position(const PositionMetrics& p) {
  seal_.add(RowInserter(connection_, digested_table("position_metrics"))
                .insert({item_row_id_, p.config_id, p.turn_index, p.position_from, p.position_to, p.scored_tokens,
                         p.kld_sum, p.delta_p_sum, p.same_top1}));
}

std::vector<RunPositionMetrics> Store::run_position_metrics(int64_t run_id) {
  begin_run_read("position_metrics", run_id);
  Statement s(*connection_,
              "SELECT i.item_key, i.domain, p.config_id, p.turn_index, p.position_from, p.position_to, p.scored_tokens, "
              "p.kld_sum, p.delta_p_sum, p.same_top1 FROM position_metrics p JOIN items i ON i.id = p.item_id "
              "WHERE i.run_id = ?1 ORDER BY i.item_key, p.config_id, p.turn_index, p.position_from");
  s.bind(1, run_id);
  std::vector<RunPositionMetrics> out;
  while (s.step()) {
    RunPositionMetrics r{s.column_text(0), s.column_text(1), {}};
    r.position = {s.column_int(2), s.column_int(3), s.column_int(4), s.column_optional_int(5),
                  s.column_int(6), s.column_double(7), s.column_double(8), s.column_int(9)};
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvgate::results
