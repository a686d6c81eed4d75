#include "harness/report/config_labels.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/kv_config.h"

namespace kvgate::harness {

std::vector<ConfigName> config_names(const std::vector<results::RunConfigRecord>& configs) {
  std::vector<ConfigName> out;
  for (const results::RunConfigRecord& c : configs) out.push_back({c.label.empty() ? c.spec : c.label, c.spec});
  return out;
}

std::string canonical_legend(const std::vector<ConfigName>& configs) {
  std::string out;
  for (const ConfigName& c : configs)
    if (!c.label.empty() && c.label != c.spec) out += (out.empty() ? "canonical specs: " : "; ") + c.label + " = " + c.spec;
  return out;
}

std::string label_of(const std::vector<results::RunConfigRecord>& configs, const std::string& spec) {
  for (const results::RunConfigRecord& c : configs)
    if (c.spec == spec) return c.label.empty() ? c.spec : c.label;
  return spec;
}

namespace {

// The part of a stored spec before its KV config: "LABEL+" of a weights config, "endpoint:NAME="
// of an endpoint's; "" for a plain KV config.
std::string_view spec_prefix(std::string_view spec) {
  if (spec.rfind("endpoint:", 0) == 0) {
    const size_t eq = spec.find('=');
    return eq == std::string_view::npos ? spec : spec.substr(0, eq + 1);
  }
  const size_t plus = spec.find('+');
  return plus == std::string_view::npos ? std::string_view() : spec.substr(0, plus + 1);
}

}  // namespace

ConfigMatcher::ConfigMatcher(std::string typed) : typed_(std::move(typed)) {
  try {
    kernels::parse_kv_config(typed_.substr(spec_prefix(typed_).size()));
  } catch (const Error& e) {
    parse_problem_ = e.what();
  }
}

bool ConfigMatcher::names(const results::RunConfigRecord& c) const {
  if (typed_ == c.spec || typed_ == c.label) return true;
  const std::string_view prefix = spec_prefix(c.spec);
  if (typed_.compare(0, prefix.size(), prefix) != 0 || spec_prefix(typed_) != prefix) return false;
  try {
    return kernels::parse_kv_config(std::string_view(typed_).substr(prefix.size())) ==
           kernels::parse_stored_kv_config(std::string_view(c.spec).substr(prefix.size()));
  } catch (const Error&) {
    return false;  // not a KV spec, or a stored spec this build cannot read: named only as written
  }
}

std::string config_list(const std::vector<results::RunConfigRecord>& configs) {
  std::string names;
  for (const results::RunConfigRecord& c : configs)
    names += (names.empty() ? "" : ", ") + (c.label == c.spec || c.label.empty() ? c.spec : c.label + " (" + c.spec + ")");
  return names.empty() ? "none" : names;
}

std::string resolve_config(const std::string& typed, const std::vector<results::RunConfigRecord>& configs,
                           const std::string& db, int64_t run_id) {
  // The label or spec as written wins over another config that means the same.
  for (const results::RunConfigRecord& c : configs)
    if (c.label == typed || c.spec == typed) return c.spec;
  const ConfigMatcher matcher(typed);
  for (const results::RunConfigRecord& c : configs)
    if (matcher.names(c)) return c.spec;
  throw_usage_error(fmt::format("--config '{}': run {} in {} has no such config (it has {})", echo_user_text(typed), run_id,
                                db, config_list(configs)));
}

}  // namespace kvgate::harness
