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

}  // namespace kvgate::results
