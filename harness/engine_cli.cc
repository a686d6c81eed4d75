#include "harness/engine_cli.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"
#include "core/mapped_file.h"
#include "harness/build_info.h"
#include "harness/commands.h"
#include "harness/report/engine_report.h"
#include "harness/inference.h"
#include "harness/eval/load_replay.h"
#include "harness/eval/run_recorder.h"
#include "harness/workload_models.h"
#include "scoring/metrics.h"
#include "workloads/simulator.h"

namespace kvgate::harness {

namespace {

std::string num(double v, const char* spec) { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-"; }
nlohmann::json json_num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

const ConfigSummaryRow* row_of(const EvalResult& r, const std::string& spec) {
  for (const ConfigSummaryRow& c : r.configs)
    if (c.spec == spec) return &c;
  return nullptr;
}

// The metrics a cross-check compares (scoring/metrics.h, the report's list too), as (heading,
// emulation, engine) from the two summary rows.
std::vector<std::tuple<std::string, double, double>> compared_metrics(const ConfigSummaryRow& emu, const ConfigSummaryRow& eng) {
  std::vector<std::tuple<std::string, double, double>> out;
  for (const scoring::MetricComparison& m : scoring::cross_check_metrics(emu.quality, emu.latency, eng.quality, eng.latency))
    out.emplace_back(scoring::metric_heading(*m.metric, false), m.emulation, m.engine);
  return out;
}

}  // namespace

void add_engine_options(CLI::App* c, PlanFlags& f) {
  c->add_option("--endpoint", f.endpoints,
                "Engine mode: serving endpoints NAME=URL[,NAME=URL...], one per KV config (NAME is the KV config, "
                "e.g. q4_0=http://127.0.0.1:8080)");
  c->add_option("--endpoints", f.endpoints_file, "Engine mode: endpoints JSON file (docs/engine-mode.md)");
  c->add_option("--ref-endpoint", f.ref_endpoint, "Engine mode: the endpoint that is the reference config");
  c->add_option("--top-k", f.top_k, "Engine mode: logprobs per position for the top-k KLD estimator (1..20)")
      ->capture_default_str();
}

void apply_resumed_endpoints(EvalPlan& plan, const PlanFlags& flags) {
  const std::vector<serving::EndpointConfig> given = endpoints_from_flags(flags);
  for (const serving::EndpointConfig& e : given) {
    auto it = std::find_if(plan.configs.begin(), plan.configs.end(),
                           [&](const PlannedConfig& c) { return c.endpoint && c.endpoint->name == e.name; });
    if (it == plan.configs.end())
      throw_usage_error("--resume " + std::to_string(plan.resume_run) + ": the run has no endpoint named '" + e.name + "'");
    it->endpoint = e;
  }
  for (const PlannedConfig& c : plan.configs)
    if (c.endpoint && c.endpoint->url.find("***@") != std::string::npos)
      throw_usage_error("--resume " + std::to_string(plan.resume_run) + ": endpoint '" + c.endpoint->name +
                        "' was recorded with its credentials redacted; give it again with --endpoint or --endpoints");
}

nlohmann::json cross_check_json(const EvalResult& r) {
  nlohmann::json out = nlohmann::json::array();
  for (const CrossCheck& x : r.cross_checks) {
    nlohmann::json metrics = nlohmann::json::array();
    const ConfigSummaryRow* emu = row_of(r, x.emulation);
    const ConfigSummaryRow* eng = row_of(r, x.engine);
    if (emu && eng)
      for (const auto& [name, a, b] : compared_metrics(*emu, *eng))
        metrics.push_back({{"metric", name}, {"emulation", json_num(a)}, {"engine", json_num(b)}, {"difference", json_num(b - a)}});
    out.push_back({{"emulation", x.emulation},
                   {"engine", x.engine},
                   {"positions", x.positions},
                   {"kld_emulation_engine_mean", json_num(x.kld_mean)},
                   {"kld_emulation_engine_max", json_num(x.kld_max)},
                   {"same_top1", json_num(x.same_top1)},
                   {"answers", x.answers},
                   {"same_answer", json_num(x.same_answer)},
                   {"metrics", metrics}});
  }
  return out;
}

void print_engine_notes(const EvalResult& r) {
  int top_k = 0;
  for (const ConfigSummaryRow& c : r.configs) top_k = std::max(top_k, c.top_k);
  if (top_k == 0) return;
  std::printf("KLD and Δp are top-k estimates (k = %d, on every config alike; docs/engine-mode.md)\n", top_k);
  for (const ConfigSummaryRow& c : r.configs)
    std::printf("  %-28s %s\n", c.spec.c_str(), c.endpoint.empty() ? "in-process" : ("endpoint " + c.endpoint).c_str());
  for (const CrossCheck& x : r.cross_checks) {
    const ConfigSummaryRow* emu = row_of(r, x.emulation);
    const ConfigSummaryRow* eng = row_of(r, x.engine);
    std::printf("\ncross-check: %s (kvgate emulation) vs %s (engine)\n", x.emulation.c_str(), x.engine.c_str());
    std::printf("  %-32s %12s %12s %12s\n", "metric", "emulation", "engine", "engine-emu");
    if (emu && eng)
      for (const auto& [name, a, b] : compared_metrics(*emu, *eng))
        std::printf("  %-32s %12s %12s %12s\n", name.c_str(), num(a, "{:.6g}").c_str(), num(b, "{:.6g}").c_str(),
                    num(b - a, "{:+.4g}").c_str());
    std::printf("  emulation vs engine directly, %lld positions: mean KLD %s (max %s), same top-1 %s %%; identical greedy "
                "answers %s %% of %lld\n",
                static_cast<long long>(x.positions), num(x.kld_mean, "{:.6f}").c_str(), num(x.kld_max, "{:.4f}").c_str(),
                num(100 * x.same_top1, "{:.2f}").c_str(), num(100 * x.same_answer, "{:.1f}").c_str(),
                static_cast<long long>(x.answers));
  }
}

void add_load_replay_options(CLI::App* r, LoadReplayOptions& o) {
  r->add_option("--format", o.format, "Load replay: shape trace format (default: detected)")
      ->check(CLI::IsMember({"auto", "mooncake", "azure", "burstgpt", "bailian", "kvgate"}));
  r->add_option("--time-scale", o.time_scale, "Load replay: multiply arrival times (0.5 = twice as fast)")->capture_default_str();
  r->add_option("--max-inflight", o.max_inflight, "Load replay: requests on the wire per endpoint (default: the endpoint's)");
  r->add_option("--max-output-tokens", o.max_output_tokens, "Load replay: cap each request's traced output length");
  r->add_option("--slo-ttft-ms", o.slo_ttft_ms, "Load replay: TTFT bound of a good request (goodput)")->capture_default_str();
  r->add_option("--slo-tpot-ms", o.slo_tpot_ms, "Load replay: TPOT bound of a good request (goodput)")->capture_default_str();
  r->add_option("--gpu", o.gpu, "Load replay: GPU preset of the capacity prediction stored beside it")->capture_default_str();
  r->add_option("--model-arch", o.model_arch, "Load replay: model preset or GGUF for the prediction (default: --model)");
  r->add_option("--seed", o.seed, "Load replay: seed of the synthetic prompt tokens")->capture_default_str()->check(seed_check());
}

bool is_load_replay(const PlanFlags& f) {
  if (f.trace.empty() || (f.endpoints.empty() && f.endpoints_file.empty())) return false;
  // Session traces are eval items (messages scored per turn); anything else is a shape trace.
  // Mapped: a regular file only, read no further than its first line (never /dev/zero's).
  const MappedFile file(f.trace);
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    return !(j.is_object() && (j.contains("messages") || j.contains("text")));
  }
  return true;
}

void run_load_replay_cmd(const PlanFlags& flags, LoadReplayOptions o, const std::string& db, bool json,
                         const std::string& command_line, int limit) {
  if (!flags.kv.empty() || !flags.ref.empty() || !flags.ref_endpoint.empty())
    throw_usage_error("a load replay measures the endpoints only: drop --kv, --ref and --ref-endpoint");
  if (!(o.time_scale > 0) || !std::isfinite(o.time_scale)) throw_usage_error("--time-scale must be > 0");
  if (o.max_inflight < 0 || o.max_output_tokens < 0 || limit < 0)
    throw_usage_error("--max-inflight, --max-output-tokens and --limit must be >= 0");
  if (!(o.slo_ttft_ms > 0) || !(o.slo_tpot_ms > 0)) throw_usage_error("--slo-ttft-ms and --slo-tpot-ms must be > 0");
  workloads::Trace trace = workloads::load_trace(flags.trace, workloads::parse_format_name(o.format));
  if (limit > 0 && trace.requests.size() > static_cast<size_t>(limit)) trace.requests.resize(static_cast<size_t>(limit));
  if (trace.requests.empty()) throw_input_error(flags.trace + ": the trace has no requests");
  if (o.max_output_tokens > 0)
    for (workloads::TraceRequest& r : trace.requests) r.output_tokens = std::min(r.output_tokens, o.max_output_tokens);

  EvalPlan plan;
  plan.workload.source = "load:" + flags.trace;
  plan.workload.name = flags.trace;
  plan.workload.hash = hex_u64(xxhash64(read_whole_file(flags.trace, kMaxDataFileBytes) + "#limit=" + std::to_string(limit) +
                                        "#max-output=" + std::to_string(o.max_output_tokens)));
  plan.models = {PlannedModel{flags.model, ""}};
  // The first endpoint is the run's reference: the baseline the others are read against.
  for (serving::EndpointConfig& e : endpoints_from_flags(flags))
    plan.configs.push_back(endpoint_config(plan.configs.empty() ? ConfigRole::reference : ConfigRole::candidate, std::move(e), 0));
  Endpoints endpoints = connect_endpoints(plan, o.seed, false);

  LoadedModel lm = load_model(plan.models.front().path);
  const std::vector<std::vector<int32_t>> prompts = synthesize_prompts(trace, lm.tokenizer, o.seed);
  for (size_t c = 0; c < plan.configs.size(); ++c) {
    const auto& info = endpoints.clients[c]->info();
    if (!info) continue;
    for (size_t i = 0; i < trace.requests.size(); ++i)
      if (const std::string problem = serving::context_problem(*info, trace.requests[i].input_tokens, trace.requests[i].output_tokens);
          !problem.empty())
        throw_input_error(fmt::format("{}: request {} does not fit endpoint '{}': {} (use --max-output-tokens or a larger "
                                      "server context)",
                                      flags.trace, i, plan.configs[c].endpoint->name, problem));
  }
  const std::string predict_model = o.model_arch.empty() ? lm.model->path() : o.model_arch;
  const workloads::ModelShape model = looks_like_model_file(predict_model) ? model_from_gguf(predict_model)
                                                                           : workloads::find_model_preset(predict_model);
  const workloads::GpuSpec gpu = workloads::find_gpu_preset(o.gpu);

  results::Store store = results::Store::open(results::resolve_db_path(db));
  results::RunInfo info;
  info.command = command_line;
  info.git_sha = kGitSha;
  info.build_flags = std::string(kBuildType) + " backends=" + kBackends;
  char host[256] = {0};
  info.host = ::gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  info.cpu = "";
  info.backend = "endpoint";
  info.model_path = lm.model->path();
  info.model_sha256 = lm.model->files().sha256();
  info.suite_name = plan.workload.source;
  info.suite_hash = plan.workload.hash;
  info.seed = static_cast<int64_t>(o.seed);
  info.kvgate_version = kVersion;
  RunRecorder recorder(store, plan, info,
                       describe_plan(plan, PlanSettings{info.model_sha256, 0, 0, "endpoint", kVersion, kGitSha, {}}));
  const runtime::ModelArch& arch = lm.model->arch();
  // Every config is an endpoint, serving its own weights: no config runs on a model of ours.
  recorder.open(std::vector<ConfigSetup>(
      plan.configs.size(),
      ConfigSetup{{static_cast<int>(arch.n_layers), static_cast<int>(arch.n_kv_heads), static_cast<int>(arch.head_dim)},
                  std::nullopt}),
      std::string());  // an engine's latency is the server's: no yardstick of this machine's applies
  const bool live = !json && ::isatty(STDERR_FILENO);
  std::vector<std::string> connect_failures;
  try {
    for (size_t c = 0; c < plan.configs.size(); ++c) recorder.record_endpoint(c, endpoint_record(plan.configs[c], *endpoints.clients[c]));
    results::LoadReplaySettings settings{flags.trace, std::string(workloads::format_name(trace.format)),
                                         static_cast<int64_t>(trace.requests.size()), o.time_scale, o.max_inflight,
                                         o.slo_ttft_ms, o.slo_tpot_ms, trace.block_tokens, gpu.name, model.name};
    recorder.record_load_replay(settings);
    workloads::SimOptions sim;
    sim.time_scale = o.time_scale;
    if (o.max_inflight > 0) sim.max_running = o.max_inflight;
    sim.max_batch_tokens = std::max<int64_t>(sim.max_batch_tokens, sim.max_running);
    const kernels::KvShape shape{model.n_layers, model.n_kv_heads, model.head_dim};
    for (size_t c = 0; c < plan.configs.size(); ++c) {
      const PlannedConfig& config = plan.configs[c];
      std::vector<results::LoadRequest> rows =
          replay_load(*endpoints.clients[c], *endpoints.http, trace, prompts, {o.time_scale, o.max_inflight, 0},
                      [&](size_t done, size_t total) {
                        if (live) std::fprintf(stderr, "\r\033[K[run %lld] %s: %zu/%zu requests",
                                               static_cast<long long>(recorder.run_id()), config.spec.c_str(), done, total);
                      });
      for (const results::LoadRequest& r : rows)
        if (r.failure == serving::failure_name(serving::Failure::connect)) {
          connect_failures.push_back(config.endpoint->name + " (" + serving::redact_url(config.endpoint->url) + ")");
          break;
        }
      recorder.record_load_requests(c, std::move(rows));
      workloads::KvCandidate kv{config.kv.canonical(), config.kv.bytes_per_token(shape), config.kv.bits_per_element(shape), 1.0};
      const workloads::SimResult p = workloads::simulate_capacity(trace, model, gpu, kv, sim);
      recorder.record_capacity_prediction(
          c, {0, p.hit_rate, 1000 * p.ttft_s.p50, 1000 * p.ttft_s.p95, 1000 * p.ttft_s.p99, 1000 * p.tpot_s.p50,
              1000 * p.tpot_s.p95, p.output_tokens_per_s, p.kv_token_capacity, p.verdict});
    }
    if (live) std::fprintf(stderr, "\r\033[K");
    if (connect_failures.empty()) recorder.finish(true);
    else recorder.fail();
  } catch (...) {
    if (live) std::fprintf(stderr, "\n");
    recorder.fail();
    throw;
  }
  const EngineRunView view = read_engine_view(results::StoredRun::load(store, *store.find_run(recorder.run_id())));
  if (json) {
    nlohmann::json j = engine_json(view);
    j["run"] = recorder.run_id();
    j["db"] = store.path();
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("run %lld  db %s\n%s", static_cast<long long>(recorder.run_id()), store.path().c_str(), load_text(view).c_str());
    for (const std::string& note : view.notes) std::printf("note: %s\n", note.c_str());
  }
  if (!connect_failures.empty())
    throw serving::EndpointError(serving::Failure::connect,
                                 "load replay run " + std::to_string(recorder.run_id()) + ": endpoint " +
                                     connect_failures.front() + " refused or dropped connections (the server went away?)");
}

}  // namespace kvgate::harness
