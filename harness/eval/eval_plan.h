#pragma once
// What an eval or replay run evaluates, decided once before any model work: the workload (the
// items and their content hash) and the configs with their roles, each KV spec parsed exactly
// once. It is built from the command's flags (or the suite they name) or from a stored run that
// is being resumed; the runner and the recorder only read it.
//
// A config is one column of results: a KV spec on one of the plan's models in-process, or
// (engine mode, PlannedConfig::endpoint) a serving endpoint that runs that KV config. A plain run
// has one model and its configs differ by KV spec; a weights run (`--ref-model`,
// docs/models.md) crosses its models (the reference's weights first) with its KV specs, so one
// run scores {weights} x {KV} against one reference, and each config is named LABEL+KV. The
// runner keeps one engine per model. A weights run has no endpoints: an engine serves its own
// weights. A shard (docs/scale-out.md) is a field of the plan: `selected` holds the items this
// run runs (--limit's first K of the workload, then the shard's part of those), and the runner
// prepares and runs only those, in-process or against the endpoints alike.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "evalsets/item.h"
#include "evalsets/suite.h"
#include "harness/endpoint_kv.h"
#include "kernels/kv_config.h"
#include "results/store.h"
#include "serving/adapters.h"
#include "serving/endpoint.h"

namespace kvgate::harness {

// A config's role is the store's (results::ConfigRole): one enum from the plan to the stored run.
using results::ConfigRole;
using results::config_role_name;

struct PlannedConfig {
  ConfigRole role = ConfigRole::candidate;
  kernels::KvConfig kv;
  // The config's name in the results and the summary: kv.canonical(), LABEL+kv.canonical() in a
  // weights run, or endpoint_spec().
  std::string spec;
  // What tables show: the config as the user typed it (kv.name, LABEL+kv.name in a weights run,
  // endpoint:NAME for an endpoint), unique in the plan because specs are; stored with the run
  // (results::RunConfigRecord::label) so resumes, merges and reports keep it.
  std::string label;
  size_t model = 0;  // index into EvalPlan::models
  // Engine mode (docs/engine-mode.md): the serving endpoint that runs this config; none = the
  // in-process runtime. Its KV config comes from the endpoints file's "kv", else its name, else
  // what the engine reports (kv_source says which; "" until discovery settles it).
  std::optional<serving::EndpointConfig> endpoint;
  std::string kv_source;
  // KLD and Δp from the top k logprobs of each side (scoring/topk_kld.h) rather than every
  // logit: every config of a run that has an endpoint, so the estimator is the same on both
  // sides of each comparison. 0 = full distributions.
  int top_k = 0;
  // A resumed run's config: its id in the database, from the stored run the plan was read from
  // (so resuming reads run_configs once); 0 for a new run's, which RunRecorder::open stores.
  int64_t stored_id = 0;
};

// A model of the plan. Its label names it in its configs' names: the file's stem, or the LABEL of
// --model LABEL=PATH; letters, digits, '.', '_' and '-' only.
struct PlannedModel {
  std::string path;  // as given ("" for the default model)
  std::string label;
};

// "LABEL=PATH" or "PATH" -> the model and its label. Usage error for a label (given, or the
// file's stem) with other characters than [A-Za-z0-9._-], naming `flag`.
// A suite file's KV specs parsed, as `eval --suite` runs them and `evalset validate` checks them:
// every error names the suite file and the entry ("S.json: kv[2]: ..."), and two entries with
// one canonical form ("q8_0" and "q8_0/q8_0"), or an entry equal to the suite's ref, are bad
// input rather than a config run twice.
struct SuiteKv {
  std::vector<kernels::KvConfig> candidates;
  kernels::KvConfig ref;
};
SuiteKv parse_suite_kv(const evalsets::Suite& suite);

PlannedModel parse_model_arg(const std::string& arg, const std::string& flag);

struct Workload {
  std::string source;  // "suite:NAME", "evalset:PATH" or "trace:PATH" (stored as the run's suite name)
  std::string name;    // the suite's name, or the file's path
  std::vector<evalsets::EvalItem> items;
  std::string hash;    // content hash of the items; a resumed run requires the same
};

// Shard `index` of `count`: the plan's items whose id hashes there (shard_of_item).
struct ShardSpec {
  int64_t index = 0, count = 1;
  std::string origin;  // where it came from, for people: "--shard 1/4", "SLURM_ARRAY_TASK_ID=1, ..."
};

// The shard of `count` that item `item_id` belongs to: xxHash64 of the id alone, so adding or
// removing other items never moves an item to another shard.
int64_t shard_of_item(std::string_view item_id, int64_t count);

// The shard a command runs: `flag` ("I/N", from --shard) if given, else from a scheduler's
// environment as read through `getenv`: SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_COUNT, else
// JOB_COMPLETION_INDEX with KVGATE_SHARD_COUNT; nullopt when none of them is set. Usage error
// naming the flag or the variables for a malformed number, an index outside 0..N-1, or an index
// without its count.
std::optional<ShardSpec> resolve_shard(const std::string& flag, const std::function<const char*(const char*)>& getenv);

struct EvalPlan {
  Workload workload;
  // models[0] is the reference's: --model PATH (or --ref-model in a weights run), the resumed
  // run's model, or "" for the default model. A plain run has exactly one model.
  std::vector<PlannedModel> models{PlannedModel{}};
  bool weights_run = false;  // configs are named LABEL+KV (--ref-model), even with one model
  std::vector<PlannedConfig> configs;  // the reference first, then the candidates
  int64_t resume_run = 0;  // the stored run this plan continues; 0 for a new run
  int64_t limit = 0;       // --limit: the plan holds only the workload's first `limit` items (0: all)
  std::optional<ShardSpec> shard;
  std::vector<size_t> selected;  // indices into workload.items this run runs, in workload order (select_items)

  const PlannedConfig& reference() const { return configs.front(); }
  // The plan's items, before any partition: the workload's first plan_items().
  size_t plan_items() const;
  // Whether --limit leaves workload items out: such a run is never complete, only interrupted.
  bool leaves_items_out() const { return plan_items() < workload.items.size(); }
  bool has_endpoints() const;
  bool has_in_process_configs() const;
};

// Fills plan.selected from the workload, plan.limit and plan.shard; the plan builders below end
// with it, and whoever changes limit or shard afterwards calls it again.
void select_items(EvalPlan& plan);

// What the plan's numbers also depend on, beyond the plan itself.
struct PlanSettings {
  std::string model_sha256;  // the reference's model
  int64_t threads = 0;  // results are bit-identical for one thread count only
  int64_t max_new_tokens = 0;
  std::string backend;
  std::string kvgate_version, git_sha;  // shards of one plan run one kvgate build
  std::vector<std::string> weights_sha256;  // a weights run: per plan.models, in order
};

// Everything that must be equal across the shards of one plan (and equal to an unsharded run
// it is compared with), as canonical text, one "key value" per line; its xxHash64 is the plan
// hash. Not in it: the shard, host and times, nor an endpoint's URL (N workers of one plan may
// each drive their own copy of an endpoint); an endpoint config is in it by its results name
// (endpoint:NAME=KV) and estimator, so endpoint KV discovery must have settled before.
std::string describe_plan(const EvalPlan& plan, const PlanSettings& settings);
// The value of `key` in describe_plan()'s text ("" if absent).
std::string plan_value(const std::string& plan_text, const std::string& key);

// The endpoints the flags name (--endpoint or --endpoints FILE; none when neither is given).
// Usage error for endpoints in a weights run (--ref-model): an engine serves its own weights.
struct PlanFlags;
std::vector<serving::EndpointConfig> endpoints_from_flags(const PlanFlags& flags);
// An endpoint's config: its KV config from the endpoints file's "kv", else its name when that is
// a KV spec (kv_source "stated" / "name"); otherwise left to settle_endpoint_kv.
PlannedConfig endpoint_config(ConfigRole role, serving::EndpointConfig endpoint, int top_k);

// Settles an endpoint config's KV config once discovery knows what the engine reports
// (serving::EngineInfo::kv_cache_dtype: SGLang's /server_info, vLLM's /metrics). A config whose
// KV the user stated or named keeps it, and the report must agree: the same key and value
// formats, or, for "auto", an unquantized config (the model's dtype where the engine says which).
// A config without one takes the reported one, "auto" only
// where the engine names the model's dtype (never guessed as f16). A contradiction, an unknown
// report with nothing stated, or nothing at all is a usage error (exit 2) naming the endpoint,
// what the user said and what the engine says. Sets the config's spec.
void settle_endpoint_kv(PlannedConfig& config, const serving::EngineInfo& info);

// The flags of `kvgate eval` / `kvgate replay` that choose what to run.
struct PlanFlags {
  bool replay = false;                // `kvgate replay`, whose source is --trace
  std::string suite, evalset, trace;  // exactly one
  std::string kv;   // comma-separated candidates; empty: the suite's
  std::string ref;  // empty: the suite's, else f16
  // A plain run: the one model ("" default). With ref_model, a weights run: the reference's
  // weights and the comma-separated candidate models (each "PATH" or "LABEL=PATH"), crossed
  // with the reference KV spec and the --kv specs.
  std::string model;
  std::string ref_model;
  int64_t limit = 0;               // --limit
  std::optional<ShardSpec> shard;  // resolve_shard
  // Engine mode: --endpoint NAME=URL[,...] or --endpoints FILE, one config per endpoint;
  // --ref-endpoint NAME makes that endpoint the reference. With endpoints, in-process
  // candidates come only from an explicit --kv (a suite's own list is not run).
  std::string endpoints, endpoints_file, ref_endpoint;
  int top_k = 20;
};

// Usage error (exit 2) when not exactly one source is given, no candidate is left, or a config
// is given twice (the reference included); input errors name the file or spec at fault. In a
// weights run the KV specs and the models are sets: the reference KV spec (or model) listed
// again among the candidates is taken once, and every other (model, KV) pair is a candidate; a
// weights run with endpoints is a usage error (an engine serves its own weights).
EvalPlan plan_from_flags(const PlanFlags& flags);

// A stored config of a run being resumed.
struct StoredConfig {
  int64_t config_id = 0;  // its id in the database
  std::string spec;
  std::string label;  // as the user typed it; the spec for a run made before labels were recorded
  ConfigRole role = ConfigRole::candidate;
  int top_k = 0;
  // A weights run's config: its KV part and its model (label and path); empty otherwise.
  std::string kv_spec, model_label, model_path;
  // Engine mode: the endpoint recorded for the config (its URL redacted); a resume may give
  // the endpoints again (--endpoint), matched by name, where they moved or carry credentials.
  std::optional<serving::EndpointConfig> endpoint;
  std::string kv;  // the endpoint's KV config, canonical
  std::string kv_source;
};

// The plan of stored run `run_id`: its workload is read again from `source` and must still hash
// to `hash` (input error otherwise: the items changed). Candidates keep the stored order.
EvalPlan plan_from_stored_run(int64_t run_id, const std::string& source, const std::string& hash,
                              const std::string& model_path, const std::vector<StoredConfig>& configs);

}  // namespace kvgate::harness
