// `kvgate eval` (suites and eval sets) and `kvgate replay` (recorded multi-turn sessions): the
// main job. Both run items through the reference and candidate KV configs into the results
// store and print a per-config summary with the run id.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "core/interrupt.h"
#include "harness/backend.h"
#include "harness/build_info.h"
#include "harness/commands.h"
#include "harness/engine_cli.h"
#include "harness/eval_cli.h"
#include "harness/eval/eval_plan.h"
#include "harness/eval/runner.h"
#include "harness/eval/run_recorder.h"
#include "harness/report/config_labels.h"
#include "harness/report/engine_report.h"
#include "harness/report/per_turn.h"
#include "harness/report/verdicts.h"
#include "harness/weights_axis.h"
#include "results/store.h"
#include "results/stored_run.h"
#include "runtime/blas_kernels.h"
#include "runtime/model_files.h"
#include "runtime/model_store.h"
#include "runtime/synthetic_model.h"
#include "scoring/aggregate.h"
#include "scoring/metrics.h"

namespace kvgate::harness {
namespace {

// A model from `kvgate model synth` has random weights: every quality figure from it is noise,
// so a run on one must be asked for (to time the pipeline at a real shape, say).
void refuse_synthetic(const std::string& model_flag, bool allowed) {
  if (allowed) return;
  const std::string path = runtime::resolve_model_path(model_flag);
  if (runtime::ModelFiles::open(path)->synthetic())
    throw_usage_error(path + ": a synthetic model (random weights from `kvgate model synth`); its quality figures mean "
                      "nothing. Pass --allow-synthetic to run it anyway (timings only)");
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}

std::string host_name() {
  char buf[256] = {0};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown";
}

std::string fmt_or_dash(double v, const char* spec) { return std::isnan(v) ? "-" : fmt::format(fmt::runtime(spec), v); }

nlohmann::json shard_json(const EvalPlan& plan) {
  if (!plan.shard) return nullptr;
  return {{"index", plan.shard->index}, {"count", plan.shard->count}, {"from", plan.shard->origin}};
}

// The reference's gold answers over the items run now: whether Δ answer can say anything.
scoring::GoldSignal reference_gold(const EvalResult& r) {
  for (const ConfigSummaryRow& c : r.configs)
    if (c.reference)
      return scoring::gold_signal(c.quality);
  return {};
}

// `turns`: the per-turn table a replay ends with (null for eval); `verdicts`: the rollout verdicts
// over the run's stored items (null: not asked for).
void print_summary(const EvalResult& r, const EvalPlan& plan, const std::string& plan_hash, const std::string& db_path,
                   bool json, const PerTurn* turns, const RunVerdicts* verdicts) {
  const Workload& w = plan.workload;
  if (json) {
    nlohmann::json configs = nlohmann::json::array();
    auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    for (size_t i = 0; i < r.configs.size(); ++i) {
      const ConfigSummaryRow& c = r.configs[i];
      const PlannedConfig& planned = plan.configs[i];
      configs.push_back({{"kv", c.spec},
                         {"label", planned.label},
                         {"spec", c.spec},
                         {"kv_spec", planned.kv.canonical()},
                         {"weights", plan.weights_run ? nlohmann::json(plan.models[planned.model].label) : nlohmann::json(nullptr)},
                         {"reference", c.reference},
                         {"bits_per_element", c.bits_per_element},
                         {"kv_bytes_per_token", c.kv_bytes_per_token},
                         {"scored_tokens", c.quality.scored_tokens},
                         {"kld_mean", num(c.quality.kld_mean)},
                         {"kld_p99", num(c.quality.kld_p99)},
                         {"same_top1", num(c.quality.same_top1)},
                         {"gold_accuracy", num(c.quality.gold_accuracy)},
                         {"gold_items", c.quality.gold_items},
                         {"first_token_eos_rate", num(c.quality.first_token_eos_rate)},
                         {"first_token_differs_rate", num(c.quality.first_token_differs_rate)},
                         {"ttft_p50_ms", num(c.latency.ttft_p50)},
                         {"tpot_p50_ms", num(c.latency.tpot_p50)},
                         {"endpoint", c.endpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.endpoint)},
                         {"kld_estimator", c.top_k > 0 ? "topk" : "full"},
                         {"top_k", c.top_k > 0 ? nlohmann::json(c.top_k) : nlohmann::json(nullptr)}});
    }
    nlohmann::json j = {{"run", r.run_id},          {"db", db_path},         {"workload", w.source},
                        {"hash", w.hash},           {"items", r.items_total}, {"items_run", r.items_run},
                        {"items_skipped", r.items_skipped}, {"seconds", r.seconds}, {"configs", configs},
                        {"plan_hash", plan_hash}, {"shard", shard_json(plan)},
                        {"plan_items", plan.plan_items()}, {"workload_items", w.items.size()}};
    const scoring::GoldSignal gold = reference_gold(r);
    j["gold_accuracy"] = {{"informative", gold.informative()},
                          {"reference_correct", gold.reference_correct},
                          {"reference_answered", gold.reference_answered},
                          {"note", gold.note().empty() ? nlohmann::json(nullptr) : nlohmann::json(gold.note())}};
    if (!r.cross_checks.empty()) j["cross_check"] = cross_check_json(r);
    if (turns) j["per_turn"] = per_turn_json(*turns);
    if (verdicts) j["verdicts"] = verdicts_json(*verdicts);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  const double ref_acc = r.configs.empty() ? std::nan("") : r.configs.front().quality.gold_accuracy;
  const scoring::GoldSignal gold = reference_gold(r);
  std::printf("run %lld  %s  (%lld items, %lld run now, %.1f s)  db %s\n", static_cast<long long>(r.run_id),
              w.source.c_str(), static_cast<long long>(r.items_total), static_cast<long long>(r.items_run), r.seconds,
              db_path.c_str());
  // Configs as the user typed them; the legend under the table gives their canonical specs.
  std::vector<ConfigName> names;
  for (const PlannedConfig& c : plan.configs) names.push_back({c.label.empty() ? c.spec : c.label, c.spec});
  int width = 17;
  for (const ConfigName& n : names) width = std::max(width, static_cast<int>(n.label.size()) + 6);
  // "n/a (reference 0/10)" where the reference cannot answer the gold questions (scoring/aggregate.h).
  const std::string na = gold.unavailable();
  const int answer_width = std::max(9, static_cast<int>(na.size()));
  using scoring::Metric, scoring::metric_info;
  std::printf("%-*s %6s %11s %12s %12s %*s %9s %9s\n", width, plan.weights_run ? "weights+kv config" : "kv config", "bits",
              std::string(metric_info(Metric::kld_mean).label).c_str(), std::string(metric_info(Metric::kld_p99).label).c_str(),
              scoring::metric_heading(metric_info(Metric::same_top1), true).c_str(), answer_width + 1, "Δ answer", "TTFT ms",
              "TPOT ms");
  for (size_t i = 0; i < r.configs.size(); ++i) {
    const ConfigSummaryRow& c = r.configs[i];
    const std::string& label = i < names.size() ? names[i].label : c.spec;
    const std::string name = c.reference ? label + " (ref)" : label;
    const double delta = c.quality.gold_accuracy - ref_acc;
    const std::string answer = gold.informative() || gold.reference_answered == 0 ? fmt_or_dash(100 * delta, "{:+.1f}%") : na;
    std::printf("%-*s %6.2f %11s %12s %12s %*s %9s %9s\n", width, name.c_str(), c.bits_per_element,
                fmt_or_dash(c.quality.kld_mean, "{:.6f}").c_str(), fmt_or_dash(c.quality.kld_p99, "{:.5f}").c_str(),
                fmt_or_dash(100 * c.quality.same_top1, "{:.2f}").c_str(), answer_width, answer.c_str(),
                fmt_or_dash(c.latency.ttft_p50, "{:.1f}").c_str(), fmt_or_dash(c.latency.tpot_p50, "{:.1f}").c_str());
  }
  if (const std::string legend = canonical_legend(names); !legend.empty()) std::printf("%s\n", legend.c_str());
  if (!gold.note().empty()) std::printf("note: %s\n", gold.note().c_str());
  if (turns) std::fputs(per_turn_text(*turns).c_str(), stdout);
  print_engine_notes(r);
  // What the run can and cannot conclude, over every item it holds (a resumed run's earlier ones too).
  if (verdicts) std::fputs(verdicts_text(*verdicts).c_str(), stdout);
}

// The worker threads a run's numbers depend on: none for a run whose configs are all endpoints,
// which computes nothing in-process, so that shards run on hosts with other core counts merge.
int64_t plan_threads(const EvalArgs& a, const EvalPlan& plan) {
  if (!plan.has_in_process_configs()) return 0;
  return a.options.threads > 0 ? a.options.threads : static_cast<int64_t>(std::thread::hardware_concurrency());
}

results::RunInfo new_run_info(const EvalArgs& a, const EvalPlan& plan, const LoadedModel& lm, const runtime::Backend* backend,
                              const std::string& model_sha256) {
  results::RunInfo info;
  info.command = a.command_line;
  info.git_sha = kGitSha;
  info.build_flags = std::string(kBuildType) + " backends=" + kBackends;
  info.host = host_name();
  info.cpu = cpu_model_name();
  // The BLAS kernel set changes the low bits of every sgemm of the CPU forward pass: two CPU
  // runs' numbers are comparable bit for bit only on the same one.
  if (backend && backend->name() == "cpu") info.cpu += " (OpenBLAS " + runtime::blas_kernels_name() + ")";
  // A run whose configs are all endpoints computes nothing in-process: its numbers come from
  // the serving engines.
  info.backend = backend ? backend->name() : "endpoint";
  if (backend && !backend->device().empty()) info.gpu = backend->device();
  info.model_path = lm.model->path();
  info.model_sha256 = model_sha256;
  info.suite_name = plan.workload.source;
  info.suite_hash = plan.workload.hash;
  info.threads = plan_threads(a, plan);
  info.kvgate_version = kVersion;
  return info;
}

// Says which shard runs and where that came from: a scheduler's array used for something else
// (a sweep over --kv, say) would otherwise shard the run without anyone noticing.
void print_shard(const EvalPlan& plan) {
  if (!plan.shard) return;
  std::fprintf(stderr, "kvgate: shard %lld/%lld (%s%s): %zu of the plan's %zu items\n",
               static_cast<long long>(plan.shard->index), static_cast<long long>(plan.shard->count),
               plan.resume_run > 0 ? "of the resumed run, first from " : "from ", plan.shard->origin.c_str(),
               plan.selected.size(), plan.plan_items());
}

// Says what a resumed run continues: its stored plan, which may be a --limit run's first N items,
// and what is already stored, so a resume never silently runs more (or less) than that.
void print_resume(results::Store& store, const EvalPlan& plan) {
  if (plan.resume_run == 0) return;
  const size_t all = plan.workload.items.size();
  const std::string scope =
      plan.leaves_items_out()
          ? fmt::format("the first {} of its {} items, as its --limit plan (--limit {} runs them all)", plan.plan_items(),
                        all, all)
          : fmt::format("all {} of its items", all);
  std::fprintf(stderr, "kvgate: resuming run %lld (%s): %s; %lld already stored\n", static_cast<long long>(plan.resume_run),
               plan.workload.source.c_str(), scope.c_str(), static_cast<long long>(store.find_run(plan.resume_run)->items));
}

// A shard resumes with the settings its plan was made with, so that it still merges with the
// other shards: --threads, --max-new-tokens and --backend default to the stored ones, and a
// value given that differs, or another kvgate build, is a usage error naming the difference.
void restore_shard_settings(results::Store& store, const EvalPlan& plan, EvalArgs& a) {
  if (plan.resume_run == 0 || !plan.shard) return;
  const results::RunInfo stored = store.find_run(plan.resume_run)->info;
  const std::optional<results::RunPlan> stored_plan = store.run_plan(plan.resume_run);
  if (!a.threads_given) a.options.threads = static_cast<int>(stored.threads);
  if (!a.backend_given) a.options.backend = stored.backend;
  const std::string max_new = plan_value(stored_plan->plan, "max_new_tokens");
  if (!a.max_new_tokens_given && !max_new.empty()) a.options.max_new_tokens = std::stoi(max_new);
}

void check_shard_plan(results::Store& store, const EvalPlan& plan, const std::string& plan_text) {
  if (plan.resume_run == 0 || !plan.shard) return;
  const std::string stored = store.run_plan(plan.resume_run)->plan;
  if (stored == plan_text) return;
  std::string difference;
  for (const char* key : {"threads", "max_new_tokens", "backend", "kvgate", "model_sha256"})
    if (plan_value(stored, key) != plan_value(plan_text, key))
      difference += fmt::format("{}{} {} (now {})", difference.empty() ? "" : ", ", key, plan_value(stored, key),
                                plan_value(plan_text, key));
  throw_usage_error(fmt::format("{}: run {} is shard {}/{} of a plan made with {}; resume it with the same settings, "
                                "or it would not merge with the other shards",
                                store.path(), plan.resume_run, plan.shard->index, plan.shard->count,
                                difference.empty() ? "other settings" : difference));
}

}  // namespace

int64_t run_eval_cmd(EvalArgs a) {
  // A resumed run keeps its own shard; the environment of a scheduler it is resumed under does
  // not choose another.
  const bool resuming = a.resume > 0;
  PlanFlags flags = a.plan;
  flags.shard = resolve_shard(a.shard, [resuming](const char* name) -> const char* {
    return resuming ? nullptr : std::getenv(name);
  });
  if (flags.replay && is_load_replay(flags)) {
    if (resuming) throw_usage_error("a load replay is a timed experiment and cannot be resumed; run it again");
    // Its requests arrive on the trace's clock against one endpoint per config: a part of the
    // trace would be another experiment, not a part of this one.
    if (flags.shard)
      throw_usage_error(flags.shard->origin + ": a load replay is one timed experiment and is not sharded; run it "
                        "without --shard (and outside a scheduler's array)");
    // (With --ref-model the load replay refuses the plan itself: an engine serves its own weights.)
    if (flags.ref_model.empty()) refuse_synthetic(flags.model, a.allow_synthetic);
    run_load_replay_cmd(flags, a.load, a.db, a.json, a.command_line, static_cast<int>(flags.limit));
    return 0;
  }
  const std::string db_path = results::resolve_db_path(a.db);
  // A new run's models are checked before the database is opened: a refused run leaves none.
  std::optional<EvalPlan> new_plan;
  if (a.resume == 0) {
    new_plan = plan_from_flags(flags);
    for (const PlannedModel& m : new_plan->models) refuse_synthetic(m.path, a.allow_synthetic);
  }
  // A new run's inputs (suite, flags, endpoints, models) are all checked before the database is
  // opened, so rejected input never leaves an empty results database behind; a resumed run's
  // plan is in the database.
  // A resumed run's database must be there (never created) and sound: the same quick_check and
  // row digests every reader checks, before anything is written into it.
  std::optional<results::Store> store;
  if (a.resume > 0) store.emplace(results::Store::open(db_path, results::Store::Mode::update));
  EvalPlan plan =
      a.resume > 0 ? RunRecorder::plan_to_resume(*store, a.resume, flags.limit, flags.shard) : std::move(*new_plan);
  if (a.resume > 0) apply_resumed_endpoints(plan, a.plan);
  if (store) restore_shard_settings(*store, plan, a);
  if (!a.json) print_shard(plan);
  if (!a.json && store) print_resume(*store, plan);
  // Engine mode: the endpoints are discovered first (exit 3 naming one that cannot be reached),
  // which settles their KV configs and so the plan, and only then is anything written.
  Endpoints endpoints;
  if (plan.has_endpoints()) endpoints = connect_endpoints(plan, a.seed);
  // Every model of the plan is loaded (memory-mapped) and its tokenizer checked before any
  // forward pass; each gets its own backend, unless endpoints serve every config.
  std::vector<LoadedModel> loaded;
  for (const PlannedModel& m : plan.models) refuse_synthetic(m.path, a.allow_synthetic);
  for (const PlannedModel& m : plan.models) {
    loaded.push_back(load_model(m.path));
    check_same_tokenizer(*loaded.front().model, *loaded.back().model);
  }
  std::vector<std::unique_ptr<runtime::Backend>> backends;
  std::vector<RunModel> models;
  std::vector<std::string> weights_sha256;
  for (size_t m = 0; m < loaded.size(); ++m) {
    backends.push_back(plan.has_in_process_configs() ? make_backend(a.options.backend, *loaded[m].model, a.options.threads)
                                                     : nullptr);
    const std::string& path = loaded[m].model->path();
    weights_sha256.push_back(loaded[m].model->files().sha256());
    const std::string label = plan.weights_run ? plan.models[m].label : std::filesystem::path(path).stem().string();
    models.push_back({&loaded[m], backends.back().get(), weights_identity(*loaded[m].model, label, weights_sha256.back())});
  }
  const LoadedModel& lm = loaded.front();
  const runtime::Backend* backend = backends.front().get();
  const std::string& model_sha256 = weights_sha256.front();
  const results::RunInfo info =
      plan.resume_run > 0 ? results::RunInfo{} : new_run_info(a, plan, lm, backend, model_sha256);
  // What this invocation runs with: for a resumed run, the settings it continues with.
  const PlanSettings settings{model_sha256,
                              plan_threads(a, plan),
                              a.options.max_new_tokens,
                              backend ? backend->name() : "endpoint",
                              kVersion,
                              kGitSha,
                              plan.weights_run ? weights_sha256 : std::vector<std::string>{}};
  const std::string plan_text = describe_plan(plan, settings);
  if (store) check_shard_plan(*store, plan, plan_text);
  // A new run's database is opened (or created) only when the run opens, once its items are
  // prepared and checked (run_eval).
  std::optional<RunRecorder> recorder_storage;
  RunRecorder& recorder = store ? recorder_storage.emplace(*store, plan, info, plan_text)
                                : recorder_storage.emplace(db_path, plan, info, plan_text);

  const bool live = !a.json && ::isatty(STDERR_FILENO);
  auto progress = [&](const std::string& what) {
    if (live) std::fprintf(stderr, "\r\033[K[run %lld] %s", static_cast<long long>(recorder.run_id()), what.c_str());
  };
  EvalResult r;
  // From here a Ctrl-C or SIGTERM stops the run between items, resumable (core/interrupt.h).
  install_interrupt_handlers();
  try {
    r = run_eval(plan, models, endpoints, recorder, a.options, progress);
  } catch (const Interrupted& e) {
    if (live) std::fprintf(stderr, "\n");
    const std::optional<results::RunRecord> run = recorder.store().find_run(recorder.run_id());
    throw Interrupted(e.signal(),
                      fmt::format("{} stopped run {} between items: it is marked interrupted with {} of its {} "
                                  "items stored; resume it with: kvgate {} --resume {}{}",
                                  signal_name(e.signal()), recorder.run_id(), run ? run->items : 0, plan.selected.size(),
                                  a.plan.replay ? "replay" : "eval", recorder.run_id(),
                                  a.db.empty() ? "" : " --db " + db_path));
  } catch (...) {
    if (live) std::fprintf(stderr, "\n");
    throw;
  }
  if (live) std::fprintf(stderr, "\r\033[K");
  // A replay ends with its sessions turn by turn, as `kvgate runs show` prints them from the store
  // (a resumed run's earlier turns included).
  if (!a.summary) return recorder.run_id();
  std::optional<PerTurn> turns;
  std::optional<RunVerdicts> verdicts;
  const bool notes = !a.json && plan.has_endpoints();
  std::optional<results::StoredRun> stored;
  if (a.plan.replay || a.verdicts || notes)
    stored = results::StoredRun::load(recorder.store(), *recorder.store().find_run(recorder.run_id()));
  if (a.plan.replay) turns = per_turn(*stored);
  if (a.verdicts) verdicts = run_verdicts(*stored, a.policy);
  print_summary(r, plan, recorder.plan_hash(), db_path, a.json, turns ? &*turns : nullptr, verdicts ? &*verdicts : nullptr);
  if (notes)
    for (const std::string& note : read_engine_view(*stored).notes) std::printf("note: %s\n", note.c_str());
  return recorder.run_id();
}

namespace {

void add_common(CLI::App* c, EvalArgs& a) {
  c->add_option("--kv", a.plan.kv, "Candidate KV configs, comma-separated (default: the suite's)");
  c->add_option("--ref", a.plan.ref, "Reference KV config (default: the suite's, else f16)");
  add_eval_run_options(c, a);
  c->add_option("--ref-model", a.plan.ref_model,
                "Reference weights (PATH or LABEL=PATH): a weights run scoring every {model} x {KV spec} config "
                "(LABEL+KV) against this model with the --ref KV spec (docs/models.md)");
  c->add_option("--shard", a.shard,
                "Run shard I of N (0 <= I < N) of the items, to merge with `kvgate runs merge` (default: from "
                "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX/KVGATE_SHARD_COUNT; docs/scale-out.md)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return v.empty() ? "is empty; give INDEX/COUNT, e.g. --shard 0/4, or omit it to take the shard from the "
                               "scheduler's environment"
                             : "";
          },
          ""));
  c->add_option("--resume", a.resume, "Finish an interrupted run without redoing its finished items")
      ->check(whole_number_at_least(1, "run ids start at 1; `kvgate runs list` shows them"));
  c->add_flag("--json", a.json, "Machine-readable output");
  c->add_option("--policy", a.policy,
                "Rollout policy the verdict per config holds its bounds against (default: the built-in "
                "ci/gates/rollout.json; docs/gates.md)");
  add_engine_options(c, a.plan);
}

}  // namespace

void add_eval_run_options(CLI::App* c, EvalArgs& a) {
  c->add_option("--model", a.plan.model,
                "GGUF model (default: the fetched default model); with --ref-model, the candidate models, "
                "comma-separated, each PATH or LABEL=PATH");
  c->add_option("--db", a.db, "Results database (default: $KVGATE_DB or ./kvgate.db)");
  c->add_option("--threads", a.options.threads, "Cores in total, BLAS included (0 = all cores). Metrics are bit-identical for the same thread count only: compare runs made with the same --threads")->check(thread_count_check())->capture_default_str();
  add_backend_option(c, a.options.backend);
  c->add_option("--limit", a.plan.limit, "Run only the first N items (the run stays resumable)")
      ->check(whole_number_at_least(1, "omit --limit to run every item"));
  c->add_option("--max-new-tokens", a.options.max_new_tokens, "Greedy tokens per scored span")
      ->capture_default_str()
      ->check(whole_number_at_least(1, "greedy tokens per scored span: every span's answer is compared"));
  c->add_flag("--allow-synthetic", a.allow_synthetic,
              "Run on a synthetic model (`kvgate model synth`, random weights) although its quality figures mean nothing");
}

void note_eval_flags_given(CLI::App* command, EvalArgs& a) {
  a.threads_given = command->count("--threads") > 0;
  a.max_new_tokens_given = command->count("--max-new-tokens") > 0;
  a.backend_given = command->count("--backend") > 0;
}

void add_eval_commands(CLI::App& app, CommandContext& ctx) {
  auto ev = std::make_shared<EvalArgs>();
  CLI::App* e = app.add_subcommand("eval", "Run eval sets through the reference and candidate KV configs, store and summarize");
  e->add_option("--suite", ev->plan.suite, "Built-in suite name (smoke, nightly, long-cpu, long-cpu-ci, long-cpu-sweep, long) or a suite JSON file");
  e->add_option("--evalset", ev->plan.evalset, "Eval items JSONL file");
  add_common(e, *ev);
  e->callback([ev, e, &ctx] {
    ev->command_line = ctx.command_line;
    note_eval_flags_given(e, *ev);
    run_eval_cmd(*ev);
  });

  auto rp = std::make_shared<EvalArgs>();
  rp->plan.replay = true;
  CLI::App* r = app.add_subcommand("replay", "Replay recorded multi-turn sessions turn by turn with the prefix cached");
  r->add_option("--trace", rp->plan.trace,
                 "Sessions JSONL (eval item format, scored per assistant turn), or with --endpoint a shape trace "
                 "(Mooncake, Azure, BurstGPT, Qwen-Bailian, kvgate) replayed as load");
  add_common(r, *rp);
  add_load_replay_options(r, rp->load);
  r->callback([rp, r, &ctx] {
    rp->command_line = ctx.command_line;
    note_eval_flags_given(r, *rp);
    run_eval_cmd(*rp);
  });
}

}  // namespace kvgate::harness
