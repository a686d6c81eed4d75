// `kvgate eval` (suites and eval sets) and `kvgate replay` (recorded multi-turn sessions): the
// main job. Both run items through the reference and candidate KV configs into the results
// store and print a per-config summary with the run id.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "evalsets/suite.h"
#include "harness/backend.h"
#include "harness/build_info.h"
#include "harness/commands.h"
#include "harness/eval_runner.h"
#include "results/store.h"

namespace kvgate::harness {
namespace {

struct EvalArgs {
  std::string suite, evalset, trace, kv, ref, model, db;
  int64_t resume = 0;
  bool json = false;
  EvalOptions options;
  std::string command_line;
};

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

// What the run evaluates, resolved from the flags or, for --resume, from the stored run.
struct Workload {
  std::string source;  // "suite:NAME", "evalset:PATH" or "trace:PATH" (stored as the run's suite name)
  std::string name;
  std::vector<evalsets::EvalItem> items;
  std::string hash;
  std::vector<std::string> kv;
  std::string ref = "f16";
};

Workload load_workload(const std::string& source) {
  Workload w;
  w.source = source;
  const size_t colon = source.find(':');
  const std::string kind = source.substr(0, colon), arg = source.substr(colon + 1);
  if (kind == "suite") {
    const evalsets::Suite suite = evalsets::load_suite(arg);
    w.name = suite.name;
    w.items = evalsets::materialize_suite(suite);
    w.hash = hex_u64(evalsets::suite_hash(suite, w.items));
    w.kv = suite.kv;
    w.ref = suite.ref;
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
  return w;
}

std::vector<std::string> split_specs(const std::string& list) {
  std::vector<std::string> out;
  for (const kernels::KvConfig& c : kernels::parse_kv_config_list(list)) out.push_back(c.canonical());
  return out;
}

std::string fmt_or_dash(double v, const char* spec) { return std::isnan(v) ? "-" : fmt::format(fmt::runtime(spec), v); }

void print_summary(const EvalResult& r, const Workload& w, const std::string& db_path, bool json) {
  if (json) {
    nlohmann::json configs = nlohmann::json::array();
    auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
    for (const ConfigSummaryRow& c : r.configs)
      configs.push_back({{"kv", c.spec},
                         {"reference", c.reference},
                         {"bits_per_element", c.bits_per_element},
                         {"kv_bytes_per_token", c.kv_bytes_per_token},
                         {"scored_tokens", c.scored_tokens},
                         {"kld_mean", num(c.kld_mean)},
                         {"kld_p99", num(c.kld_p99)},
                         {"same_top1", num(c.top1)},
                         {"answer_accuracy", num(c.answer_accuracy)},
                         {"answered_items", c.answered_items},
                         {"ttft_p50_ms", num(c.ttft_p50_ms)},
                         {"tpot_p50_ms", num(c.tpot_p50_ms)}});
    nlohmann::json j = {{"run", r.run_id},          {"db", db_path},         {"workload", w.source},
                        {"hash", w.hash},           {"items", r.items_total}, {"items_run", r.items_run},
                        {"items_skipped", r.items_skipped}, {"seconds", r.seconds}, {"configs", configs}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  const double ref_acc = r.configs.empty() ? std::nan("") : r.configs.front().answer_accuracy;
  std::printf("run %lld  %s  (%lld items, %lld run now, %.1f s)  db %s\n", static_cast<long long>(r.run_id),
              w.source.c_str(), static_cast<long long>(r.items_total), static_cast<long long>(r.items_run), r.seconds,
              db_path.c_str());
  std::printf("%-28s %6s %11s %11s %8s %9s %9s %9s\n", "kv config", "bits", "mean KLD", "KLD p99", "top-1 %",
              "Δ answer", "TTFT ms", "TPOT ms");
  for (const ConfigSummaryRow& c : r.configs) {
    const std::string name = c.reference ? c.spec + " (ref)" : c.spec;
    const double delta = c.answer_accuracy - ref_acc;
    std::printf("%-28s %6.2f %11s %11s %8s %9s %9s %9s\n", name.c_str(), c.bits_per_element,
                fmt_or_dash(c.kld_mean, "{:.6f}").c_str(), fmt_or_dash(c.kld_p99, "{:.5f}").c_str(),
                fmt_or_dash(100 * c.top1, "{:.2f}").c_str(), fmt_or_dash(100 * delta, "{:+.1f}%").c_str(),
                fmt_or_dash(c.ttft_p50_ms, "{:.1f}").c_str(), fmt_or_dash(c.tpot_p50_ms, "{:.1f}").c_str());
  }
}

void run_eval_cmd(const EvalArgs& a, bool replay) {
  const std::string db_path = results::resolve_db_path(a.db);
  results::Store store = results::Store::open(db_path);
  Workload w;
  std::vector<kernels::KvConfig> candidates;
  kernels::KvConfig ref;
  int64_t run_id = 0;
  std::vector<int64_t> config_ids;
  std::string model_flag = a.model;

  if (a.resume > 0) {
    const std::optional<results::RunRecord> run = store.find_run(a.resume);
    if (!run) throw_usage_error(db_path + ": no run " + std::to_string(a.resume) + " to resume");
    if (run->status == "complete") throw_usage_error(db_path + ": run " + std::to_string(a.resume) + " is already complete");
    w = load_workload(run->info.suite_name);
    if (w.hash != run->info.suite_hash)
      throw_input_error(w.source + ": its content hash is now " + w.hash + " but run " + std::to_string(a.resume) +
                        " was made with " + run->info.suite_hash + "; the items changed, start a new run");
    model_flag = run->info.model_path;
    for (const results::RunConfigRecord& c : store.run_configs(a.resume)) {
      if (c.role == "reference") {
        ref = kernels::parse_kv_config(c.spec);
        config_ids.insert(config_ids.begin(), c.config_id);
      } else {
        candidates.push_back(kernels::parse_kv_config(c.spec));
        config_ids.push_back(c.config_id);
      }
    }
    run_id = a.resume;
    store.resume_run(run_id);
  } else {
    const int sources = !a.suite.empty() + !a.evalset.empty() + !a.trace.empty();
    if (sources != 1)
      throw_usage_error(replay ? "give --trace FILE (or --resume RUN)" : "give exactly one of --suite or --evalset (or --resume RUN)");
    w = load_workload(!a.suite.empty() ? "suite:" + a.suite : !a.evalset.empty() ? "evalset:" + a.evalset : "trace:" + a.trace);
    const std::vector<std::string> kv = a.kv.empty() ? w.kv : split_specs(a.kv);
    if (kv.empty()) throw_usage_error("no KV configs to evaluate: give --kv SPEC[,SPEC...]");
    ref = kernels::parse_kv_config(a.ref.empty() ? w.ref : a.ref);
    for (const std::string& spec : kv) candidates.push_back(kernels::parse_kv_config(spec));
  }

  LoadedModel lm = load_model(model_flag);
  const std::unique_ptr<runtime::Engine> engine = make_engine(a.options.backend, *lm.model, a.options.threads);
  const kernels::KvShape shape{static_cast<int>(lm.model->arch().n_layers), static_cast<int>(lm.model->arch().n_kv_heads),
                               static_cast<int>(lm.model->arch().head_dim)};
  if (run_id == 0) {
    results::RunInfo info;
    info.command = a.command_line;
    info.git_sha = kGitSha;
    info.build_flags = std::string(kBuildType) + " backends=" + kBackends;
    info.host = host_name();
    info.cpu = cpu_model_name();
    info.backend = engine->backend();
    if (!engine->device().empty()) info.gpu = engine->device();
    info.model_path = lm.model->path();
    info.model_sha256 = sha256_file_hex(lm.model->path());
    info.suite_name = w.source;
    info.suite_hash = w.hash;
    info.threads = a.options.threads > 0 ? a.options.threads : static_cast<int64_t>(std::thread::hardware_concurrency());
    info.kvgate_version = kVersion;
    run_id = store.begin_run(info);
    auto attach = [&](const kernels::KvConfig& c, results::ConfigRole role) {
      const int64_t id = store.add_config({c.canonical(), hex_u64(c.hash()), c.bits_per_element(shape)});
      store.attach_config(run_id, id, role, c.bytes_per_token(shape));
      config_ids.push_back(id);
    };
    attach(ref, results::ConfigRole::reference);
    for (const kernels::KvConfig& c : candidates) attach(c, results::ConfigRole::candidate);
  }

  const bool live = !a.json && ::isatty(STDERR_FILENO);
  EvalResult r;
  try {
    r = run_eval(store, run_id, lm, *engine, w.items, w.hash, ref, candidates, config_ids, a.options, [&](const std::string& what) {
      if (live) std::fprintf(stderr, "\r\033[K[run %lld] %s", static_cast<long long>(run_id), what.c_str());
    });
  } catch (...) {
    if (live) std::fprintf(stderr, "\n");
    store.finish_run(run_id, results::RunStatus::failed);
    throw;
  }
  if (live) std::fprintf(stderr, "\r\033[K");
  // A --limit run leaves items out, so it stays resumable rather than complete.
  const bool complete = r.items_run + r.items_skipped == static_cast<int64_t>(w.items.size());
  store.finish_run(run_id, complete ? results::RunStatus::complete : results::RunStatus::interrupted);
  print_summary(r, w, db_path, a.json);
}

void add_common(CLI::App* c, EvalArgs& a) {
  c->add_option("--kv", a.kv, "Candidate KV configs, comma-separated (default: the suite's)");
  c->add_option("--ref", a.ref, "Reference KV config (default: the suite's, else f16)");
  c->add_option("--model", a.model, "GGUF model (default: the fetched default model)");
  c->add_option("--db", a.db, "Results database (default: $KVGATE_DB or ./kvgate.db)");
  c->add_option("--threads", a.options.threads, "Worker threads (0 = all cores)");
  add_backend_option(c, a.options.backend);
  c->add_option("--limit", a.options.limit, "Run only the first N items (the run stays resumable)");
  c->add_option("--max-new-tokens", a.options.max_new_tokens, "Greedy tokens per scored span")->capture_default_str();
  c->add_option("--resume", a.resume, "Finish an interrupted run without redoing its finished items");
  c->add_flag("--json", a.json, "Machine-readable output");
}

}  // namespace

void add_eval_commands(CLI::App& app, CommandContext& ctx) {
  auto ev = std::make_shared<EvalArgs>();
  CLI::App* e = app.add_subcommand("eval", "Run eval sets through the reference and candidate KV configs, store and summarize");
  e->add_option("--suite", ev->suite, "Built-in suite name (smoke, nightly) or a suite JSON file");
  e->add_option("--evalset", ev->evalset, "Eval items JSONL file");
  add_common(e, *ev);
  e->callback([ev, &ctx] {
    ev->command_line = ctx.command_line;
    run_eval_cmd(*ev, false);
  });

  auto rp = std::make_shared<EvalArgs>();
  CLI::App* r = app.add_subcommand("replay", "Replay recorded multi-turn sessions turn by turn with the prefix cached");
  r->add_option("--trace", rp->trace, "Sessions JSONL (eval item format, scored per assistant turn)");
  add_common(r, *rp);
  r->callback([rp, &ctx] {
    rp->command_line = ctx.command_line;
    run_eval_cmd(*rp, true);
  });
}

}  // namespace kvgate::harness
