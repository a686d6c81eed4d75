#include "harness/eval/eval_plan.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/error.h"
#include "core/hash.h"
#include "evalsets/suite.h"
#include "serving/adapters.h"
#include "serving/engine_traits.h"

namespace kvgate::harness {
namespace {

// A workload with the configs its suite asks for (none for an eval set or trace).
struct LoadedWorkload {
  Workload workload;
  std::vector<kernels::KvConfig> suite_kv;
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
    out.suite_kv = parse_suite_kv(suite).candidates;
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

// An in-process config: `kv` on plan.models[model], named LABEL+KV in a weights run.
void add_config(EvalPlan& plan, ConfigRole role, kernels::KvConfig kv, size_t model = 0) {
  PlannedConfig c;
  c.role = role;
  c.kv = std::move(kv);
  c.model = model;
  c.spec = plan.weights_run ? plan.models[model].label + "+" + c.kv.canonical() : c.kv.canonical();
  c.label = plan.weights_run ? plan.models[model].label + "+" + c.kv.name : c.kv.name;
  if (c.kv.name.empty()) c.label = c.spec;
  add_planned(plan, std::move(c));
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find(',', at), text.size());
    if (end > at) out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// Adds `model` to the plan's models unless it is there already (same label and path); returns
// its index. Two different files under one label would make two configs of one name.
size_t add_model(EvalPlan& plan, PlannedModel model, const std::string& flag) {
  for (size_t i = 0; i < plan.models.size(); ++i) {
    if (plan.models[i].label != model.label) continue;
    if (plan.models[i].path == model.path) return i;
    throw_usage_error(flag + ": models " + echo_user_text(plan.models[i].path) + " and " + echo_user_text(model.path) +
                      " are both labelled " + model.label + "; name one with LABEL=PATH");
  }
  plan.models.push_back(std::move(model));
  return plan.models.size() - 1;
}

// The configs of a weights run: reference = (models[0], kvs[0]); every other pair a candidate,
// model by model, in the order given.
void add_weights_configs(EvalPlan& plan, std::vector<kernels::KvConfig> kvs) {
  std::vector<kernels::KvConfig> distinct;
  for (kernels::KvConfig& kv : kvs)
    if (std::none_of(distinct.begin(), distinct.end(),
                     [&](const kernels::KvConfig& d) { return d.canonical() == kv.canonical(); }))
      distinct.push_back(std::move(kv));
  add_config(plan, ConfigRole::reference, distinct.front(), 0);
  for (size_t m = 0; m < plan.models.size(); ++m)
    for (size_t k = 0; k < distinct.size(); ++k)
      if (m > 0 || k > 0) add_config(plan, ConfigRole::candidate, distinct[k], m);
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

PlannedModel parse_model_arg(const std::string& arg, const std::string& flag) {
  PlannedModel m;
  const size_t eq = arg.find('=');
  // A '/' before the '=' means the '=' is part of a path, not a label.
  const bool labelled = eq != std::string::npos && arg.substr(0, eq).find('/') == std::string::npos;
  m.path = labelled ? arg.substr(eq + 1) : arg;
  if (m.path.empty()) throw_usage_error(flag + " " + echo_user_text(arg) + ": give a GGUF file, as PATH or LABEL=PATH");
  if (labelled) {
    m.label = arg.substr(0, eq);
  } else {
    const size_t slash = m.path.rfind('/');
    m.label = m.path.substr(slash == std::string::npos ? 0 : slash + 1);
    if (m.label.size() > 5 && m.label.compare(m.label.size() - 5, 5, ".gguf") == 0) m.label.resize(m.label.size() - 5);
  }
  const bool plain = !m.label.empty() && std::all_of(m.label.begin(), m.label.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
  });
  if (!plain)
    throw_usage_error(flag + " " + echo_user_text(arg) + ": the label '" + echo_user_text(m.label) +
                      "' names the model's configs (LABEL+KV) and may hold only letters, digits, '.', '_' and '-'; "
                      "give one as LABEL=PATH");
  return m;
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
  // A weights run: which file each label stands for (plain runs keep their plan text as before).
  if (plan.weights_run)
    for (size_t m = 0; m < plan.models.size(); ++m)
      text += "model " + plan.models[m].label + " " + (m < s.weights_sha256.size() ? s.weights_sha256[m] : "") + "\n";
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
  // "auto" is the engine's own word for its model's dtype, which the engine may report and kvgate
  // must not read as f16: such an endpoint settles at discovery.
  auto is_auto = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    return s == "auto";
  };
  if (!endpoint.kv.empty() && !is_auto(endpoint.kv)) {
    try {
      c.kv = kernels::parse_kv_config(endpoint.kv);
    } catch (const Error& e) {
      throw_usage_error("endpoint '" + endpoint.name + "': kv '" + echo_user_text(endpoint.kv) + "': " + e.what());
    }
    c.kv_source = "stated";
  } else if (endpoint.kv.empty() && !is_auto(endpoint.name)) {
    try {
      c.kv = kernels::parse_kv_config(endpoint.name);
      c.kv_source = "name";
    } catch (const Error&) {
      // Not a KV spec: the engine may report its KV dtype at discovery.
    }
  }
  if (!c.kv_source.empty()) c.spec = endpoint_spec(endpoint.name, c.kv);
  c.label = std::string(kEndpointSpecPrefix) + endpoint.name;
  c.endpoint = std::move(endpoint);
  return c;
}

std::vector<serving::EndpointConfig> endpoints_from_flags(const PlanFlags& f) {
  // The weights axis swaps the model under in-process configs; an engine serves the weights it
  // was started with, which kvgate cannot swap, so the two would mix unlike columns.
  if (!f.ref_model.empty() && (!f.endpoints.empty() || !f.endpoints_file.empty() || !f.ref_endpoint.empty()))
    throw_usage_error("--ref-model/--model (weights as an axis) cannot be combined with --endpoint/--endpoints/"
                      "--ref-endpoint: an engine serves its own weights; compare weights in-process, or start one "
                      "endpoint per weights file and give those endpoints without --ref-model");
  if (!f.endpoints.empty() && !f.endpoints_file.empty()) throw_usage_error("give --endpoint or --endpoints FILE, not both");
  if (!f.endpoints.empty()) return serving::parse_endpoint_flag(f.endpoints);
  if (!f.endpoints_file.empty()) {
    std::vector<serving::EndpointConfig> endpoints = serving::load_endpoints_file(f.endpoints_file);
    // A stated "kv" is checked here, where the file is known, so its error names the file.
    for (const serving::EndpointConfig& e : endpoints) {
      if (e.kv.empty()) continue;
      try {
        kernels::parse_kv_config(e.kv);
      } catch (const Error& err) {
        throw_input_error(f.endpoints_file + ": endpoint '" + e.name + "': kv '" + echo_user_text(e.kv) + "': " + err.what());
      }
    }
    return endpoints;
  }
  return {};
}



bool EvalPlan::has_endpoints() const {
  return std::any_of(configs.begin(), configs.end(), [](const PlannedConfig& c) { return c.endpoint.has_value(); });
}

bool EvalPlan::has_in_process_configs() const {
  return std::any_of(configs.begin(), configs.end(), [](const PlannedConfig& c) { return !c.endpoint.has_value(); });
}

namespace {

// A model dtype as an engine spells it ("bfloat16", "half", "float") as a KV config.
std::optional<kernels::KvConfig> model_dtype_config(const std::string& dtype) {
  const std::string spec = dtype == "half" ? "f16" : dtype == "float" ? "f32" : dtype;
  try {
    return kernels::parse_kv_config(spec);
  } catch (const Error&) {
    return std::nullopt;
  }
}

bool unquantized(const kernels::KvConfig& kv) {
  auto plain = [](const kernels::FormatSpec& f) { return f.format->family == "float"; };
  if (!plain(kv.key) || !plain(kv.value)) return false;
  for (const kernels::LayerOverride& o : kv.overrides)
    if (!plain(o.key) || !plain(o.value)) return false;
  return true;
}

std::string stated_by(const std::string& kv_source) {
  if (kv_source == "stated") return "its \"kv\" in the endpoints file";
  if (kv_source == "name") return "its name";
  return "what the engine reported when the run began";
}

}  // namespace

void settle_endpoint_kv(PlannedConfig& c, const serving::EngineInfo& info) {
  if (!c.endpoint) return;
  const serving::EngineTraits& traits = serving::engine_traits(info.kind);
  const std::string& reported = info.kv_cache_dtype;
  const std::string who = "endpoint '" + c.endpoint->name + "' (" + serving::redact_url(c.endpoint->url) + ")";
  const bool is_auto = reported == "auto";
  // What the engine's report says it stores: a KV config, or (auto without the model's dtype)
  // only that it is unquantized, or (a name kvgate does not know or refuses) nothing kvgate runs.
  std::optional<kernels::KvConfig> engine_kv;
  std::string engine_unknown;
  if (is_auto && !info.model_dtype.empty()) engine_kv = model_dtype_config(info.model_dtype);
  else if (!is_auto && !reported.empty()) {
    try {
      engine_kv = kernels::parse_kv_config(reported);
    } catch (const Error& e) {
      engine_unknown = e.what();
    }
  }
  const std::string said = "the engine reports kv cache dtype '" + echo_user_text(reported) + "' (" +
                           std::string(traits.kv_dtype_where) + ")" +
                           (is_auto ? ", which stores " + std::string(traits.auto_means) +
                                          (info.model_dtype.empty() ? "" : "; its dtype is " + info.model_dtype)
                                    : "");
  if (c.kv_source.empty()) {
    if (reported.empty())
      throw_usage_error(who + ": kvgate cannot tell which KV config it runs (its name is not a KV spec and the engine does "
                              "not report one): name it after the config (q8_0=URL) or give \"kv\" in an endpoints file");
    if (!engine_kv && is_auto)
      throw_usage_error(who + ": " + said + ", and kvgate will not guess which (bf16 and f16 are different caches): name it "
                              "after the dtype (bf16=URL, f16=URL) or give \"kv\" in an endpoints file");
    if (!engine_kv)
      throw_usage_error(who + ": " + said + ", which kvgate does not know (" + engine_unknown +
                        "); give \"kv\" in an endpoints file");
    c.kv = *engine_kv;
    c.kv_source = "engine";
    c.spec = endpoint_spec(c.endpoint->name, c.kv);
    return;
  }
  if (reported.empty()) return;  // nothing to check it against (discovery notes say so)
  bool agrees = false;
  if (engine_kv) agrees = emulates(c.kv, *engine_kv);
  else if (is_auto) agrees = unquantized(c.kv);
  if (!agrees)
    throw_usage_error(who + " runs " + c.kv.canonical() + " by " + stated_by(c.kv_source) + ", but " + said +
                      (engine_unknown.empty() ? "" : " (" + engine_unknown + ")") +
                      ": the results would carry a KV config the engine does not run. Start the server with the cache "
                      "this endpoint is meant to have (--kv-cache-dtype), or name the endpoint after the one it has" +
                      (is_auto && !traits.auto_caveat.empty() ? " (" + std::string(traits.auto_caveat) + ")" : ""));
}

SuiteKv parse_suite_kv(const evalsets::Suite& suite) {
  auto parse = [&](const std::string& spec, const std::string& where) {
    try {
      return kernels::parse_kv_config(spec);
    } catch (const Error& e) {
      throw_input_error(suite.file + ": " + where + ": " + e.what());
    }
  };
  SuiteKv out{{}, parse(suite.ref, "ref")};
  for (size_t i = 0; i < suite.kv.size(); ++i) {
    const std::string where = "kv[" + std::to_string(i) + "]";
    kernels::KvConfig c = parse(suite.kv[i], where);
    if (c.canonical() == out.ref.canonical())
      throw_input_error(suite.file + ": " + where + ": \"" + echo_user_text(suite.kv[i]) + "\" is the reference config " +
                        out.ref.canonical() + " (\"ref\"); candidates must differ from it");
    for (size_t j = 0; j < out.candidates.size(); ++j)
      if (out.candidates[j].canonical() == c.canonical())
        throw_input_error(suite.file + ": " + where + ": \"" + echo_user_text(suite.kv[i]) + "\" is kv[" +
                          std::to_string(j) + "] again (both are " + c.canonical() + ")");
    out.candidates.push_back(std::move(c));
  }
  return out;
}


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
      candidates = loaded.suite_kv;
  } else {
    candidates = kernels::parse_kv_config_list(f.kv);
  }
  EvalPlan plan;
  plan.workload = std::move(loaded.workload);
  plan.limit = f.limit;
  plan.shard = f.shard;
  if (f.ref_model.empty()) {
    if (f.model.find(',') != std::string::npos)
      throw_usage_error("--model " + echo_user_text(f.model) +
                        ": several models are compared against a reference model: give --ref-model REF.gguf with "
                        "--model B.gguf[,C.gguf]");
    if (candidates.empty() && endpoints.empty()) throw_usage_error("no KV configs to evaluate: give --kv SPEC[,SPEC...]");
    plan.models = {PlannedModel{f.model, ""}};
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
  } else {
    plan.weights_run = true;
    plan.models = {parse_model_arg(f.ref_model, "--ref-model")};
    for (const std::string& m : split_commas(f.model)) add_model(plan, parse_model_arg(m, "--model"), "--model");
    std::vector<kernels::KvConfig> kvs{kernels::parse_kv_config(f.ref.empty() ? loaded.suite_ref : f.ref)};
    for (kernels::KvConfig& c : candidates) kvs.push_back(std::move(c));
    add_weights_configs(plan, std::move(kvs));
    if (plan.configs.size() < 2)
      throw_usage_error("no candidate to evaluate: give candidate models with --model B.gguf[,C.gguf] and/or KV specs "
                        "with --kv SPEC[,SPEC...]");
  }
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
  plan.models = {PlannedModel{model_path, ""}};
  plan.resume_run = run_id;
  const auto ref = std::find_if(configs.begin(), configs.end(),
                                [](const StoredConfig& c) { return c.role == ConfigRole::reference; });
  if (ref == configs.end()) throw_input_error("run " + std::to_string(run_id) + " has no reference config to resume with");
  plan.weights_run = !ref->model_label.empty();
  if (plan.weights_run) plan.models = {PlannedModel{ref->model_path, ref->model_label}};
  // A stored spec is read as stored (kernels::parse_stored_kv_config: a bare llama.cpp type an
  // older kvgate wrote is unrotated) and keeps its stored name, which the run's rows are keyed by.
  auto stored_kv = [&](const std::string& spec) {
    try {
      return kernels::parse_stored_kv_config(spec);
    } catch (const Error& e) {
      throw_input_error("run " + std::to_string(run_id) + ": stored config '" + echo_user_text(spec) +
                        "' is not a KV config this kvgate can run (" + e.what() + ")");
    }
  };
  auto add_stored = [&](const StoredConfig& c) {
    if (c.endpoint) {
      PlannedConfig p;
      p.role = c.role;
      p.kv = stored_kv(c.kv);
      p.kv_source = c.kv_source;
      p.spec = c.spec;
      p.label = std::string(kEndpointSpecPrefix) + c.endpoint->name;
      p.endpoint = c.endpoint;
      add_planned(plan, std::move(p));
    } else if (!plan.weights_run) {
      add_config(plan, c.role, stored_kv(c.spec));
      plan.configs.back().spec = c.spec;
    } else {
      if (c.model_label.empty())
        throw_input_error("run " + std::to_string(run_id) + ": config " + c.spec + " has no model recorded");
      const size_t m = add_model(plan, PlannedModel{c.model_path, c.model_label}, "run " + std::to_string(run_id));
      add_config(plan, c.role, stored_kv(c.kv_spec), m);
      if (c.spec != c.model_label + "+" + c.kv_spec)
        throw_input_error("run " + std::to_string(run_id) + ": config " + c.spec + " is stored with model " +
                          c.model_label + " and KV spec " + c.kv_spec + ", which do not make its name");
      plan.configs.back().spec = c.spec;
    }
    plan.configs.back().top_k = c.top_k;
    plan.configs.back().stored_id = c.config_id;
    // The resumed run shows its configs as they were typed when it began.
    if (!c.label.empty()) plan.configs.back().label = c.label;
  };
  add_stored(*ref);
  for (const StoredConfig& c : configs)
    if (c.role == ConfigRole::candidate) add_stored(c);
  select_items(plan);
  return plan;
}

}  // namespace kvgate::harness
