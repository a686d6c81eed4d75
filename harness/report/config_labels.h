#pragma once
// A config has two names: its label, what the user typed (`q4_0`, `Q4_0+q4_0`, `endpoint:NAME`),
// which every table shows, and its canonical spec (`q4_0:rot=wht/q4_0:rot=wht`), which results
// are keyed, paired and gated by. Tables print labels, and a legend line (or the JSON's `spec`)
// gives the canonical spec of each label that differs from it.
#include <cstdint>
#include <string>
#include <vector>

#include "results/store.h"

namespace kvgate::harness {

struct ConfigName {
  std::string label, spec;
};

std::vector<ConfigName> config_names(const std::vector<results::RunConfigRecord>& configs);

// "canonical specs: q4_0 = q4_0:rot=wht/q4_0:rot=wht; fp8 = fp8_e4m3/fp8_e4m3" for the configs
// whose label is not their spec, in the order given; "" when every label is its spec (a run made
// before labels were recorded shows its canonical specs and needs none).
std::string canonical_legend(const std::vector<ConfigName>& configs);

// The label of the run's config `spec`; `spec` itself for one the run does not have.
std::string label_of(const std::vector<results::RunConfigRecord>& configs, const std::string& spec);

// A config named on the command line (`--config`): a label or a spec of the run, or a spelling
// that canonicalizes to one of its specs; returns the spec. Usage error listing the run's configs
// (label and spec) otherwise.
std::string resolve_config(const std::string& typed, const std::vector<results::RunConfigRecord>& configs,
                           const std::string& db, int64_t run_id);

}  // namespace kvgate::harness
