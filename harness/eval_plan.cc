#include "harness/eval_plan.h"

#include <algorithm>

#include "core/error.h"
#include "core/hash.h"
#include "evalsets/suite.h"

namespace kvgate::harness {
namespace {

// A workload with the configs its suite asks for (none for an eval set or trace).
struct LoadedWorkload {
  Workload workload;
  std::vector<std::string> suite_kv;
  std::string suite_ref = "f16";
};

LoadedWorkload load_workload(const std::string& source) {
  LoadedWorkload out;
  Workload& w = out.workload;
  w.source = source;
  const size_t colon = source.find(':');
  const std::string kind = source.substr(0, colon), arg = source.substr(colon + 1);
  if (kind == "suite") {
    const evalsets::Suite suite = evalsets::load_suite(arg);
    w.name = suite.name;
    w.items = evalsets::materialize_suite(suite);
    w.hash = hex_u64(evalsets::suite_hash(suite, w.items));
    out.suite_kv = suite.kv;
    out.suite_ref = suite.ref;
  } else {
    w.name = arg;
    w.items = evalsets::load_items(arg);
    w.hash = hex_u64(evalsets::evalset_hash(w.items));
    if (kind == "trace")
      for (const evalsets::EvalItem& item : w.items)
        if (item.has_text || item.score != evalsets::ScoreKind::turns)
          throw_input_error(arg + ": item " + item.id +
                            " is not a session: replay needs messages scored per assistant turn (\"score\": {\"kind\": \"turns\"})");
  }
  return out;
}

void add_config(EvalPlan& plan, ConfigRole role, kernels::KvConfig kv) {
  PlannedConfig c{role, std::move(kv), {}};
  c.spec = c.kv.canonical();
  for (const PlannedConfig& other : plan.configs)
    if (other.spec == c.spec)
      throw_usage_error("KV config " + c.spec + " is given twice" +
                        (other.role == ConfigRole::reference ? " (it is the reference config; candidates must differ from it)"
                                                              : ""));
  plan.configs.push_back(std::move(c));
}

}  // namespace

const char* config_role_name(ConfigRole role) { return role == ConfigRole::reference ? "reference" : "candidate"; }

EvalPlan plan_from_flags(const PlanFlags& f) {
  const int sources = !f.suite.empty() + !f.evalset.empty() + !f.trace.empty();
  if (sources != 1)
    throw_usage_error(f.replay ? "give --trace FILE (or --resume RUN)"
                               : "give exactly one of --suite or --evalset (or --resume RUN)");
  LoadedWorkload loaded =
      load_workload(!f.suite.empty() ? "suite:" + f.suite : !f.evalset.empty() ? "evalset:" + f.evalset : "trace:" + f.trace);
  std::vector<kernels::KvConfig> candidates;
  if (f.kv.empty()) {
    for (const std::string& spec : loaded.suite_kv) candidates.push_back(kernels::parse_kv_config(spec));
  } else {
    candidates = kernels::parse_kv_config_list(f.kv);
  }
  if (candidates.empty()) throw_usage_error("no KV configs to evaluate: give --kv SPEC[,SPEC...]");
  EvalPlan plan;
  plan.workload = std::move(loaded.workload);
  plan.model = f.model;
  add_config(plan, ConfigRole::reference, kernels::parse_kv_config(f.ref.empty() ? loaded.suite_ref : f.ref));
  for (kernels::KvConfig& c : candidates) add_config(plan, ConfigRole::candidate, std::move(c));
  return plan;
}

EvalPlan plan_from_stored_run(int64_t run_id, const std::string& source, const std::string& hash,
                              const std::string& model_path, const std::vector<StoredConfig>& configs) {
  EvalPlan plan;
  plan.workload = load_workload(source).workload;
  if (plan.workload.hash != hash)
    throw_input_error(source + ": its content hash is now " + plan.workload.hash + " but run " + std::to_string(run_id) +
                      " was made with " + hash + "; the items changed, start a new run");
  plan.model = model_path;
  plan.resume_run = run_id;
  const auto ref = std::find_if(configs.begin(), configs.end(),
                                [](const StoredConfig& c) { return c.role == ConfigRole::reference; });
  if (ref == configs.end()) throw_input_error("run " + std::to_string(run_id) + " has no reference config to resume with");
  add_config(plan, ConfigRole::reference, kernels::parse_kv_config(ref->spec));
  for (const StoredConfig& c : configs)
    if (c.role == ConfigRole::candidate) add_config(plan, ConfigRole::candidate, kernels::parse_kv_config(c.spec));
  return plan;
}

}  // namespace kvgate::harness
