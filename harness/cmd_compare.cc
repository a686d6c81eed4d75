// `kvgate compare`: can a candidate KV config replace the production one on this workload, and
// which one saves the most memory? One run whose reference config is production and any number
// of candidates: per candidate the rollout verdict (scoring/verdict.h) with its evidence, its KV
// bytes per token and the sessions that fit on a GPU (the weights x KV table's figures), and a
// recommendation, the smallest-KV candidate whose verdict is safe. All candidates are decided
// together, so the bounds are Bonferroni-corrected over them and the recommendation keeps the
// policy's error rate. `--run RUN` reads a stored run; `--production SPEC --candidate SPEC,...`
// with a source runs the eval first (docs/gates.md, "kvgate compare").
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/digits.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "harness/commands.h"
#include "harness/eval_cli.h"
#include "harness/report/verdicts.h"
#include "harness/weights_axis.h"
#include "results/store.h"
#include "results/stored_run.h"

namespace kvgate::harness {
namespace {

struct CompareArgs {
  std::string run;  // --run: a stored run; empty: run the eval the flags describe
  std::vector<std::string> eval_flags_given;  // flags that only mean something when the eval runs
  std::string production, candidates;
  EvalArgs eval;
  std::string policy, md;
  bool json = false;
  GpuFlags gpu;
};

struct Candidate {
  const scoring::ConfigVerdict* verdict = nullptr;
  double kv_bytes_per_token = 0;  // NaN: unknown
  int64_t sessions = -1;          // -1: unknown
};

struct Comparison {
  results::StoredRun run;
  std::string db;
  GpuBudget budget;
  RunVerdicts verdicts;
  std::vector<Candidate> candidates;  // smallest KV first (unknown sizes last), then run order
  double production_kv_bytes = 0;
  int64_t production_sessions = -1;
  const Candidate* recommended = nullptr;
};

std::string bytes_text(double b) { return std::isfinite(b) ? fmt::format("{:.0f}", b) : "-"; }
std::string sessions_text(int64_t s) { return s < 0 ? "-" : grouped_digits(s); }

Comparison compare_run(results::Store& store, const results::RunRecord& record, const CompareArgs& a) {
  Comparison c;
  c.run = results::StoredRun::load(store, record);
  c.db = store.path();
  if (!c.run.reference()) throw_input_error(fmt::format("{}: run {} has no reference config to compare against", c.db, record.id));
  size_t candidates = 0;
  for (const results::RunConfigRecord& rc : c.run.configs) candidates += rc.role == results::ConfigRole::reference ? 0 : 1;
  if (candidates == 0)
    throw_input_error(fmt::format("{}: run {} has only its reference config; compare needs at least one candidate", c.db, record.id));
  c.budget = gpu_budget(a.gpu.gpu, a.gpu.mem_gib, a.gpu.mem_util, a.gpu.context);
  c.verdicts = run_verdicts(c.run, a.policy, candidates);
  const std::vector<WeightsKvRow> rows = weights_kv_rows(c.run, c.budget, file_size_or_nan(record.info.model_path));
  auto row_of = [&](const std::string& spec) -> const WeightsKvRow* {
    for (const WeightsKvRow& r : rows)
      if (r.spec == spec) return &r;
    return nullptr;
  };
  if (const WeightsKvRow* p = row_of(c.run.reference()->spec)) c.production_kv_bytes = p->kv_bytes_per_token, c.production_sessions = p->sessions;
  else c.production_kv_bytes = std::nan("");
  for (const scoring::ConfigVerdict& v : c.verdicts.configs) {
    Candidate cand{&v, std::nan(""), -1};
    if (const WeightsKvRow* r = row_of(v.config)) cand.kv_bytes_per_token = r->kv_bytes_per_token, cand.sessions = r->sessions;
    c.candidates.push_back(cand);
  }
  std::stable_sort(c.candidates.begin(), c.candidates.end(), [](const Candidate& x, const Candidate& y) {
    const bool xk = std::isfinite(x.kv_bytes_per_token), yk = std::isfinite(y.kv_bytes_per_token);
    return xk != yk ? xk : xk && x.kv_bytes_per_token < y.kv_bytes_per_token;
  });
  for (const Candidate& cand : c.candidates)
    if (cand.verdict->verdict == scoring::Verdict::safe) {
      c.recommended = &cand;
      break;
    }
  return c;
}

// "q4_0 (6,480 KV bytes per token against f16's 23,040: 1.9x the sessions)" or "none is safe ...".
std::string recommendation_text(const Comparison& c) {
  const std::string& prod = c.verdicts.reference;
  if (c.recommended) {
    const Candidate& r = *c.recommended;
    std::string text = fmt::format("{} can replace {}: the smallest KV cache whose verdict is safe", r.verdict->shown(), prod);
    if (std::isfinite(r.kv_bytes_per_token) && std::isfinite(c.production_kv_bytes))
      text += fmt::format(" ({} KV bytes per token against {}", bytes_text(r.kv_bytes_per_token), bytes_text(c.production_kv_bytes));
    if (r.sessions > 0 && c.production_sessions > 0)
      text += fmt::format("; {} sessions against {} on {}", sessions_text(r.sessions), sessions_text(c.production_sessions),
                          c.budget.gpu.name);
    return text + (std::isfinite(r.kv_bytes_per_token) && std::isfinite(c.production_kv_bytes) ? ")" : "");
  }
  std::string text = "none is safe on this evidence";
  std::string undecided;
  for (const Candidate& cand : c.candidates) {
    const scoring::ConfigVerdict& v = *cand.verdict;
    if (v.verdict != scoring::Verdict::inconclusive) continue;
    undecided += (undecided.empty() ? "" : ", ") + v.shown() + " " +
                 (std::isnan(v.items_to_decide) ? std::string("more items") : "about " + scoring::item_count_text(v.items_to_decide) + " items") +
                 (v.toward_harm ? " (likely unsafe)" : "");
  }
  if (!undecided.empty()) text += "; deciding the undecided ones, smallest KV first, would take: " + undecided;
  return text;
}

std::string correction_text(const Comparison& c) {
  return fmt::format("bounds at {:.4g} % ({:.4g} % over {} candidates, Bonferroni)", 100 * c.verdicts.configs.front().confidence,
                     100 * c.verdicts.policy.confidence, c.verdicts.configs.size());
}

std::string compare_text(const Comparison& c) {
  const results::RunRecord& r = c.run.record;
  std::string t = fmt::format("compare: run {} ({}, {} items, {}) in {}: production {} against {} candidates\n", r.id,
                              r.info.suite_name, r.items, results::run_status_name(r.status), c.db, c.verdicts.reference,
                              c.candidates.size());
  t += fmt::format("rollout policy {}, {}; fitted on {}\n", c.verdicts.policy.source, correction_text(c), c.budget.describe());
  size_t width = 12;
  for (const Candidate& cand : c.candidates) width = std::max(width, cand.verdict->shown().size() + 2);
  width = std::max(width, c.verdicts.reference.size() + 7);
  t += fmt::format("{:<{}} {:<13} {:>12} {:>10}\n", "config", width, "verdict", "KV B/token", "sessions");
  for (const Candidate& cand : c.candidates)
    t += fmt::format("  {:<{}} {:<13} {:>12} {:>10}\n", cand.verdict->shown(), width - 2,
                     scoring::verdict_name(cand.verdict->verdict), bytes_text(cand.kv_bytes_per_token), sessions_text(cand.sessions));
  t += fmt::format("  {:<{}} {:<13} {:>12} {:>10}\n", c.verdicts.reference + " (prod)", width - 2, "-",
                   bytes_text(c.production_kv_bytes), sessions_text(c.production_sessions));
  t += "evidence:\n";
  for (const Candidate& cand : c.candidates) t += "  " + cand.verdict->line() + "\n";
  for (const std::string& line : c.verdicts.conclusion) t += "  " + line + "\n";
  t += "RECOMMENDATION: " + recommendation_text(c) + "\n";
  return t;
}

std::string compare_markdown(const Comparison& c) {
  const results::RunRecord& r = c.run.record;
  std::string md = fmt::format("## kvgate compare: run {} ({}, {} items)\n\n", r.id, r.info.suite_name, r.items);
  md += fmt::format("**Recommendation: {}.**\n\n", recommendation_text(c));
  md += fmt::format("Production `{}` against {} candidates; rollout policy `{}`, {}; fitted on {}.\n\n",
                    c.verdicts.reference, c.candidates.size(), c.verdicts.policy.source, correction_text(c), c.budget.describe());
  md += "| config | verdict | KV bytes/token | sessions | evidence |\n|---|---|---:|---:|---|\n";
  for (const Candidate& cand : c.candidates)
    md += fmt::format("| {} | {} | {} | {} | {} |\n", cand.verdict->shown(), scoring::verdict_name(cand.verdict->verdict),
                      bytes_text(cand.kv_bytes_per_token), sessions_text(cand.sessions), cand.verdict->reason);
  md += fmt::format("| {} (production) | - | {} | {} | |\n\n", c.verdicts.reference, bytes_text(c.production_kv_bytes),
                    sessions_text(c.production_sessions));
  for (const std::string& line : c.verdicts.conclusion) md += line + "\n";
  return md;
}

nlohmann::json compare_json(const Comparison& c) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  auto sessions = [](int64_t s) { return s < 0 ? nlohmann::json(nullptr) : nlohmann::json(s); };
  nlohmann::json candidates = nlohmann::json::array();
  for (const Candidate& cand : c.candidates) {
    nlohmann::json j = verdict_json(*cand.verdict);
    j["kv_bytes_per_token"] = num(cand.kv_bytes_per_token);
    j["sessions"] = sessions(cand.sessions);
    candidates.push_back(std::move(j));
  }
  const results::StoredConfig* ref = c.run.reference();
  return {{"run", c.run.record.id},
          {"db", c.db},
          {"suite", c.run.record.info.suite_name},
          {"items", c.run.record.items},
          {"status", results::run_status_name(c.run.record.status)},
          {"policy", c.verdicts.policy.source},
          {"policy_confidence", c.verdicts.policy.confidence},
          {"confidence", c.verdicts.configs.front().confidence},
          {"gpu", {{"name", c.budget.gpu.name}, {"mem_bytes", c.budget.gpu.mem_bytes}, {"mem_util", c.budget.mem_util},
                   {"context", c.budget.context}}},
          {"production",
           {{"label", c.verdicts.reference}, {"spec", ref->spec}, {"kv_bytes_per_token", num(c.production_kv_bytes)},
            {"sessions", sessions(c.production_sessions)}}},
          {"candidates", candidates},
          {"recommendation", c.recommended ? nlohmann::json({{"label", c.recommended->verdict->shown()},
                                                             {"spec", c.recommended->verdict->config}})
                                           : nlohmann::json(nullptr)},
          {"recommendation_text", recommendation_text(c)},
          {"conclusion", c.verdicts.conclusion}};
}

void run_compare(CompareArgs a, CommandContext& ctx) {
  const bool runs_eval = !a.production.empty() || !a.candidates.empty();
  if (runs_eval == !a.run.empty())
    throw_usage_error("kvgate compare: give --run RUN (a stored run whose reference is production), or --production SPEC "
                      "--candidate SPEC[,SPEC...] with --suite, --evalset or --trace to run the eval first");
  std::string db = a.eval.db;
  int64_t run_id = 0;
  if (runs_eval) {
    if (a.production.empty() || a.candidates.empty())
      throw_usage_error("kvgate compare: --production SPEC and --candidate SPEC[,SPEC...] go together");
    a.eval.plan.ref = a.production;
    a.eval.plan.kv = a.candidates;
    a.eval.plan.replay = !a.eval.plan.trace.empty();
    a.eval.json = a.json;
    a.eval.summary = !a.json;  // the eval's table first; its verdicts are this command's, decided together
    a.eval.verdicts = false;
    run_id = run_eval_cmd(a.eval);
  } else if (!a.eval_flags_given.empty()) {
    throw_usage_error("kvgate compare: " + a.eval_flags_given.front() +
                      " sets up the eval that --production runs; with --run RUN the run is already stored");
  }
  results::Store store = results::Store::open(results::resolve_db_path(db), results::Store::Mode::existing);
  const results::RunRecord record = runs_eval ? *store.find_run(run_id) : store.resolve_run(a.run);
  const Comparison c = compare_run(store, record, a);
  if (!a.md.empty()) write_output_file(a.md, compare_markdown(c));
  if (a.json)
    std::printf("%s\n", compare_json(c).dump(2).c_str());
  else
    std::fputs(compare_text(c).c_str(), stdout);
  if (!c.recommended) ctx.exit_code = 1;
}

}  // namespace

void add_compare_commands(CLI::App& app, CommandContext& ctx) {
  auto a = std::make_shared<CompareArgs>();
  CLI::App* c = app.add_subcommand(
      "compare",
      "Which candidate KV config can replace production on this workload: per candidate the rollout verdict, KV bytes "
      "and sessions; recommends the smallest safe one (exit 0), or none (exit 1)");
  c->add_option("--run", a->run, "A stored run (id or latest) whose reference config is production");
  c->add_option("--production", a->production, "Production KV config: the reference the eval runs first");
  c->add_option("--candidate", a->candidates, "Candidate KV configs, comma-separated");
  c->add_option("--suite", a->eval.plan.suite, "With --production: built-in suite or suite JSON file to run");
  c->add_option("--evalset", a->eval.plan.evalset, "With --production: eval items JSONL file to run");
  c->add_option("--trace", a->eval.plan.trace, "With --production: multi-turn sessions JSONL to replay");
  add_eval_run_options(c, a->eval);
  c->add_option("--policy", a->policy,
                "Rollout policy of the verdicts (default: the built-in ci/gates/rollout.json; docs/gates.md)");
  c->add_option("--md", a->md, "Write the comparison as Markdown (for a PR comment) to FILE");
  c->add_flag("--json", a->json, "Machine-readable output");
  add_gpu_flags(c, a->gpu);
  c->callback([a, c, &ctx] {
    a->eval.command_line = ctx.command_line;
    note_eval_flags_given(c, a->eval);
    a->eval_flags_given.clear();
    for (const char* flag : {"--suite", "--evalset", "--trace", "--model", "--threads", "--backend", "--limit",
                             "--max-new-tokens", "--allow-synthetic"})
      if (c->count(flag) > 0) a->eval_flags_given.emplace_back(flag);
    run_compare(*a, ctx);
  });
}

}  // namespace kvgate::harness
