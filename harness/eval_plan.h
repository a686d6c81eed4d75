#pragma once
// What an eval or replay run evaluates, decided once before any model work: the workload (the
// items and their content hash) and the configs with their roles, each KV spec parsed exactly
// once. It is built from the command's flags (or the suite they name) or from a stored run that
// is being resumed; the runner and the recorder only read it.
//
// A config is one column of results: a KV spec on one of the plan's models. A plain run has one
// model and its configs differ by KV spec; a weights run (`--ref-model`, docs/models.md) crosses
// its models (the reference's weights first) with its KV specs, so one run scores {weights} x
// {KV} against one reference, and each config is named LABEL+KV. The runner keeps one engine per
// model. A shard (docs/scale-out.md) is a field of the plan: `selected` holds the
// items this run runs (--limit's first K of the workload, then the shard's part of those), and
// the runner prepares and runs only those, whatever engine serves the configs.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "evalsets/item.h"
#include "kernels/kv_config.h"

namespace kvgate::harness {

enum class ConfigRole { reference, candidate };
const char* config_role_name(ConfigRole role);

struct PlannedConfig {
  ConfigRole role = ConfigRole::candidate;
  kernels::KvConfig kv;
  std::string spec;  // the config's name in the results and the summary: kv.canonical(), or LABEL+kv.canonical()
  size_t model = 0;  // index into EvalPlan::models
};

// A model of the plan. Its label names it in its configs' names: the file's stem, or the LABEL of
// --model LABEL=PATH; letters, digits, '.', '_' and '-' only.
struct PlannedModel {
  std::string path;  // as given ("" for the default model)
  std::string label;
};

// "LABEL=PATH" or "PATH" -> the model and its label. Usage error for a label (given, or the
// file's stem) with other characters than [A-Za-z0-9._-], naming `flag`.
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
// hash. Not in it: the shard, host and times.
std::string describe_plan(const EvalPlan& plan, const PlanSettings& settings);
// The value of `key` in describe_plan()'s text ("" if absent).
std::string plan_value(const std::string& plan_text, const std::string& key);

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
};

// Usage error (exit 2) when not exactly one source is given, no candidate is left, or a config
// is given twice (the reference included); input errors name the file or spec at fault. In a
// weights run the KV specs and the models are sets: the reference KV spec (or model) listed
// again among the candidates is taken once, and every other (model, KV) pair is a candidate.
EvalPlan plan_from_flags(const PlanFlags& flags);

// A stored config of a run being resumed.
struct StoredConfig {
  std::string spec;
  ConfigRole role = ConfigRole::candidate;
  // A weights run's config: its KV part and its model (label and path); empty otherwise.
  std::string kv_spec, model_label, model_path;
};

// The plan of stored run `run_id`: its workload is read again from `source` and must still hash
// to `hash` (input error otherwise: the items changed). Candidates keep the stored order.
EvalPlan plan_from_stored_run(int64_t run_id, const std::string& source, const std::string& hash,
                              const std::string& model_path, const std::vector<StoredConfig>& configs);

}  // namespace kvgate::harness
