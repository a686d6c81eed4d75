// `kvgate runs merge` (docs/scale-out.md): the shard runs of one plan, each in its own database,
// become one run in this one. Every shard is read and checked before anything is written; the
// merged run is then written in one transaction, so a merge killed at any point leaves this
// database as it was and can simply be run again.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/hash.h"
#include "results/row_digest.h"
#include "results/store.h"
#include "results/store_columns.h"

namespace kvgate::results {
namespace {

// One item of a shard run with all its rows; configs are named by spec, since ids belong to
// each database.
struct ItemRows {
  ItemInfo info;
  std::vector<std::pair<std::string, ItemMetrics>> metrics;
  std::vector<std::pair<std::string, TurnMetrics>> turns;
  std::vector<std::pair<std::string, TokenClassMetrics>> token_classes;
  std::vector<std::pair<std::string, LatencySamples>> latency;
  std::vector<std::pair<std::string, PositionMetrics>> positions;
};

struct ShardRun {
  std::string path;
  RunRecord run;
  RunPlan plan;
  std::vector<PlanItem> plan_items;
  std::vector<RunConfigRecord> configs;  // by config id: the order the shard attached them in
  std::map<std::string, ItemRows> items;  // by item key
  // Engine mode: the endpoint behind each config (by spec), and items that failed there.
  std::map<std::string, ConfigEndpoint> endpoints;
  std::vector<std::pair<std::string, ItemFailure>> failures;  // config spec ("" for none), failure
  std::string digest;

  int64_t index() const { return *plan.shard_index; }
  std::string name() const {
    return path + " (shard " + std::to_string(index()) + "/" + std::to_string(*plan.shard_count) + ", run " +
           std::to_string(run.id) + ")";
  }
};

std::string list_some(const std::vector<std::string>& keys, size_t most = 8) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < most; ++i) out += (i ? ", " : "") + echo_user_text(keys[i]);
  if (keys.size() > most) out += ", ... (" + std::to_string(keys.size()) + " in all)";
  return out;
}

// Feeds every stored value, doubles by their bits, into one hash: equal digests mean the same
// rows, so merging the same shard runs again can be recognised.
class Digest {
 public:
  Digest& add(std::string_view s) {
    text_ += std::to_string(s.size());
    text_ += ':';
    text_ += s;
    return *this;
  }
  Digest& add(int64_t v) { return add(std::string_view(std::to_string(v))); }
  Digest& add(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    return add(std::string_view(hex_u64(bits)));
  }
  template <typename T>
  Digest& add(const std::optional<T>& v) {
    return v ? add(std::string_view("+")).add(static_cast<int64_t>(*v)) : add(std::string_view("-"));
  }
  Digest& add_text(const std::optional<std::string>& v) {
    return v ? add(std::string_view("+")).add(std::string_view(*v)) : add(std::string_view("-"));
  }
  std::string hex() const { return hex_u64(xxhash64(text_)); }

 private:
  std::string text_;
};

std::string digest_of(const ShardRun& s) {
  Digest d;
  d.add(s.plan.plan_hash).add(s.index()).add(*s.plan.shard_count);
  for (const auto& [key, it] : s.items) {
    d.add(key).add(it.info.domain).add(it.info.evalset_hash).add(it.info.item_hash).add_text(it.info.gold_answer);
    for (const auto& [spec, m] : it.metrics) {
      d.add(spec).add(m.scored_tokens).add(m.kld_mean).add(m.kld_max).add(m.kld_p99).add(m.delta_p_mean);
      d.add(m.delta_p_rms).add(m.same_top1).add(m.nll_mean).add(m.nll_ref_mean).add(m.generated_tokens);
      d.add(m.first_divergence).add(m.exact_match_ref).add(m.exact_match_gold);
    }
    for (const auto& [spec, t] : it.turns) {
      d.add(spec).add(t.turn_index).add(t.context_tokens).add(t.scored_tokens).add(t.kld_mean).add(t.same_top1);
      d.add(t.ttft_ms).add(t.tpot_ms).add(t.prompt_tokens).add(t.cached_tokens);
      d.add_text(t.answer).add(t.answer_tokens).add(t.answer_divergence);
    }
    for (const auto& [spec, c] : it.token_classes)
      d.add(spec).add(c.token_class).add(c.scored_tokens).add(c.kld_sum).add(c.delta_p_sum).add(c.same_top1);
    for (const auto& [spec, l] : it.latency) {
      d.add(spec).add(l.turn_index);
      for (double t : l.token_times_ms) d.add(t);
    }
    // Only runs with position rows add to the digest, so a shard run made before them keeps its digest.
    for (const auto& [spec, p] : it.positions) {
      d.add(spec).add(p.turn_index).add(p.position_from).add(p.position_to).add(p.scored_tokens).add(p.kld_sum);
      d.add(p.delta_p_sum).add(p.same_top1);
    }
  }
  for (const RunConfigRecord& c : s.configs) d.add(c.spec).add(c.kld_estimator).add(c.top_k);
  for (const auto& [spec, e] : s.endpoints) {
    d.add(spec).add(e.name).add(e.url).add(e.engine).add(e.engine_version).add(e.model).add(e.kv).add(e.kv_source);
    d.add(e.kv_reported).add(e.discovery);
  }
  for (const auto& [spec, f] : s.failures) d.add(f.item_key).add(spec).add(f.endpoint).add(f.failure).add(f.message).add(f.failed_at);
  return d.hex();
}

ShardRun read_shard(Store& store, Connection& c, const std::string& path) {
  ShardRun s;
  s.path = path;
  const std::vector<RunRecord> runs = store.list_runs();
  if (runs.empty()) throw_input_error(path + ": no runs recorded, so there is no shard run to merge");
  s.run = runs.back();
  const std::optional<RunPlan> plan = store.run_plan(s.run.id);
  if (!plan || !plan->shard_index)
    throw_input_error(path + ": run " + std::to_string(s.run.id) +
                      " (the database's latest) is not a shard run: it was made without --shard or a scheduler's "
                      "array index, and only shard runs are merged");
  s.plan = *plan;
  s.plan_items = store.run_plan_items(s.run.id);
  s.configs = store.run_configs(s.run.id);
  std::sort(s.configs.begin(), s.configs.end(),
            [](const RunConfigRecord& a, const RunConfigRecord& b) { return a.config_id < b.config_id; });
  std::map<int64_t, std::string> spec;
  for (const RunConfigRecord& rc : s.configs) spec[rc.config_id] = rc.spec;
  auto spec_of = [&](int64_t id) {
    const auto it = spec.find(id);
    if (it == spec.end())
      throw_input_error(path + ": run " + std::to_string(s.run.id) + " has rows of config " + std::to_string(id) +
                        ", which is not one of its configs");
    return it->second;
  };

  for (ItemInfo& info : store.run_items(s.run.id)) s.items[info.item_key].info = std::move(info);
  for (const RunItemMetrics& r : store.run_item_metrics(s.run.id))
    s.items[r.item_key].metrics.emplace_back(spec_of(r.metrics.config_id), r.metrics);
  for (const RunTurnMetrics& r : store.run_turn_metrics(s.run.id))
    s.items[r.item_key].turns.emplace_back(spec_of(r.turn.config_id), r.turn);
  for (const RunPositionMetrics& r : store.run_position_metrics(s.run.id))
    s.items[r.item_key].positions.emplace_back(spec_of(r.position.config_id), r.position);
  {
    const DigestedTable& table = digested_table("token_class_metrics");
    Statement q(c, run_rows_select(table, "t.config_id, t.token_class"));
    q.bind(1, s.run.id);
    while (q.step()) {
      TokenClassMetrics t;
      read_record(q, 2, table, token_class_fields(), t);
      const std::string config = spec_of(t.config_id);
      t.config_id = 0;  // the merged run's id of the config is the writer's
      s.items[q.column_text(0)].token_classes.emplace_back(config, t);
    }
  }
  {
    const DigestedTable& table = digested_table("latency_samples");
    Statement q(c, run_rows_select(table, "t.config_id, t.turn_index, t.token_index"));
    q.bind(1, s.run.id);
    while (q.step()) {
      LatencySample sample;
      read_record(q, 2, table, latency_fields(), sample);
      auto& latency = s.items[q.column_text(0)].latency;
      const std::string config = spec_of(sample.config_id);
      const int64_t turn = sample.turn_index;
      if (latency.empty() || latency.back().first != config || latency.back().second.turn_index != turn)
        latency.push_back({config, LatencySamples{0, turn, {}}});
      if (sample.token_index != static_cast<int64_t>(latency.back().second.token_times_ms.size()))
        throw_input_error(path + ": run " + std::to_string(s.run.id) + ", item " + echo_user_text(q.column_text(0)) +
                          ": latency samples of turn " + std::to_string(turn) + " are not numbered 0, 1, ...");
      latency.back().second.token_times_ms.push_back(sample.t_ms);
    }
  }
  for (ConfigEndpoint& e : store.config_endpoints(s.run.id)) {
    const std::string config = spec_of(e.config_id);
    s.endpoints[config] = std::move(e);
  }
  for (ItemFailure& f : store.item_failures(s.run.id)) {
    const std::string config = f.config_id ? spec_of(*f.config_id) : "";
    s.failures.emplace_back(config, std::move(f));
  }
  if (store.load_replay(s.run.id))
    throw_input_error(path + ": run " + std::to_string(s.run.id) + " is a load replay, which is never sharded");
  s.digest = digest_of(s);
  return s;
}

// "threads 2 here, threads 1 there": the plan lines that differ, for an error message.
std::string plan_difference(const std::string& here, const std::string& there) {
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const std::vector<std::string> a = lines(here), b = lines(there);
  const std::set<std::string> in_a(a.begin(), a.end()), in_b(b.begin(), b.end());
  std::vector<std::string> only_a, only_b;
  for (const std::string& l : a)
    if (!in_b.count(l)) only_a.push_back(l);
  for (const std::string& l : b)
    if (!in_a.count(l)) only_b.push_back(l);
  return "'" + list_some(only_a, 4) + "' against '" + list_some(only_b, 4) + "'";
}

// Everything that must agree between the shards, and that each holds its own items, all of them.
void check_shards(const std::vector<ShardRun>& shards) {
  const ShardRun& first = shards.front();
  const int64_t n = *first.plan.shard_count;
  for (const ShardRun& s : shards) {
    if (*s.plan.shard_count != n)
      throw_input_error(s.name() + " and " + first.name() +
                        " come from different splits of the items: merge the shards of one sharded run");
    if (s.plan.plan_hash != first.plan.plan_hash)
      throw_input_error(s.name() + " and " + first.name() + " were made with different plans (plan hash " +
                        s.plan.plan_hash + " against " + first.plan.plan_hash +
                        "): " + plan_difference(s.plan.plan, first.plan.plan) +
                        "; every shard must run the same command with the same kvgate, model and --threads");
    const RunInfo &a = s.run.info, &b = first.run.info;
    const std::pair<const char*, bool> same[] = {
        {"suite", a.suite_name == b.suite_name && a.suite_hash == b.suite_hash},
        {"model", a.model_sha256 == b.model_sha256},
        {"backend", a.backend == b.backend},
        {"threads", a.threads == b.threads},
        {"seed", a.seed == b.seed},
        {"kvgate version", a.kvgate_version == b.kvgate_version && a.git_sha == b.git_sha}};
    for (const auto& [what, equal] : same)
      if (!equal) throw_input_error(s.name() + " and " + first.name() + " differ in their " + what);
    bool same_configs = s.configs.size() == first.configs.size();
    for (size_t c = 0; same_configs && c < s.configs.size(); ++c) {
      const RunConfigRecord &x = s.configs[c], &y = first.configs[c];
      same_configs = x.spec == y.spec && x.hash == y.hash && x.role == y.role &&
                     (x.kv_bytes_per_token == y.kv_bytes_per_token ||
                      (std::isnan(x.kv_bytes_per_token) && std::isnan(y.kv_bytes_per_token))) &&
                     x.kld_estimator == y.kld_estimator && x.top_k == y.top_k &&
                     x.model.has_value() == y.model.has_value() &&
                     (!x.model || (x.model->kv_spec == y.model->kv_spec && x.model->sha256 == y.model->sha256));
    }
    if (!same_configs) throw_input_error(s.name() + " and " + first.name() + " differ in their configs (KV or model)");
    // Engine mode: each shard may drive its own server (its own URL), but every shard's config
    // must be the same engine, version, model and KV config, or the merged run would mix them.
    bool same_endpoints = s.endpoints.size() == first.endpoints.size();
    for (const auto& [spec, e] : s.endpoints) {
      const auto other = first.endpoints.find(spec);
      same_endpoints = same_endpoints && other != first.endpoints.end();
      if (!same_endpoints) break;
      const ConfigEndpoint& o = other->second;
      if (e.name != o.name || e.engine != o.engine || e.engine_version != o.engine_version || e.model != o.model ||
          e.kv != o.kv || e.kv_source != o.kv_source || e.kv_reported != o.kv_reported)
        throw_input_error(s.name() + " and " + first.name() + " ran config " + spec + " on different engines ('" +
                          e.engine + " " + e.engine_version + "' serving '" + e.model + "' with KV '" + e.kv_reported +
                          "' against '" + o.engine + " " + o.engine_version + "' serving '" + o.model + "' with KV '" +
                          o.kv_reported + "'): every shard's endpoint of one config must run the same server build, "
                          "model and KV cache");
    }
    if (!same_endpoints)
      throw_input_error(s.name() + " and " + first.name() + " differ in which configs are served by endpoints");
  }

  std::map<int64_t, const ShardRun*> by_index;
  for (const ShardRun& s : shards) {
    const auto [it, fresh] = by_index.emplace(s.index(), &s);
    if (!fresh) throw_input_error("shard " + std::to_string(s.index()) + "/" + std::to_string(n) + " is given twice: " +
                                  it->second->name() + " and " + s.name());
  }

  // The plan's items: the same list in every shard, positions 0..K-1, each key once.
  const std::vector<PlanItem>& plan = first.plan_items;
  std::map<std::string, int64_t> owner;  // item key -> its shard
  for (size_t p = 0; p < plan.size(); ++p) {
    if (plan[p].position != static_cast<int64_t>(p) || plan[p].shard_index < 0 || plan[p].shard_index >= n ||
        !owner.emplace(plan[p].item_key, plan[p].shard_index).second)
      throw_input_error(first.name() + ": its list of the plan's items is damaged at position " + std::to_string(p));
  }
  if (static_cast<int64_t>(plan.size()) != first.plan.plan_items)
    throw_input_error(first.name() + ": lists " + std::to_string(plan.size()) + " plan items, its plan has " +
                      std::to_string(first.plan.plan_items));
  for (const ShardRun& s : shards) {
    bool same = s.plan_items.size() == plan.size();
    for (size_t p = 0; same && p < plan.size(); ++p)
      same = s.plan_items[p].item_key == plan[p].item_key && s.plan_items[p].shard_index == plan[p].shard_index;
    if (!same)
      throw_input_error(s.name() + " and " + first.name() +
                        " list different items for the same plan hash: a shard database was changed after its run");
  }

  std::vector<std::string> missing_shards;
  for (int64_t i = 0; i < n; ++i)
    if (!by_index.count(i)) {
      std::vector<std::string> items;
      for (const PlanItem& p : plan)
        if (p.shard_index == i) items.push_back(p.item_key);
      missing_shards.push_back("shard " + std::to_string(i) + " (" +
                               (items.empty() ? std::string("no items") : "items " + list_some(items, 4)) + ")");
    }
  if (!missing_shards.empty()) {
    std::string given;
    for (const auto& [i, s] : by_index) given += (given.empty() ? "" : ", ") + s->name();
    throw_input_error(std::to_string(missing_shards.size()) + " of " + std::to_string(n) +
                      " shards missing: " + list_some(missing_shards, 4) + "; given: " + given);
  }

  for (const ShardRun& s : shards) {
    if (s.run.status != RunStatus::complete && s.run.status != RunStatus::interrupted)
      throw_input_error(s.name() + " is incomplete: its status is '" + run_status_name(s.run.status) + "'" +
                        (s.run.status == RunStatus::running ? " (it was killed, or is still being written)" : "") +
                        "; rerun or resume that shard, then merge");
    for (const auto& [key, rows] : s.items) {
      const auto it = owner.find(key);
      if (it == owner.end())
        throw_input_error(s.name() + " holds item " + echo_user_text(key) + ", which is not in the plan");
      if (it->second != s.index()) {
        const ShardRun* other = by_index.at(it->second);
        throw_input_error("item " + echo_user_text(key) + " is duplicated: " + s.name() + " holds it, but it belongs to " +
                          other->name() + (other->items.count(key) ? ", which holds it too" : ""));
      }
    }
    std::vector<std::string> unfinished;
    for (const PlanItem& p : plan) {
      if (p.shard_index != s.index()) continue;
      const auto it = s.items.find(p.item_key);
      if (it == s.items.end() || it->second.metrics.size() != s.configs.size()) unfinished.push_back(p.item_key);
    }
    if (!unfinished.empty())
      throw_input_error(s.name() + " is incomplete: " + std::to_string(unfinished.size()) +
                        " of its items are missing or lack a config: " + list_some(unfinished) +
                        "; rerun or resume that shard, then merge");
  }
}

std::string joined_distinct(const std::vector<ShardRun>& shards, std::string RunInfo::*field) {
  std::vector<std::string> seen;
  for (const ShardRun& s : shards)
    if (std::find(seen.begin(), seen.end(), s.run.info.*field) == seen.end()) seen.push_back(s.run.info.*field);
  std::string out;
  for (const std::string& v : seen) out += (out.empty() ? "" : ", ") + v;
  return out;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) || a == b;
}

}  // namespace

MergeResult Store::merge_shards(const std::string& out_path, const std::vector<std::string>& shard_paths,
                                const std::string& command) {
  if (shard_paths.empty()) throw_usage_error("give the shard databases to merge");
  std::vector<ShardRun> shards;
  for (const std::string& path : shard_paths) {
    if (same_file(path, out_path)) throw_usage_error(path + " is both the merged database and a shard");
    for (const ShardRun& s : shards)
      if (same_file(s.path, path)) throw_usage_error(path + " is given twice");
    Store shard = Store::open(path, Mode::existing);
    shards.push_back(read_shard(shard, *shard.connection_, path));
  }
  std::sort(shards.begin(), shards.end(), [](const ShardRun& a, const ShardRun& b) { return a.index() < b.index(); });
  check_shards(shards);
  const ShardRun& first = shards.front();

  MergeResult result;
  result.shards = static_cast<int64_t>(shards.size());
  result.items = first.plan.plan_items;
  result.plan_hash = first.plan.plan_hash;
  // A --limit plan leaves items out of every shard, and so of the merged run, as of an unsharded run.
  const bool complete = std::all_of(shards.begin(), shards.end(), [](const ShardRun& s) { return s.run.status == RunStatus::complete; });
  result.status = complete ? RunStatus::complete : RunStatus::interrupted;

  // Only now: a merge refused above leaves no database behind.
  Store out = Store::open(out_path, Mode::create);
  Transaction tx(*out.connection_);
  // Inside the transaction, so that two merges of the same shards into one file make one run.
  {
    Statement merged(*out.connection_, "SELECT DISTINCT run_id FROM run_merges ORDER BY run_id");
    while (merged.step()) {
      const int64_t id = merged.column_int(0);
      const std::vector<MergeSource> sources = out.merge_sources(id);
      bool same = sources.size() == shards.size();
      for (size_t i = 0; same && i < shards.size(); ++i)
        same = sources[i].shard_index == shards[i].index() && sources[i].shard_count == *shards[i].plan.shard_count &&
               sources[i].digest == shards[i].digest;
      if (same) {
        result.run_id = id;
        result.already_merged = true;
        if (const std::optional<RunRecord> run = out.find_run(id)) result.status = run->status;
        return result;  // the read-only transaction rolls back harmlessly
      }
    }
  }

  RunInfo info = first.run.info;
  info.command = command;
  info.host = joined_distinct(shards, &RunInfo::host);
  info.cpu = joined_distinct(shards, &RunInfo::cpu);
  info.gpu = joined_distinct(shards, &RunInfo::gpu);
  info.build_flags = joined_distinct(shards, &RunInfo::build_flags);
  // Each item keeps the yardstick of the shard that timed it; shards timed with other
  // workloads (another thread count) join theirs, which then matches no single run's.
  info.calibration = joined_distinct(shards, &RunInfo::calibration);
  const int64_t run_id = out.begin_run(info);
  result.run_id = run_id;
  // The merged run's machine load is its worst shard's (the highest loads over the fewest cores),
  // so it is quiet only when every shard was; times add up as a resumed run's do. Unknown when
  // any shard's is.
  std::optional<RunLoad> load = first.run.load;
  for (const ShardRun& s : shards) {
    if (!load || !s.run.load) {
      load.reset();
      break;
    }
    if (&s == &first) continue;
    load->load_avg_start = std::max(load->load_avg_start, s.run.load->load_avg_start);
    load->load_avg_max = std::max(load->load_avg_max, s.run.load->load_avg_max);
    load->cpu_seconds += s.run.load->cpu_seconds;
    load->wall_seconds += s.run.load->wall_seconds;
    load->cores = std::min(load->cores, s.run.load->cores);
  }
  out.record_run_load(run_id, load);

  std::map<std::string, int64_t> config_id;
  for (const RunConfigRecord& rc : first.configs) {
    const int64_t id = out.add_config({rc.spec, rc.hash, rc.bits_per_element});
    out.attach_config(run_id, id, rc.role, rc.kv_bytes_per_token);
    if (rc.kld_estimator != "full") out.set_config_estimator(run_id, id, rc.kld_estimator, rc.top_k);
    // Shards of one plan may have been started with other spellings of one config: the first's
    // shows. A label that is the spec (or none, before v7) reads back the same unwritten.
    if (rc.label != rc.spec) out.set_config_label(run_id, id, rc.label);
    if (rc.model) out.record_config_model(run_id, id, *rc.model);
    config_id[rc.spec] = id;
  }
  // An endpoint config's row says every server its shards ran on.
  for (const auto& [spec, first_endpoint] : first.endpoints) {
    ConfigEndpoint e = first_endpoint;
    e.config_id = config_id.at(spec);
    std::vector<std::string> urls;
    for (const ShardRun& s : shards) {
      const std::string& url = s.endpoints.at(spec).url;
      if (std::find(urls.begin(), urls.end(), url) == urls.end()) urls.push_back(url);
    }
    e.url.clear();
    for (const std::string& url : urls) e.url += (e.url.empty() ? "" : ", ") + url;
    out.add_config_endpoint(run_id, e);
  }
  {
    const DigestedTable& table = digested_table("item_failures");
    RowInserter failure(*out.connection_, table);
    for (const ShardRun& s : shards)
      for (auto [spec, f] : s.failures) {
        f.config_id = spec.empty() ? std::optional<int64_t>() : std::optional<int64_t>(config_id.at(spec));
        failure.insert(record_row(table, failure_fields(), f, {{"run_id", run_id}}));
      }
  }
  // Items in the plan's order, as an unsharded run stores them.
  std::map<int64_t, const ShardRun*> by_index;
  for (const ShardRun& s : shards) by_index[s.index()] = &s;
  for (const PlanItem& p : first.plan_items) {
    const ItemRows& rows = by_index.at(p.shard_index)->items.at(p.item_key);
    ItemWriter writer = out.begin_item(run_id, rows.info);
    for (auto [spec, m] : rows.metrics) {
      m.config_id = config_id.at(spec);
      writer.add_metrics(m);
    }
    for (auto [spec, t] : rows.turns) {
      t.config_id = config_id.at(spec);
      writer.add_turn(t);
    }
    for (auto [spec, c] : rows.token_classes) {
      c.config_id = config_id.at(spec);
      writer.add_token_class(c);
    }
    for (auto [spec, l] : rows.latency) {
      l.config_id = config_id.at(spec);
      writer.add_latency(l);
    }
    for (auto [spec, p] : rows.positions) {
      p.config_id = config_id.at(spec);
      writer.add_position(p);
    }
    writer.commit();
  }
  RunPlan plan = first.plan;
  plan.shard_index.reset();
  plan.shard_count.reset();
  plan.shard_origin.clear();
  out.record_plan(run_id, plan, {});

  std::string started = first.run.started_at, finished = first.run.finished_at;
  const DigestedTable& merges = digested_table("run_merges");
  RowInserter source(*out.connection_, merges);
  for (const ShardRun& s : shards) {
    started = std::min(started, s.run.started_at);
    finished = std::max(finished, s.run.finished_at);
    const MergeSource m{s.index(), *s.plan.shard_count, s.path, s.run.id, s.run.info.host, s.run.started_at,
                        s.run.finished_at, s.digest};
    source.insert(record_row(merges, merge_source_fields(), m, {{"run_id", run_id}}));
  }
  // The merged run spans its shards: from the first one's start to the last one's end.
  out.finish_run(run_id, complete ? RunStatus::complete : RunStatus::interrupted);
  const DigestedTable& runs = digested_table("runs");
  RunRecord span;
  span.started_at = started;
  span.finished_at = finished;
  update_row(
      *out.connection_, runs, "id = ?1", {run_id},
      [&](Row& r) { set_columns(runs, run_fields(), span, r, {"started_at", "finished_at"}); }, run_id);
  tx.commit();
  return result;
}

}  // namespace kvgate::results
