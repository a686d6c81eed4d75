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

std::string resolve_config(const std::string& typed, const std::vector<results::RunConfigRecord>& configs,
                           const std::string& db, int64_t run_id) {
  for (const results::RunConfigRecord& c : configs)
    if (c.label == typed || c.spec == typed) return c.spec;
  // Another spelling of a stored config ("q4_0/q4_0" for the typed "q4_0").
  std::string canonical;
  try {
    canonical = kernels::parse_kv_config(typed).canonical();
  } catch (const Error&) {
    canonical.clear();
  }
  std::string names;
  for (const results::RunConfigRecord& c : configs) {
    if (!canonical.empty() && c.spec == canonical) return c.spec;
    names += (names.empty() ? "" : ", ") + (c.label == c.spec || c.label.empty() ? c.spec : c.label + " (" + c.spec + ")");
  }
  throw_usage_error(fmt::format("--config '{}': run {} in {} has no such config (it has {})", echo_user_text(typed), run_id,
                                db, names));
}

}  // namespace kvgate::harness
