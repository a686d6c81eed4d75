#pragma once
// A config has two names: its label, what the user typed (`q4_0`, `Q4_0+q4_0`, `endpoint:NAME`),
// which every table shows, and its canonical spec (`q4_0:rot=wht/q4_0:rot=wht`), which results
// are keyed, paired and gated by. Tables print labels, and a legend line (or the JSON's `spec`)
// gives the canonical spec of each label that differs from it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "results/stored_run.h"

namespace kvgate::harness {

struct ConfigName {
  std::string label, spec;
};

std::vector<ConfigName> config_names(const std::vector<results::StoredConfig>& configs);

// "canonical specs: q4_0 = q4_0:rot=wht/q4_0:rot=wht; fp8 = fp8_e4m3/fp8_e4m3" for the configs
// whose label is not their spec, in the order given; "" when every label is its spec (a run made
// before labels were recorded shows its canonical specs and needs none).
std::string canonical_legend(const std::vector<ConfigName>& configs);

// The label of the run's config `spec`; `spec` itself for one the run does not have.
std::string label_of(const std::vector<results::StoredConfig>& configs, const std::string& spec);

// What a user typed to name a stored config (a policy rule's `kv`, `--pair-config`, `--config`):
// it names config C when it is C's label or spec as written (what `runs show` prints), or when it
// means the same: the typed text read with today's grammar (kernels::parse_kv_config), C's stored
// spec as the stored run bound it (results::StoredConfig::kv, read with
// kernels::parse_stored_kv_config), so `q4_0/q4_0`, as an older kvgate
// stored its unrotated q4_0, names that run's config and not a rotated one. A weights config
// (`LABEL+KV`) or an endpoint's (`endpoint:NAME=KV`) is named by its prefix and the KV part's
// meaning.
class ConfigMatcher {
 public:
  explicit ConfigMatcher(std::string typed);
  bool names(const results::StoredConfig& config) const;
  const std::string& typed() const { return typed_; }
  // Why the typed text is not a KV spec ("" when it is one).
  const std::string& parse_problem() const { return parse_problem_; }

 private:
  std::string typed_;
  std::optional<kernels::KvConfig> kv_;  // the typed text's KV part read with today's grammar
  std::string parse_problem_;
};

// "f16 (f16/f16), q4_0/q4_0": a run's configs as a message lists them, label and spec.
std::string config_list(const std::vector<results::StoredConfig>& configs);

// A config named on the command line (`--config`): one the ConfigMatcher finds; returns its
// spec. Usage error listing the run's configs (label and spec) otherwise.
std::string resolve_config(const std::string& typed, const std::vector<results::StoredConfig>& configs,
                           const std::string& db, int64_t run_id);

}  // namespace kvgate::harness
