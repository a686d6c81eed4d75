#include "harness/report/config_labels.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/kv_config.h"

namespace kvgate::harness {

std::vector<ConfigName> config_names(const std::vector<results::StoredConfig>& configs) {
  std::vector<ConfigName> out;
  for (const results::StoredConfig& c : configs) out.push_back({c.label.empty() ? c.spec : c.label, c.spec});
  return out;
}

std::string canonical_legend(const std::vector<ConfigName>& configs) {
  std::string out;
  for (const ConfigName& c : configs)
    if (!c.label.empty() && c.label != c.spec) out += (out.empty() ? "canonical specs: " : "; ") + c.label + " = " + c.spec;
  return out;
}

std::string label_of(const std::vector<results::StoredConfig>& configs, const std::string& spec) {
  for (const results::StoredConfig& c : configs)
    if (c.spec == spec) return c.label.empty() ? c.spec : c.label;
  return spec;
}

ConfigMatcher::ConfigMatcher(std::string typed) : typed_(std::move(typed)) {
  try {
    kv_ = kernels::parse_kv_config(typed_.substr(results::stored_spec_prefix(typed_).size()));
  } catch (const Error& e) {
    parse_problem_ = e.what();
  }
}

bool ConfigMatcher::names(const results::StoredConfig& c) const {
  if (typed_ == c.spec || typed_ == c.label) return true;
  // Not a KV spec, or a stored spec this build cannot read: named only as written.
  if (!kv_ || !c.kv) return false;
  return results::stored_spec_prefix(typed_) == results::stored_spec_prefix(c.spec) && *kv_ == *c.kv;
}

std::string config_list(const std::vector<results::StoredConfig>& configs) {
  std::string names;
  for (const results::StoredConfig& c : configs)
    names += (names.empty() ? "" : ", ") + (c.label == c.spec || c.label.empty() ? c.spec : c.label + " (" + c.spec + ")");
  return names.empty() ? "none" : names;
}

std::string resolve_config(const std::string& typed, const std::vector<results::StoredConfig>& configs,
                           const std::string& db, int64_t run_id) {
  // The label or spec as written wins over another config that means the same.
  for (const results::StoredConfig& c : configs)
    if (c.label == typed || c.spec == typed) return c.spec;
  const ConfigMatcher matcher(typed);
  for (const results::StoredConfig& c : configs)
    if (matcher.names(c)) return c.spec;
  throw_usage_error(fmt::format("--config '{}': run {} in {} has no such config (it has {})", echo_user_text(typed), run_id,
                                db, config_list(configs)));
}

}  // namespace kvgate::harness
