#include "harness/eval_plan.h"

#include <algorithm>
#include <charconv>

#include "core/error.h"
#include "core/hash.h"
#include "evalsets/suite.h"
#include "serving/adapters.h"

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

void add_planned(EvalPlan& plan, PlannedConfig c) {
  // Endpoint names are unique (serving/endpoint.h), so an endpoint whose KV discovery settles
  // later (empty spec) cannot repeat another config.
  for (const PlannedConfig& other : plan.configs)
    if (!c.spec.empty() && other.spec == c.spec)
      throw_usage_error("KV config " + c.spec + " is given twice" +
                        (other.role == ConfigRole::reference ? " (it is the reference config; candidates must differ from it)"
                                                              : ""));
  plan.configs.push_back(std::move(c));
}

// A whole number in [0, 2^62), or nullopt.
std::optional<int64_t> parse_count(std::string_view text) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || v < 0 || v >= (int64_t{1} << 62))
    return std::nullopt;
  return v;
}

ShardSpec checked_shard(std::string_view index_text, std::string_view count_text, const std::string& origin,
                        const std::string& fix) {
  const std::optional<int64_t> index = parse_count(index_text), count = parse_count(count_text);
  if (!index || !count || *count < 1)
    throw_usage_error(origin + ": a shard is INDEX/COUNT, two whole numbers with COUNT >= 1; " + fix);
  if (*index >= *count)
    throw_usage_error(origin + ": shard index " + std::to_string(*index) + " is outside 0.." + std::to_string(*count - 1) +
                      " (shards are numbered from 0); " + fix);
  return ShardSpec{*index, *count, origin};
}

void add_config(EvalPlan& plan, ConfigRole role, kernels::KvConfig kv) {
  PlannedConfig c;
  c.role = role;
  c.kv = std::move(kv);
  c.spec = c.kv.canonical();
  add_planned(plan, std::move(c));
}

}  // namespace

int64_t shard_of_item(std::string_view item_id, int64_t count) {
  return static_cast<int64_t>(xxhash64(item_id) % static_cast<uint64_t>(count));
}

std::optional<ShardSpec> resolve_shard(const std::string& flag, const std::function<const char*(const char*)>& getenv) {
  if (!flag.empty()) {
    const size_t slash = flag.find('/');
    const std::string origin = "--shard " + echo_user_text(flag);
    if (slash == std::string::npos) throw_usage_error(origin + ": give the shard as INDEX/COUNT, e.g. --shard 0/4");
    return checked_shard(std::string_view(flag).substr(0, slash), std::string_view(flag).substr(slash + 1), origin,
                         "e.g. --shard 0/4 is the first of four");
  }
  auto value = [&](const char* name) -> std::optional<std::string> {
    const char* v = getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
  };
  // The scheduler's own variables: a Slurm array task, else a Kubernetes Indexed Job pod.
  const std::pair<const char*, const char*> sources[] = {{"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"},
                                                         {"JOB_COMPLETION_INDEX", "KVGATE_SHARD_COUNT"}};
  for (const auto& [index_var, count_var] : sources) {
    const std::optional<std::string> index = value(index_var);
    if (!index) continue;
    const std::optional<std::string> count = value(count_var);
    const std::string fix = "pass --shard INDEX/COUNT to override, or --shard 0/1 to run the whole plan";
    if (!count)
      throw_usage_error(std::string(index_var) + "=" + echo_user_text(*index) + " is set but " + count_var +
                        " is not: kvgate takes its shard from them; " + fix);
    return checked_shard(*index, *count,
                         std::string(index_var) + "=" + echo_user_text(*index) + ", " + count_var + "=" + echo_user_text(*count),
                         fix);
  }
  return std::nullopt;
}

size_t EvalPlan::plan_items() const {
  return limit > 0 ? std::min(workload.items.size(), static_cast<size_t>(limit)) : workload.items.size();
}

void select_items(EvalPlan& plan) {
  plan.selected.clear();
  for (size_t i = 0; i < plan.plan_items(); ++i)
    if (!plan.shard || shard_of_item(plan.workload.items[i].id, plan.shard->count) == plan.shard->index)
      plan.selected.push_back(i);
}

std::string describe_plan(const EvalPlan& plan, const PlanSettings& s) {
  std::string text = "kvgate_plan 1\n";
  text += "workload " + plan.workload.source + "\n";
  text += "workload_hash " + plan.workload.hash + "\n";
  text += "items " + std::to_string(plan.plan_items()) + "\n";
  text += "model_sha256 " + s.model_sha256 + "\n";
  for (const PlannedConfig& c : plan.configs) {
    text += std::string("config ") + config_role_name(c.role) + " " + c.spec;
    if (c.top_k > 0) text += " topk " + std::to_string(c.top_k);
    text += "\n";
  }
  text += "max_new_tokens " + std::to_string(s.max_new_tokens) + "\n";
  text += "threads " + std::to_string(s.threads) + "\n";
  text += "backend " + s.backend + "\n";
  text += "kvgate " + s.kvgate_version + " git " + s.git_sha + "\n";
  return text;
}

std::string plan_value(const std::string& plan_text, const std::string& key) {
  const std::string prefix = key + " ";
  for (size_t at = 0; at < plan_text.size();) {
    const size_t end = std::min(plan_text.find('\n', at), plan_text.size());
    if (plan_text.compare(at, prefix.size(), prefix) == 0) return plan_text.substr(at + prefix.size(), end - at - prefix.size());
    at = end + 1;
  }
  return "";
}

// An endpoint's KV config from what the user said: the endpoints file's "kv", else its name
// when that is a KV spec. Otherwise discovery settles it (settle_endpoint_kv).
PlannedConfig endpoint_config(ConfigRole role, serving::EndpointConfig endpoint, int top_k) {
  PlannedConfig c;
  c.role = role;
  c.top_k = top_k;
  if (!endpoint.kv.empty()) {
    try {
      c.kv = kernels::parse_kv_config(endpoint.kv);
    } catch (const Error& e) {
      throw_usage_error("endpoint '" + endpoint.name + "': kv '" + echo_user_text(endpoint.kv) + "': " + e.what());
    }
    c.kv_source = "stated";
  } else {
    try {
      c.kv = kernels::parse_kv_config(endpoint.name);
      c.kv_source = "name";
    } catch (const Error&) {
      // Not a KV spec: the engine may report its KV dtype at discovery.
    }
  }
  if (!c.kv_source.empty()) c.spec = endpoint_spec(endpoint.name, c.kv);
  c.endpoint = std::move(endpoint);
  return c;
}

std::vector<serving::EndpointConfig> endpoints_from_flags(const PlanFlags& f) {
  if (!f.endpoints.empty() && !f.endpoints_file.empty()) throw_usage_error("give --endpoint or --endpoints FILE, not both");
  if (!f.endpoints.empty()) return serving::parse_endpoint_flag(f.endpoints);
  if (!f.endpoints_file.empty()) return serving::load_endpoints_file(f.endpoints_file);
  return {};
}

std::string endpoint_spec(const std::string& endpoint_name, const kernels::KvConfig& kv) {
  return "endpoint:" + endpoint_name + "=" + kv.canonical();
}

bool emulates(const kernels::KvConfig& emulation, const kernels::KvConfig& engine) {
  return emulation.key.format == engine.key.format && emulation.value.format == engine.value.format;
}

bool EvalPlan::has_endpoints() const {
  return std::any_of(configs.begin(), configs.end(), [](const PlannedConfig& c) { return c.endpoint.has_value(); });
}

bool EvalPlan::has_in_process_configs() const {
  return std::any_of(configs.begin(), configs.end(), [](const PlannedConfig& c) { return !c.endpoint.has_value(); });
}

void settle_endpoint_kv(PlannedConfig& c, const std::string& reported) {
  if (!c.endpoint || !c.kv_source.empty()) return;
  if (reported.empty())
    throw_usage_error("endpoint '" + c.endpoint->name + "': kvgate cannot tell which KV config it runs (its name is not a KV "
                      "spec and the engine does not report one): name it after the config (q8_0=URL) or give \"kv\" in "
                      "an endpoints file");
  try {
    c.kv = kernels::parse_kv_config(reported);
  } catch (const Error& e) {
    throw_usage_error("endpoint '" + c.endpoint->name + "' reports KV cache dtype '" + echo_user_text(reported) +
                      "', which kvgate does not know (" + e.what() + "); give \"kv\" in an endpoints file");
  }
  c.kv_source = "engine";
  c.spec = endpoint_spec(c.endpoint->name, c.kv);
}

const char* config_role_name(ConfigRole role) { return role == ConfigRole::reference ? "reference" : "candidate"; }

EvalPlan plan_from_flags(const PlanFlags& f) {
  const int sources = !f.suite.empty() + !f.evalset.empty() + !f.trace.empty();
  if (sources != 1)
    throw_usage_error(f.replay ? "give --trace FILE (or --resume RUN)"
                               : "give exactly one of --suite or --evalset (or --resume RUN)");
  LoadedWorkload loaded =
      load_workload(!f.suite.empty() ? "suite:" + f.suite : !f.evalset.empty() ? "evalset:" + f.evalset : "trace:" + f.trace);
  std::vector<serving::EndpointConfig> endpoints = endpoints_from_flags(f);
  if (endpoints.empty() && !f.ref_endpoint.empty()) throw_usage_error("--ref-endpoint needs --endpoint or --endpoints");
  if (!endpoints.empty() && (f.top_k < 1 || f.top_k > serving::kMaxTopLogprobs))
    throw_usage_error("--top-k must be in 1.." + std::to_string(serving::kMaxTopLogprobs) + ", got " + std::to_string(f.top_k));
  std::vector<kernels::KvConfig> candidates;
  if (f.kv.empty()) {
    if (endpoints.empty())
      for (const std::string& spec : loaded.suite_kv) candidates.push_back(kernels::parse_kv_config(spec));
  } else {
    candidates = kernels::parse_kv_config_list(f.kv);
  }
  if (candidates.empty() && endpoints.empty()) throw_usage_error("no KV configs to evaluate: give --kv SPEC[,SPEC...]");
  EvalPlan plan;
  plan.workload = std::move(loaded.workload);
  plan.model = f.model;
  plan.limit = f.limit;
  plan.shard = f.shard;
  const int top_k = endpoints.empty() ? 0 : f.top_k;
  if (!f.ref_endpoint.empty()) {
    if (!f.ref.empty()) throw_usage_error("give --ref (an in-process reference) or --ref-endpoint, not both");
    const auto ref = std::find_if(endpoints.begin(), endpoints.end(),
                                  [&](const serving::EndpointConfig& e) { return e.name == f.ref_endpoint; });
    if (ref == endpoints.end())
      throw_usage_error("--ref-endpoint " + echo_user_text(f.ref_endpoint) + ": no endpoint of that name");
    add_planned(plan, endpoint_config(ConfigRole::reference, *ref, top_k));
  } else {
    add_config(plan, ConfigRole::reference, kernels::parse_kv_config(f.ref.empty() ? loaded.suite_ref : f.ref));
    plan.configs.back().top_k = top_k;
  }
  for (kernels::KvConfig& c : candidates) {
    add_config(plan, ConfigRole::candidate, std::move(c));
    plan.configs.back().top_k = top_k;
  }
  for (serving::EndpointConfig& e : endpoints)
    if (e.name != f.ref_endpoint) add_planned(plan, endpoint_config(ConfigRole::candidate, std::move(e), top_k));
  if (plan.configs.size() < 2) throw_usage_error("no candidate configs to evaluate besides the reference");
  select_items(plan);
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
  auto add_stored = [&](const StoredConfig& c) {
    if (!c.endpoint) {
      add_config(plan, c.role, kernels::parse_kv_config(c.spec));
    } else {
      PlannedConfig p;
      p.role = c.role;
      p.kv = kernels::parse_kv_config(c.kv);
      p.kv_source = c.kv_source;
      p.spec = c.spec;
      p.endpoint = c.endpoint;
      add_planned(plan, std::move(p));
    }
    plan.configs.back().top_k = c.top_k;
  };
  add_stored(*ref);
  for (const StoredConfig& c : configs)
    if (c.role == ConfigRole::candidate) add_stored(c);
  select_items(plan);
  return plan;
}

}  // namespace kvgate::harness
