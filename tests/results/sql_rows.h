#pragma once
// Test helper: what a query returns, one string per row, for comparing whole tables between
// runs (a merged run against the unsharded one, a resumed run against a straight one).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/hash.h"
#include "results/sqlite.h"

namespace kvgate::testing {

// `kinds` has a letter per column: 'd' for a REAL, written as its bits so equal strings mean
// bit-identical doubles (NULL as "null"); anything else as SQLite's text of the value.
inline std::vector<std::string> sql_rows(const std::string& db, const std::string& sql, const std::string& kinds) {
  results::Connection c(db, false);
  results::Statement s(c, sql);
  std::vector<std::string> out;
  while (s.step()) {
    std::string row;
    for (size_t col = 0; col < kinds.size(); ++col) {
      const int i = static_cast<int>(col);
      if (kinds[col] == 'd' && !s.is_null(i)) {
        const double v = s.column_double(i);
        uint64_t bits = 0;
        std::memcpy(&bits, &v, sizeof bits);
        row += hex_u64(bits);
      } else {
        row += s.is_null(i) ? "null" : s.column_text(i);
      }
      row += "|";
    }
    out.push_back(row);
  }
  return out;
}

}  // namespace kvgate::testing
