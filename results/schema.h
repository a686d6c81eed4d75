#pragma once
// The results schema as an ordered list of migrations. Migration i (1-based) brings a
// database from user_version i-1 to i; a released migration is never edited, only appended
// to, so every database ever written can be brought forward. docs/schema.md describes the
// tables.
#include <span>
#include <string_view>

namespace kvgate::results {

std::span<const std::string_view> schema_migrations();
inline int latest_schema_version() { return static_cast<int>(schema_migrations().size()); }

// The version whose migration added row digests. A file brought forward from below it has every
// row sealed with the digests of its values as they are then (results/row_digest.h). A later
// migration that changes a digested table's columns changes what its digests cover: it raises
// this to its own version, so rows written before it are sealed again: 10 added the CPU
// latencies and the calibration (runs, items, turn_metrics).
inline constexpr int kRowDigestsSince = 10;

}  // namespace kvgate::results
