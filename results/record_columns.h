#pragma once
// Where a store record's fields meet their table's columns, by column name: one list per record
// (`field<&ItemMetrics::kld_mean>("kld_mean")`, ...) from which both the row a writer inserts and
// the record a reader fills are made, in the order of the table's column list
// (results/row_digest.h, the one list of each table's columns and types). So no statement holds a
// column by its position: a column added to a table is a line in that list and a line here, and a
// column the list has but no field (nor the writer) supplies is an internal error on the first
// write, which every store test makes.
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "results/row_digest.h"
#include "results/sqlite.h"

namespace kvgate::results {

namespace record_columns {
inline void read(const Statement& s, int at, double& v) { v = s.column_double(at); }
inline void read(const Statement& s, int at, int64_t& v) { v = s.column_int(at); }
inline void read(const Statement& s, int at, bool& v) { v = s.column_int(at) != 0; }
inline void read(const Statement& s, int at, std::string& v) { v = s.column_text(at); }
inline void read(const Statement& s, int at, std::optional<int64_t>& v) { v = s.column_optional_int(at); }
inline void read(const Statement& s, int at, std::optional<bool>& v) {
  const std::optional<int64_t> x = s.column_optional_int(at);
  v = x ? std::optional<bool>(*x != 0) : std::nullopt;
}
inline void read(const Statement& s, int at, std::optional<std::string>& v) {
  v = s.is_null(at) ? std::nullopt : std::optional<std::string>(s.column_text(at));
}

template <typename>
struct MemberOf;
template <typename R, typename T>
struct MemberOf<T R::*> {
  using Record = R;
};

// The member a path of member pointers names: `at<&RunRecord::info, &RunInfo::command>(run)`.
template <auto Member, auto... Rest>
constexpr auto& at(auto& record) {
  if constexpr (sizeof...(Rest) == 0)
    return record.*Member;
  else
    return at<Rest...>(record.*Member);
}
}  // namespace record_columns

template <typename Record>
struct FieldColumn {
  std::string_view column;
  SqlValue (*get)(const Record&);
  void (*read)(Record&, const Statement&, int at);
};

template <auto First>
using RecordOf = typename record_columns::MemberOf<decltype(First)>::Record;

// The field `Member` of its record stored in `column`; a path of members names a field of a
// member (`field<&RunRecord::info, &RunInfo::command>("command")`).
template <auto Member, auto... Rest>
FieldColumn<RecordOf<Member>> field(std::string_view column) {
  using R = RecordOf<Member>;
  return {column, [](const R& r) { return SqlValue(record_columns::at<Member, Rest...>(r)); },
          [](R& r, const Statement& s, int at) { record_columns::read(s, at, record_columns::at<Member, Rest...>(r)); }};
}

// A text field whose empty value is stored as NULL (a run's finish time while it runs, a
// config's label before labels were recorded), and read back as "".
template <auto Member, auto... Rest>
FieldColumn<RecordOf<Member>> text_or_null(std::string_view column) {
  using R = RecordOf<Member>;
  return {column,
          [](const R& r) {
            const std::string& v = record_columns::at<Member, Rest...>(r);
            return v.empty() ? SqlValue() : SqlValue(v);
          },
          [](R& r, const Statement& s, int at) { record_columns::at<Member, Rest...>(r) = s.column_text(at); }};
}

// One of the columns that together hold an optional struct of the record (a run's load, an
// item's calibration): all NULL when it is absent. The group's first field in the list `Opens`
// it: a NULL there reads the struct as absent, a value makes it present; each later field of
// the group reads into it only if present, and a NULL there makes it absent, so the struct is
// present only when every column holds a value.
template <auto Optional, auto Member, bool Opens = false>
FieldColumn<RecordOf<Optional>> optional_part(std::string_view column) {
  using R = RecordOf<Optional>;
  return {column,
          [](const R& r) {
            const auto& o = r.*Optional;
            return o ? SqlValue((*o).*Member) : SqlValue();
          },
          [](R& r, const Statement& s, int at) {
            auto& o = r.*Optional;
            if (s.is_null(at)) {
              o.reset();
              return;
            }
            if constexpr (Opens)
              o.emplace();
            else if (!o)
              return;
            record_columns::read(s, at, (*o).*Member);
          }};
}

// A value the writer supplies that is not the record's (the row id of the item it belongs to).
using FixedColumn = std::pair<std::string_view, SqlValue>;

// `record` as a row of `table`, in its column order: each column from `fixed` or from its field.
template <typename Record>
Row record_row(const DigestedTable& table, const std::vector<FieldColumn<Record>>& fields, const Record& record,
               std::initializer_list<FixedColumn> fixed) {
  Row row;
  row.reserve(table.columns.size());
  for (const Column& c : table.columns) {
    const FixedColumn* f = nullptr;
    for (const FixedColumn& x : fixed)
      if (x.first == c.name) f = &x;
    if (f) {
      row.push_back(f->second);
      continue;
    }
    const FieldColumn<Record>* field = nullptr;
    for (const FieldColumn<Record>& x : fields)
      if (x.column == c.name) field = &x;
    if (!field)
      throw_internal_error("results table " + std::string(table.name) + ": column " + std::string(c.name) +
                           " has no field of the record written to it (results/record_columns.h)");
    row.push_back(field->get(record));
  }
  return row;
}

// Sets `columns` of `row` (a row of `table`, as update_row hands it) from their fields of `record`.
template <typename Record>
void set_columns(const DigestedTable& table, const std::vector<FieldColumn<Record>>& fields, const Record& record, Row& row,
                 std::initializer_list<std::string_view> columns) {
  for (std::string_view column : columns) {
    const FieldColumn<Record>* field = nullptr;
    for (const FieldColumn<Record>& x : fields)
      if (x.column == column) field = &x;
    if (!field)
      throw_internal_error("results table " + std::string(table.name) + ": column " + std::string(column) +
                           " has no field of the record (results/record_columns.h)");
    row[column_index(table, column)] = field->get(record);
  }
}

// Fills `record` from the row `s` holds from column `first` on, in digest_columns(table)'s order.
template <typename Record>
void read_record(const Statement& s, int first, const DigestedTable& table, const std::vector<FieldColumn<Record>>& fields,
                 Record& record) {
  for (const FieldColumn<Record>& f : fields) f.read(record, s, first + static_cast<int>(column_index(table, f.column)));
}

// The rows of run `run_id` in a table keyed by run (its `run_id` column), as records, in `order`.
template <typename Record>
std::vector<Record> read_run_records(Connection& c, const DigestedTable& table, const std::vector<FieldColumn<Record>>& fields,
                                     int64_t run_id, std::string_view order) {
  Statement s(c, "SELECT " + digest_columns(table) + " FROM " + std::string(table.name) + " WHERE run_id = ?1 ORDER BY " +
                     std::string(order));
  s.bind(1, run_id);
  std::vector<Record> out;
  while (s.step()) {
    Record r;
    read_record(s, 0, table, fields, r);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvgate::results
