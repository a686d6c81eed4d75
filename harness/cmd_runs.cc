// `kvgate runs list` and `kvgate runs show RUN`: what the results store holds, for people and
// (with --json) for scripts. Both only read: a missing or foreign database is bad input.
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "harness/commands.h"
#include "harness/report/answers.h"
#include "harness/report/config_labels.h"
#include "harness/report/depth_accuracy.h"
#include "harness/report/per_turn.h"
#include "harness/report/engine_report.h"
#include "harness/report/position_report.h"
#include "harness/stored_scores.h"
#include "harness/report/verdicts.h"
#include "harness/weights_axis.h"
#include "kernels/kv_config.h"
#include "results/store.h"
#include "scoring/aggregate.h"
#include "scoring/metrics.h"

namespace kvgate::harness {
namespace {

struct RunsArgs {
  std::string db;
  std::string run = "latest";
  bool json = false;
  GpuFlags gpu;
  bool answers = false, changed = false;  // --answers [--changed]
  std::string config, domain;             // --config SPEC, --domain D (with --answers)
  std::string policy;                     // the rollout policy verdicts come from; "" = built-in ci/gates/rollout.json
};

struct MergeArgs {
  std::string out;
  std::vector<std::string> shards;
  bool json = false;
  std::string command_line;
};

// A run whose row still says 'running' either is being written right now or was killed;
// either way its numbers are incomplete, and listings must say so.
bool is_complete(const results::RunRecord& r) { return r.status == results::RunStatus::complete; }

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json run_json(const results::RunRecord& r) {
  const auto& i = r.info;
  return {{"id", r.id},
          {"status", results::run_status_name(r.status)},
          {"complete", is_complete(r)},
          {"started_at", r.started_at},
          {"finished_at", r.finished_at.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.finished_at)},
          {"items", r.items},
          {"command", i.command},
          {"git_sha", i.git_sha},
          {"build_flags", i.build_flags},
          {"host", i.host},
          {"cpu", i.cpu},
          {"gpu", i.gpu},
          {"backend", i.backend},
          {"model_path", i.model_path},
          {"model_sha256", i.model_sha256},
          {"suite_name", i.suite_name},
          {"suite_hash", i.suite_hash},
          {"seed", i.seed},
          {"threads", i.threads},
          {"kvgate_version", i.kvgate_version}};
}

// 'interrupted' is what the store calls a run that finished without every item of its plan: a
// --limit run (or items that failed on an endpoint). It ended normally, so it reads "partial".
std::string status_text(const results::RunRecord& r) {
  if (r.status == results::RunStatus::running) return "running (incomplete)";
  if (r.status == results::RunStatus::interrupted) return "partial (resumable)";
  return results::run_status_name(r.status);
}

struct ConfigResults {
  int64_t config_id = 0;
  std::string spec, label;
  results::ConfigRole role = results::ConfigRole::candidate;
  scoring::ItemAggregate items;
};

// Per config that has stored items, ordered by spec.
std::vector<ConfigResults> summarize(const results::StoredRun& stored) {
  std::map<int64_t, scoring::ItemAggregator> by_config;
  for (const results::RunItemMetrics& r : stored.items) by_config[r.metrics.config_id].add(item_scores(r.metrics));
  std::vector<ConfigResults> out;
  for (const auto& [id, items] : by_config) {
    ConfigResults c{id, "config#" + std::to_string(id), "", results::ConfigRole::candidate, items.result()};
    c.label = c.spec;
    if (const results::StoredConfig* rc = stored.config(id))
      c.spec = rc->spec, c.label = rc->label.empty() ? rc->spec : rc->label, c.role = rc->role;
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const ConfigResults& x, const ConfigResults& y) { return x.spec < y.spec; });
  return out;
}

scoring::GoldSignal reference_gold(const std::vector<ConfigResults>& summary) {
  for (const ConfigResults& c : summary)
    if (c.role == results::ConfigRole::reference) return scoring::gold_signal(c.items);
  return {};
}

void run_list(const RunsArgs& a) {
  results::Store store = results::Store::open(results::resolve_db_path(a.db), results::Store::Mode::existing);
  const auto runs = store.list_runs();
  if (a.json) {
    nlohmann::json out = {{"db", store.path()}, {"runs", nlohmann::json::array()}};
    for (const auto& r : runs) out["runs"].push_back(run_json(r));
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (runs.empty()) {
    std::printf("%s: no runs recorded\n", store.path().c_str());
    return;
  }
  std::printf("%s\n", fmt::format("{:>5}  {:<20}  {:<24}  {:<24}  {:>6}  {:<16}  {}", "ID", "STATUS", "STARTED",
                                  "FINISHED", "ITEMS", "SUITE", "COMMAND")
                          .c_str());
  for (const auto& r : runs)
    std::printf("%s\n", fmt::format("{:>5}  {:<20}  {:<24}  {:<24}  {:>6}  {:<16}  {}", r.id, status_text(r),
                                    r.started_at, r.finished_at.empty() ? "-" : r.finished_at, r.items,
                                    r.info.suite_name, r.info.command)
                            .c_str());
}

// The run's plan (docs/scale-out.md): its hash, its shard, the shard runs it was merged from.
nlohmann::json plan_json(results::Store& store, int64_t run_id) {
  const std::optional<results::RunPlan> plan = store.run_plan(run_id);
  if (!plan) return nullptr;
  nlohmann::json shard = nullptr;
  if (plan->shard_index)
    shard = {{"index", *plan->shard_index}, {"count", *plan->shard_count}, {"from", plan->shard_origin}};
  nlohmann::json merged = nlohmann::json::array();
  for (const results::MergeSource& m : store.merge_sources(run_id))
    merged.push_back({{"shard", m.shard_index},
                      {"count", m.shard_count},
                      {"db", m.source_db},
                      {"run", m.source_run_id},
                      {"host", m.host},
                      {"started_at", m.started_at},
                      {"finished_at", m.finished_at},
                      {"digest", m.digest}});
  return {{"hash", plan->plan_hash}, {"items", plan->plan_items}, {"shard", shard}, {"merged_from", merged}};
}

std::string plan_text(const nlohmann::json& plan) {
  if (plan.is_null()) return "";
  std::string text = fmt::format("  plan      {}  ({} items)", plan["hash"].get<std::string>(), plan["items"].get<int64_t>());
  if (!plan["shard"].is_null())
    text += fmt::format("  shard {}/{} (from {})", plan["shard"]["index"].get<int64_t>(),
                        plan["shard"]["count"].get<int64_t>(), plan["shard"]["from"].get<std::string>());
  if (!plan["merged_from"].empty()) text += fmt::format("  merged from {} shards:", plan["merged_from"].size());
  text += "\n";
  for (const auto& m : plan["merged_from"])
    text += fmt::format("    shard {}  {} run {}  {}  {} .. {}\n", m["shard"].get<int64_t>(), m["db"].get<std::string>(),
                        m["run"].get<int64_t>(), m["host"].get<std::string>(), m["started_at"].get<std::string>(),
                        m["finished_at"].get<std::string>());
  return text;
}

void run_show_answers(const RunsArgs& a, results::Store& store, const results::StoredRun& stored) {
  const results::RunRecord& run = stored.record;
  AnswersFilter filter;
  filter.changed_only = a.changed;
  filter.domain = a.domain;
  if (!a.config.empty()) filter.config = resolve_config(a.config, stored.configs, store.path(), run.id);
  const RunAnswers answers = read_answers(stored, filter);
  if (a.json) {
    nlohmann::json out = {{"run", run.id}, {"db", store.path()}};
    out.update(answers_json(answers));
    // Answers are model output: a token cut mid-character is not valid UTF-8, so replace it.
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::fputs(answers_text(answers, run.id, filter).c_str(), stdout);
}

void run_show(const RunsArgs& a) {
  results::Store store = results::Store::open(results::resolve_db_path(a.db), results::Store::Mode::existing);
  const results::RunRecord run = store.resolve_run(a.run);
  const results::StoredRun stored = results::StoredRun::load(store, run);
  if (a.answers) return run_show_answers(a, store, stored);
  const std::vector<results::StoredConfig>& configs = stored.configs;
  const auto summary = summarize(stored);
  const nlohmann::json plan = plan_json(store, run.id);
  const GpuBudget budget = gpu_budget(a.gpu.gpu, a.gpu.mem_gib, a.gpu.mem_util, a.gpu.context);
  const std::vector<WeightsKvRow> weights_kv = weights_kv_rows(stored, budget, file_size_or_nan(run.info.model_path));
  const EngineRunView engine = read_engine_view(stored);
  const scoring::GoldSignal gold = reference_gold(summary);
  const RunVerdicts verdicts = run_verdicts(stored, a.policy);
  const PerTurn turns = per_turn(stored);
  const PositionView positions = run_positions(stored, positions_bootstrap());
  const DepthAccuracy depth_accuracy = run_depth_accuracy(stored);
  if (a.json) {
    nlohmann::json out = run_json(run);
    out["db"] = store.path();
    out["plan"] = plan;
    out["verdict_policy"] = verdicts.policy.source;
    out["verdicts"] = verdicts_json(verdicts)["verdicts"];
    out["verdict_conclusion"] = verdicts.conclusion;
    out["configs"] = nlohmann::json::array();
    for (const auto& c : configs) {
      nlohmann::json model = nullptr;
      if (c.model)
        model = {{"label", c.model->label},           {"path", c.model->path},
                 {"sha256", c.model->sha256},         {"file_bytes", c.model->file_bytes},
                 {"weight_bytes", c.model->weight_bytes}, {"weight_type", c.model->weight_type}};
      out["configs"].push_back({{"id", c.config_id},
                                {"label", c.label},
                                {"spec", c.spec},
                                {"kv_spec", c.model ? c.model->kv_spec : c.spec},
                                {"hash", c.hash},
                                {"role", results::config_role_name(c.role)},
                                {"bits_per_element", number_or_null(c.bits_per_element)},
                                {"kv_bytes_per_token", number_or_null(c.kv_bytes_per_token)},
                                {"kld_estimator", c.kld_estimator},
                                {"top_k", c.top_k ? nlohmann::json(*c.top_k) : nlohmann::json(nullptr)},
                                {"model", model}});
    }
    nlohmann::json table = nlohmann::json::array();
    for (const WeightsKvRow& r : weights_kv)
      table.push_back({{"spec", r.spec},
                       {"label", r.label},
                       {"role", results::config_role_name(r.role)},
                       {"weights", r.weights.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.weights)},
                       {"weight_type", r.weight_type},
                       {"kv", r.kv},
                       {"kld_mean", number_or_null(r.quality.kld_mean)},
                       {"kld_p99", number_or_null(r.quality.kld_p99)},
                       {"same_top1", number_or_null(r.quality.same_top1)},
                       {"gold_accuracy_delta", number_or_null(r.gold_accuracy_delta)},
                       {"weight_bytes", number_or_null(r.weight_bytes)},
                       {"kv_bytes_per_token", number_or_null(r.kv_bytes_per_token)},
                       {"kv_bytes_per_session", number_or_null(r.kv_bytes_per_session)},
                       {"sessions", r.sessions < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.sessions)}});
    out["weights_kv"] = {{"gpu", budget.gpu.name},
                         {"gpu_mem_bytes", budget.gpu.mem_bytes},
                         {"mem_util", budget.mem_util},
                         {"context", budget.context},
                         {"rows", table}};
    out["summary"] = nlohmann::json::array();
    for (const auto& s : summary)
      out["summary"].push_back({{"config_id", s.config_id},
                                {"label", s.label},
                                {"spec", s.spec},
                                {"role", results::config_role_name(s.role)},
                                {"items", s.items.items},
                                {"scored_tokens", s.items.scored_tokens},
                                {"kld_mean", number_or_null(s.items.kld_mean)},
                                {"same_top1", number_or_null(s.items.same_top1)},
                                {"gold_answered", s.items.gold_items},
                                {"gold_correct", s.items.gold_correct},
                                {"gold_accuracy", gold.informative() ? number_or_null(s.items.gold_accuracy) : nullptr},
                                {"answered_turns", s.items.answered_turns},
                                {"first_token_eos_rate", number_or_null(s.items.first_token_eos_rate)},
                                {"first_token_differs_rate", number_or_null(s.items.first_token_differs_rate)}});
    out["gold_accuracy"] = {{"informative", gold.informative()},
                            {"reference_correct", gold.reference_correct},
                            {"reference_answered", gold.reference_answered},
                            {"note", gold.note().empty() ? nlohmann::json(nullptr) : nlohmann::json(gold.note())}};
    out["per_turn"] = per_turn_json(turns);
    out["positions"] = positions_json(positions);
    out["positions_bootstrap"] = {{"unit", "item"},
                                  {"resamples", positions.bootstrap.resamples},
                                  {"confidence", positions.bootstrap.confidence},
                                  {"seed", positions.bootstrap.seed},
                                  {"min_items", scoring::kDepthMinDocuments}};
    out["depth_accuracy"] = depth_accuracy_json(depth_accuracy);
    out.update(engine_json(engine));
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  const auto& i = run.info;
  std::string text = fmt::format("run {}  {}\n", run.id, status_text(run));
  // First what a reader came for: which configs can replace the reference here, and why, and what
  // the run cannot conclude.
  text += verdicts_text(verdicts);
  text += fmt::format("  started   {}\n  finished  {}\n", run.started_at, run.finished_at.empty() ? "-" : run.finished_at);
  text += fmt::format("  command   {}\n  kvgate    {} (git {}, {})\n", i.command, i.kvgate_version, i.git_sha, i.build_flags);
  text += fmt::format("  host      {}  cpu {}  gpu {}  backend {}\n", i.host, i.cpu, i.gpu, i.backend);
  text += fmt::format("  model     {}  sha256 {}\n", i.model_path, i.model_sha256);
  text += fmt::format("  suite     {}  hash {}  seed {}  threads {}\n", i.suite_name, i.suite_hash, i.seed, i.threads);
  text += fmt::format("  items     {}\n", run.items);
  text += plan_text(plan);
  if (!configs.empty()) {
    // Each config as typed, its canonical spec last (the one results are keyed and gated by).
    size_t label_width = 12;
    for (const auto& c : configs) label_width = std::max(label_width, c.label.size());
    text += "configs\n";
    for (const auto& c : configs)
      text += fmt::format("  {:<10} {:<{}} {:>6.3f} bits/elem {:>7} KV bytes/token  {}\n", results::config_role_name(c.role),
                          c.label, label_width, c.bits_per_element,
                          std::isfinite(c.kv_bytes_per_token) ? fmt::format("{:.0f}", c.kv_bytes_per_token) : "-", c.spec);
  }
  if (!summary.empty()) {
    size_t width = 12;
    for (const auto& s : summary) width = std::max(width, s.label.size());
    // "n/a (reference 0/10)" where the reference cannot answer the gold questions.
    const std::string na = gold.unavailable();
    const size_t gold_width = std::max<size_t>(8, na.size());
    auto gold_cell = [&](const scoring::ItemAggregate& x) {
      if (gold.informative()) return fmt::format("{:.1f}", 100.0 * x.gold_accuracy);
      return x.gold_items == 0 ? std::string("-") : na;
    };
    // First-token checks: answers that end at once (EOS at the first token) and answers whose
    // first token already differs from the reference's, over the turns with an answer.
    auto rate = [](double v) { return std::isfinite(v) ? fmt::format("{:.1f}", 100.0 * v) : std::string("-"); };
    text += fmt::format("{:<{}} {:>6} {:>10} {:>12} {:>12} {:>{}} {:>10} {:>11}\n", "results", width + 2, "items", "tokens",
                        scoring::metric_info(scoring::Metric::kld_mean).label,
                        scoring::metric_heading(scoring::metric_info(scoring::Metric::same_top1), true), "gold %", gold_width,
                        "1st EOS %", "1st diff %");
    for (const auto& s : summary)
      text += fmt::format("  {:<{}} {:>6} {:>10} {:>12.6f} {:>12.3f} {:>{}} {:>10} {:>11}\n", s.label, width, s.items.items,
                          s.items.scored_tokens, s.items.kld_mean, 100.0 * s.items.same_top1, gold_cell(s.items), gold_width,
                          rate(s.items.first_token_eos_rate), rate(s.items.first_token_differs_rate));
    if (!gold.note().empty()) text += "  note: " + gold.note() + "\n";
  }
  text += per_turn_text(turns);
  text += positions_text(positions);
  text += depth_accuracy_text(depth_accuracy);
  if (!summary.empty()) text += weights_kv_text(weights_kv, budget);
  text += endpoints_text(engine) + failures_text(engine) + load_text(engine);
  std::fputs(text.c_str(), stdout);
}

void run_merge(const MergeArgs& a) {
  const results::MergeResult m = results::Store::merge_shards(a.out, a.shards, a.command_line);
  if (a.json) {
    const nlohmann::json out = {{"db", a.out},
                                {"run", m.run_id},
                                {"already_merged", m.already_merged},
                                {"status", results::run_status_name(m.status)},
                                {"items", m.items},
                                {"shards", m.shards},
                                {"plan_hash", m.plan_hash}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  if (m.already_merged) {
    std::printf("run %lld in %s was already merged from these %lld shards; nothing written\n",
                static_cast<long long>(m.run_id), a.out.c_str(), static_cast<long long>(m.shards));
  } else {
    std::printf("run %lld in %s: %lld shards merged, %lld items, %s (plan %s)\n", static_cast<long long>(m.run_id),
                a.out.c_str(), static_cast<long long>(m.shards), static_cast<long long>(m.items), results::run_status_name(m.status),
                m.plan_hash.c_str());
  }
}

}  // namespace

void add_runs_commands(CLI::App& app, CommandContext& ctx) {
  CLI::App* runs = app.add_subcommand("runs", "Runs recorded in the results database");
  runs->require_subcommand(1);

  auto list = std::make_shared<RunsArgs>();
  CLI::App* l = runs->add_subcommand("list", "List every run, oldest first; unfinished runs are marked incomplete");
  l->add_option("--db", list->db, "Results database (default: $KVGATE_DB, else ./kvgate.db)");
  l->add_flag("--json", list->json, "Machine-readable output");
  l->callback([list] { run_list(*list); });

  auto show = std::make_shared<RunsArgs>();
  CLI::App* s = runs->add_subcommand("show", "One run: provenance, configs and per-config results");
  s->add_option("run", show->run, "Run id, or 'latest'")->required();
  s->add_option("--db", show->db, "Results database (default: $KVGATE_DB, else ./kvgate.db)");
  s->add_flag("--json", show->json, "Machine-readable output");
  CLI::Option* answers = s->add_flag(
      "--answers", show->answers,
      "Print every item's answers side by side: each config's greedy answer beside the reference's, the first "
      "divergence marked, the gold answer on an item's last turn");
  s->add_flag("--changed", show->changed, "With --answers: only the turns whose answer changed against the reference")
      ->needs(answers);
  s->add_option("--config", show->config, "With --answers: only this config (beside the reference), as typed or canonical")
      ->needs(answers);
  s->add_option("--domain", show->domain, "With --answers: only items of this eval domain")->needs(answers);
  s->add_option("--policy", show->policy,
                "Rollout policy the verdict per config holds its bounds against (default: the built-in "
                "ci/gates/rollout.json; docs/gates.md)");
  add_gpu_flags(s, show->gpu);
  s->callback([show] { run_show(*show); });

  auto merge = std::make_shared<MergeArgs>();
  CLI::App* m = runs->add_subcommand(
      "merge", "Merge the shard runs of one sharded eval or replay (--shard) into one run (docs/scale-out.md)");
  m->add_option("out", merge->out, "Database to write the merged run to (created if missing)")->required();
  m->add_option("shards", merge->shards, "The shard databases, one per shard; the latest run of each is merged")
      ->required();
  m->add_flag("--json", merge->json, "Machine-readable output");
  m->callback([merge, &ctx] {
    merge->command_line = ctx.command_line;
    run_merge(*merge);
  });
}

}  // namespace kvgate::harness
