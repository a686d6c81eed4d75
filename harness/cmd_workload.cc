// `kvgate profile`, `kvgate capacity` and `kvgate workload generate|presets`: what a team's
// traffic looks like, and what each KV config buys on it (memory, prefix-cache hits, latency)
// on a given model and GPU, without running the model.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_input.h"
#include "core/mapped_file.h"
#include "harness/commands.h"
#include "harness/workload_models.h"
#include "kernels/kv_config.h"
#include "runtime/model.h"
#include "runtime/model_files.h"
#include "workloads/generate.h"
#include "workloads/presets.h"
#include "workloads/profile.h"
#include "workloads/simulator.h"
#include "workloads/trace.h"

namespace kvgate::harness {

bool looks_like_model_file(const std::string& s) {
  return s.ends_with(".gguf") || s.find('/') != std::string::npos || std::filesystem::exists(s);
}

// A GGUF file's shape and what its tensors really occupy: weights stay in their stored types.
workloads::ModelShape model_from_gguf(const std::string& path) {
  // The checks `generate` makes (every tensor against the metadata): a file relabelled with more
  // layers than it holds must not be planned with their KV bytes.
  const std::unique_ptr<runtime::Model> model = runtime::Model::load(path);
  const runtime::ModelFiles* file = &model->files();
  const runtime::ModelArch& arch = model->arch();
  workloads::ModelShape m;
  m.name = arch.name.empty() ? std::filesystem::path(path).filename().string() : arch.name;
  m.n_layers = static_cast<int>(arch.n_layers);
  m.n_heads = static_cast<int>(arch.n_heads);
  m.n_kv_heads = static_cast<int>(arch.n_kv_heads);
  m.head_dim = static_cast<int>(arch.head_dim);
  m.hidden = static_cast<int>(arch.n_embd);
  m.sliding_window = arch.sliding_window;
  m.layer_swa = arch.layer_swa;
  double params = 0, bytes = 0;
  for (const auto& t : file->tensors()) {
    params += static_cast<double>(t.n_elements);
    bytes += static_cast<double>(t.n_bytes);
  }
  m.n_params = params;
  m.weight_bytes = bytes;
  m.weight_dtype = runtime::model_format_name(file->format());
  if (arch.head_dim_v != arch.head_dim)
    throw_input_error(path + ": key and value head sizes differ (" + std::to_string(arch.head_dim) + " vs " +
                      std::to_string(arch.head_dim_v) + "); the capacity planner assumes equal sizes");
  return m;
}

namespace {

namespace wl = kvgate::workloads;
namespace kn = kvgate::kernels;
using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct TraceFlags {
  std::string path;
  std::string format = "auto";
  std::string bad_rows = "abort";
};

void add_trace_flags(CLI::App* cmd, TraceFlags& f) {
  cmd->add_option("--trace", f.path, "Trace file (Mooncake/Qwen-Bailian/kvgate JSONL, Azure/BurstGPT CSV)")->required();
  cmd->add_option("--format", f.format, "Trace format (default: detected from the first line)")
      ->check(CLI::IsMember({"auto", "mooncake", "azure", "burstgpt", "bailian", "kvgate"}));
  cmd->add_option("--bad-rows", f.bad_rows, "On a malformed row: abort (exit 2) or skip and count it")
      ->check(CLI::IsMember({"abort", "skip"}));
}

wl::Trace load(const TraceFlags& f) {
  return wl::load_trace(f.path, wl::parse_format_name(f.format),
                        f.bad_rows == "skip" ? wl::BadRowPolicy::skip : wl::BadRowPolicy::abort);
}

json distribution_json(const wl::Distribution& d) {
  return {{"mean", d.mean}, {"p50", d.p50}, {"p95", d.p95}, {"p99", d.p99}, {"max", d.max}, {"count", d.count}};
}

std::string bucket_label(const wl::HistogramBucket& b) {
  auto k = [](int64_t v) { return fmt::format("{}K", v / 1024); };
  if (b.lo == 0) return "<" + k(b.hi);
  if (b.hi == 0) return ">=" + k(b.lo);
  return k(b.lo) + "-" + k(b.hi);
}

// ---- profile ----

void run_profile(const TraceFlags& flags, bool as_json) {
  const wl::Trace trace = load(flags);
  const wl::WorkloadProfile p = wl::profile_trace(trace);
  if (as_json) {
    json hist = json::array();
    for (const auto& b : p.context_histogram)
      hist.push_back({{"label", bucket_label(b)}, {"lo", b.lo}, {"hi", b.hi == 0 ? json(nullptr) : json(b.hi)}, {"count", b.count}});
    json out = {{"trace", p.source},
                {"format", p.format},
                {"requests", p.requests},
                {"bad_rows_skipped", p.bad_rows_skipped},
                {"duration_s", p.duration_s},
                {"arrival_rate_per_s", std::isnan(p.arrival_rate) ? json(nullptr) : json(p.arrival_rate)},
                {"prompt_tokens", distribution_json(p.prompt_tokens)},
                {"output_tokens", distribution_json(p.output_tokens)},
                {"total_prompt_tokens", p.total_prompt_tokens},
                {"total_output_tokens", p.total_output_tokens},
                {"sessions", p.sessions_known ? json(p.sessions) : json(nullptr)},
                {"turns_per_session", p.sessions_known ? distribution_json(p.turns_per_session) : json(nullptr)},
                {"prefix_reuse",
                 p.prefix.known ? json{{"block_tokens", p.prefix.block_tokens},
                                       {"blocks", p.prefix.blocks},
                                       {"reusable_blocks", p.prefix.reusable_blocks},
                                       {"block_share", p.prefix.block_share()},
                                       {"tokens", p.prefix.tokens},
                                       {"reusable_tokens", p.prefix.reusable_tokens},
                                       {"token_share", p.prefix.token_share()}}
                                : json(nullptr)},
                {"context_histogram", hist},
                {"summary",
                 {{"p95_prompt_tokens", p.prompt_tokens.p95},
                  {"p95_generated_tokens", p.output_tokens.p95},
                  {"turns_per_user", p.sessions_known ? json(p.turns_per_session.mean) : json(nullptr)},
                  {"reusable_prefix_share", p.prefix.known ? json(p.prefix.token_share()) : json(nullptr)}}}};
    if (!trace.first_bad_row.empty()) out["first_bad_row"] = trace.first_bad_row;
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (std::isnan(p.arrival_rate))
    fmt::print("trace     {} ({}), {} request{} all at one instant (no arrival rate)\n", p.source, p.format, p.requests,
               p.requests == 1 ? "" : "s");
  else
    fmt::print("trace     {} ({}), {} requests over {:.1f} s ({:.2f} requests/s)\n", p.source, p.format, p.requests,
               p.duration_s, p.arrival_rate);
  if (p.bad_rows_skipped) fmt::print("skipped   {} bad rows; first: {}\n", p.bad_rows_skipped, trace.first_bad_row);
  fmt::print("\n{:<16} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "tokens", "mean", "p50", "p95", "p99", "max");
  auto row = [](const char* name, const wl::Distribution& d) {
    fmt::print("{:<16} {:>10.1f} {:>10.0f} {:>10.0f} {:>10.0f} {:>10.0f}\n", name, d.mean, d.p50, d.p95, d.p99, d.max);
  };
  row("prompt", p.prompt_tokens);
  row("output", p.output_tokens);
  if (p.sessions_known) {
    fmt::print("\nsessions  {}; turns per session mean {:.2f}, p50 {:.0f}, p95 {:.0f}, max {:.0f}\n", p.sessions,
               p.turns_per_session.mean, p.turns_per_session.p50, p.turns_per_session.p95, p.turns_per_session.max);
  } else {
    fmt::print("\nsessions  unknown (the {} format has no session ids)\n", p.format);
  }
  if (p.prefix.known) {
    fmt::print("prefix    an unbounded cache of {}-token blocks could reuse {:.1f}% of blocks, {:.1f}% of prompt tokens\n",
               p.prefix.block_tokens, 100 * p.prefix.block_share(), 100 * p.prefix.token_share());
  } else {
    fmt::print("prefix    unknown (the {} format has no block hashes)\n", p.format);
  }
  fmt::print("\ncontext length (prompt + output) per request\n");
  uint64_t peak = 1;
  for (const auto& b : p.context_histogram) peak = std::max(peak, b.count);
  for (const auto& b : p.context_histogram)
    fmt::print("  {:>9} {:>8} {:5.1f}%  {}\n", bucket_label(b), b.count, 100.0 * b.count / std::max<uint64_t>(p.requests, 1),
               std::string(static_cast<size_t>(40.0 * b.count / peak), '#'));
  fmt::print("\nbefore choosing a KV format\n");
  fmt::print("  p95 prompt tokens       {:.0f}\n", p.prompt_tokens.p95);
  fmt::print("  p95 generated tokens    {:.0f}\n", p.output_tokens.p95);
  fmt::print("  turns per user          {}\n", p.sessions_known ? fmt::format("{:.2f}", p.turns_per_session.mean) : "unknown");
  fmt::print("  reusable prefix share   {}\n",
             p.prefix.known ? fmt::format("{:.1f}%", 100 * p.prefix.token_share()) : "unknown");
}

// ---- capacity ----

struct CapacityFlags {
  TraceFlags trace;
  std::string model = "Llama-3.1-8B";
  std::string weight_dtype = "bf16";
  std::string gpu = "H100";
  std::string kv = "f16";
  double gpu_mem_gib = 0, gpu_bw_gbs = 0, gpu_tflops = 0;
  wl::SimOptions sim;
  double step_overhead_ms = 0;
  std::string kv_overhead;
  std::string kv_overhead_file;
  bool as_json = false;
};

// `SPEC=FACTOR` entries; SPEC may itself contain '=' (per-layer overrides), so split at the last.
std::vector<std::pair<kn::KvConfig, double>> parse_overheads(const std::string& flag, const std::string& file) {
  std::vector<std::pair<kn::KvConfig, double>> out;
  auto add = [&](const std::string& spec, double factor, const std::string& where) {
    if (!(factor > 0) || !std::isfinite(factor))
      throw_usage_error(where + ": overhead factor for '" + echo_user_text(spec) + "' must be a positive number");
    try {
      out.emplace_back(kn::parse_kv_config(spec), factor);
    } catch (const Error& e) {
      if (where == "--kv-overhead") throw;
      throw Error(e.kind(), where + ": " + e.what());
    }
  };
  size_t start = 0;
  while (start < flag.size()) {
    size_t comma = flag.find(',', start);
    if (comma == std::string::npos) comma = flag.size();
    const std::string entry = flag.substr(start, comma - start);
    start = comma + 1;
    if (entry.empty()) continue;
    const size_t eq = entry.rfind('=');
    if (eq == std::string::npos || eq == 0)
      throw_usage_error("--kv-overhead: expected SPEC=FACTOR, got '" + echo_user_text(entry) + "'");
    double factor = 0;
    try {
      size_t used = 0;
      factor = std::stod(entry.substr(eq + 1), &used);
      if (used != entry.size() - eq - 1) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw_usage_error("--kv-overhead: '" + echo_user_text(entry.substr(eq + 1)) + "' is not a number");
    }
    add(entry.substr(0, eq), factor, "--kv-overhead");
  }
  if (!file.empty()) {
    const std::string text = read_whole_file(file, kMaxConfigFileBytes);
    if (text.find_first_not_of(" \t\r\n") == std::string::npos)
      throw_input_error(file + ": is empty; expected a JSON object mapping KV specs to overhead factors");
    const json j = parse_json_input(text, file);
    if (!j.is_object()) throw_input_error(file + ": expected a JSON object mapping KV specs to overhead factors");
    for (const auto& [spec, v] : j.items()) {
      if (!v.is_number()) throw_input_error(file + ": the factor for '" + echo_user_text(spec) + "' is not a number");
      add(spec, v.get<double>(), file);
    }
  }
  return out;
}

json result_json(const wl::SimResult& r, const std::string& typed) {
  return {{"kv", typed},
          {"canonical", r.kv_name},
          {"kv_bytes_per_token", r.kv_bytes_per_token},
          {"kv_window_bytes_per_token", r.kv_window_bytes_per_token},
          {"sliding_window", r.sliding_window},
          {"kv_bits_per_element", r.kv_bits_per_element},
          {"overhead_factor", r.overhead},
          {"weight_bytes", r.weight_bytes},
          {"usable_bytes", r.usable_bytes},
          {"kv_budget_bytes", r.kv_budget_bytes},
          {"weights_fit", r.weights_fit},
          {"block_tokens", r.block_tokens},
          {"kv_blocks", r.kv_blocks},
          {"kv_token_capacity", r.kv_token_capacity},
          {"requests", r.requests},
          {"completed", r.completed},
          {"rejected", r.rejected},
          {"prompt_tokens", r.prompt_tokens},
          {"prefix_hit_tokens", r.hit_tokens},
          {"prefix_hit_rate", r.hit_rate},
          {"evicted_tokens", r.evicted_tokens},
          {"recomputed_tokens", r.recomputed_tokens},
          {"output_tokens", r.output_tokens},
          {"queue_delay_s", distribution_json(r.queue_delay_s)},
          {"ttft_s", distribution_json(r.ttft_s)},
          {"tpot_s", distribution_json(r.tpot_s)},
          {"makespan_s", r.makespan_s},
          {"output_tokens_per_s", r.output_tokens_per_s},
          {"requests_per_s", r.requests_per_s},
          {"memory_blocked_s", r.memory_blocked_s},
          {"step_time_s", {{"compute", r.time_compute_s}, {"weights", r.time_weights_s}, {"kv", r.time_kv_s}}},
          {"steps", r.steps},
          {"peak_running", r.peak_running},
          {"verdict", r.verdict},
          {"verdict_reason", r.verdict_reason}};
}

void run_capacity(const CapacityFlags& f) {
  wl::ModelShape model = looks_like_model_file(f.model) ? model_from_gguf(f.model) : wl::find_model_preset(f.model, f.weight_dtype);
  wl::GpuSpec gpu = wl::find_gpu_preset(f.gpu);
  if (f.gpu_mem_gib < 0 || f.gpu_bw_gbs < 0 || f.gpu_tflops < 0) throw_usage_error("--gpu-* overrides must be positive");
  if (f.gpu_mem_gib > 0) gpu.mem_bytes = f.gpu_mem_gib * kGiB;
  if (f.gpu_bw_gbs > 0) gpu.bandwidth_bytes_per_s = f.gpu_bw_gbs * 1e9;
  if (f.gpu_tflops > 0) gpu.bf16_flops_per_s = f.gpu_tflops * 1e12;
  wl::SimOptions sim = f.sim;
  if (!(f.step_overhead_ms >= 0)) throw_usage_error("--step-overhead-ms must be >= 0");
  sim.step_overhead_s = f.step_overhead_ms / 1000.0;
  const auto configs = kn::parse_kv_config_list(f.kv);
  const auto overheads = parse_overheads(f.kv_overhead, f.kv_overhead_file);
  const wl::Trace trace = load(f.trace);
  const kn::KvShape shape{model.n_layers, model.n_kv_heads, model.head_dim};

  std::vector<std::pair<wl::SimResult, std::string>> results;
  for (const kn::KvConfig& cfg : configs) {
    wl::KvCandidate kv;
    kv.name = cfg.canonical();
    kv.bytes_per_token = cfg.bytes_per_token(shape);
    kv.bits_per_element = cfg.bits_per_element(shape);
    kv.window_bytes_per_token = wl::window_bytes_per_token(model, cfg);
    kv.window = model.sliding_window;
    for (const auto& [c, factor] : overheads)
      if (c == cfg) kv.overhead = factor;
    results.emplace_back(wl::simulate_capacity(trace, model, gpu, kv, sim), cfg.name);
  }

  if (f.as_json) {
    json rows = json::array();
    for (const auto& [r, typed] : results) rows.push_back(result_json(r, typed));
    json out = {{"trace", trace.source},
                {"format", std::string(wl::format_name(trace.format))},
                {"requests", trace.requests.size()},
                {"bad_rows_skipped", trace.bad_rows_skipped},
                {"model",
                 {{"name", model.name}, {"layers", model.n_layers}, {"heads", model.n_heads}, {"kv_heads", model.n_kv_heads},
                  {"head_dim", model.head_dim}, {"hidden", model.hidden}, {"params", model.n_params},
                  {"weight_dtype", model.weight_dtype}, {"weight_bytes", model.weight_bytes}}},
                {"gpu",
                 {{"name", gpu.name}, {"mem_bytes", gpu.mem_bytes}, {"bandwidth_bytes_per_s", gpu.bandwidth_bytes_per_s},
                  {"bf16_flops_per_s", gpu.bf16_flops_per_s}}},
                {"options",
                 {{"mem_util", sim.mem_util}, {"tp", sim.tensor_parallel}, {"time_scale", sim.time_scale},
                  {"max_batch_tokens", sim.max_batch_tokens}, {"max_seqs", sim.max_running},
                  {"block_tokens", results.empty() ? sim.block_tokens : results.front().first.block_tokens},
                  {"step_overhead_s", sim.step_overhead_s}}},
                {"configs", rows}};
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  fmt::print("model  {}: {} layers, {} heads ({} KV) x {}, {:.2f}B params, weights {:.1f} GiB ({})\n", model.name,
             model.n_layers, model.n_heads, model.n_kv_heads, model.head_dim, model.n_params / 1e9,
             model.weight_bytes / kGiB, model.weight_dtype);
  if (model.sliding_window > 0) {
    const auto local = std::count(model.layer_swa.begin(), model.layer_swa.end(), true);
    fmt::print("       sliding window of {} tokens on {} of {} layers: B/token counts every layer, KV tokens the "
               "global layers' blocks, each request also holding min(tokens, {}) in the local layers\n",
               model.sliding_window, local, model.n_layers, model.sliding_window);
  }
  fmt::print("gpu    {} x{}: {:.0f} GiB, {:.0f} GB/s, {:.0f} bf16 TFLOPS; memory utilisation {:.2f}\n", gpu.name,
             sim.tensor_parallel, gpu.mem_bytes / kGiB, gpu.bandwidth_bytes_per_s / 1e9, gpu.bf16_flops_per_s / 1e12,
             sim.mem_util);
  fmt::print("trace  {} ({}), {} requests, time scale {}\n\n", trace.source, wl::format_name(trace.format),
             trace.requests.size(), sim.time_scale);
  // Times are seconds here (a simulated serving timeline); eval and report print milliseconds.
  fmt::print("{:<22} {:>9} {:>6} {:>9} {:>10} {:>6} {:>11} {:>11} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}\n", "kv",
             "B/token", "bits", "KV GiB", "KV tokens", "hit%", "evicted", "recomputed", "queue95 s", "TTFT50 s",
             "TTFT95 s", "TTFT99 s", "TPOT50 s", "TPOT95 s", "out tok/s");
  for (const auto& [r, typed] : results) {
    fmt::print("{:<22} {:>9.0f} {:>6.2f} {:>9.1f} {:>10} {:>6.1f} {:>11} {:>11} {:>9.3f} {:>8.3f} {:>8.3f} {:>8.3f} {:>8.4f} {:>8.4f} {:>9.0f}\n",
               typed.substr(0, 22), r.kv_bytes_per_token, r.kv_bits_per_element,
               r.kv_budget_bytes / kGiB, r.kv_token_capacity, 100 * r.hit_rate, r.evicted_tokens, r.recomputed_tokens,
               r.queue_delay_s.p95, r.ttft_s.p50, r.ttft_s.p95, r.ttft_s.p99, r.tpot_s.p50, r.tpot_s.p95,
               r.output_tokens_per_s);
  }
  fmt::print("\n");
  size_t kv_bound = 0;
  for (const auto& [r, typed] : results) {
    fmt::print("{:<22} {}: {}{}\n", typed, r.verdict, r.verdict_reason,
               r.rejected ? fmt::format(" ({} of {} requests rejected)", r.rejected, r.requests) : "");
    kv_bound += r.verdict == "KV-bound" && (r.rejected > 0 || r.recomputed_tokens > 0) ? 1 : 0;
  }
  // The same verdict for every config says more about the trace than the configs.
  if (results.size() > 1 && kv_bound == results.size())
    fmt::print("\nnote: every config is KV-bound: the trace asks more KV cache than {} x{} holds at time scale {}, so "
               "the GPU is overloaded whatever the KV format. To compare configs under load that fits, try "
               "--time-scale {} (arrivals spread out), a larger --gpu, or --tp {}.\n",
               gpu.name, sim.tensor_parallel, sim.time_scale, sim.time_scale * 4, sim.tensor_parallel * 2);
}

// ---- workload generate / presets ----

void run_generate(const wl::AgenticOptions& o, const std::string& out_path, bool as_json) {
  const wl::Trace t = wl::generate_agentic_trace(o);
  std::ostringstream out;
  wl::write_kvgate_trace(t, out);
  write_output_file(out_path, out.str());
  const wl::WorkloadProfile p = wl::profile_trace(t);
  if (as_json) {
    json j = {{"out", out_path},
              {"requests", p.requests},
              {"sessions", p.sessions},
              {"duration_s", p.duration_s},
              {"prompt_tokens", distribution_json(p.prompt_tokens)},
              {"output_tokens", distribution_json(p.output_tokens)},
              {"reusable_prefix_share", p.prefix.token_share()}};
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  fmt::print("wrote {}: {} requests in {} sessions over {:.0f} s; prompt p50 {:.0f} / max {:.0f} tokens; "
             "reusable prefix {:.1f}%\n",
             out_path, p.requests, p.sessions, p.duration_s, p.prompt_tokens.p50, p.prompt_tokens.max,
             100 * p.prefix.token_share());
}

void run_presets(bool as_json) {
  if (as_json) {
    json models = json::array(), gpus = json::array();
    for (const auto& m : wl::model_presets())
      models.push_back({{"name", m.name}, {"layers", m.n_layers}, {"heads", m.n_heads}, {"kv_heads", m.n_kv_heads},
                        {"head_dim", m.head_dim}, {"hidden", m.hidden}, {"params", m.n_params},
                        {"weight_bytes_bf16", m.n_params * 2}});
    for (const auto& g : wl::gpu_presets())
      gpus.push_back({{"name", g.name}, {"mem_bytes", g.mem_bytes}, {"bandwidth_bytes_per_s", g.bandwidth_bytes_per_s},
                      {"bf16_flops_per_s", g.bf16_flops_per_s}});
    std::printf("%s\n", json{{"models", models}, {"gpus", gpus}}.dump(2).c_str());
    return;
  }
  fmt::print("{:<15} {:>6} {:>6} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9}\n", "model", "layers", "heads", "kv_heads",
             "head_dim", "hidden", "params", "bf16 GiB", "q4_0 GiB");
  for (const auto& m : wl::model_presets())
    fmt::print("{:<15} {:>6} {:>6} {:>8} {:>8} {:>7} {:>8.2f}B {:>9.1f} {:>9.1f}\n", m.name, m.n_layers, m.n_heads,
               m.n_kv_heads, m.head_dim, m.hidden, m.n_params / 1e9, m.n_params * 2 / kGiB,
               m.n_params * wl::weight_bits_per_param("q4_0") / 8 / kGiB);
  fmt::print("\n{:<8} {:>8} {:>10} {:>12}\n", "gpu", "mem GB", "GB/s", "bf16 TFLOPS");
  for (const auto& g : wl::gpu_presets())
    fmt::print("{:<8} {:>8.0f} {:>10.0f} {:>12.0f}\n", g.name, g.mem_bytes / 1e9, g.bandwidth_bytes_per_s / 1e9,
               g.bf16_flops_per_s / 1e12);
}

}  // namespace

void add_workload_commands(CLI::App& app, CommandContext&) {
  CLI::App* profile = app.add_subcommand("profile", "Profile a request trace: lengths, arrival rate, sessions, prefix reuse");
  auto pflags = std::make_shared<TraceFlags>();
  auto pjson = std::make_shared<bool>(false);
  add_trace_flags(profile, *pflags);
  profile->add_flag("--json", *pjson, "Print one JSON object");
  profile->callback([=] { run_profile(*pflags, *pjson); });

  CLI::App* cap = app.add_subcommand(
      "capacity", "Simulate a trace on a model and GPU for each KV config: memory, prefix hits, TTFT, TPOT, verdict");
  auto c = std::make_shared<CapacityFlags>();
  add_trace_flags(cap, c->trace);
  cap->add_option("--model-arch", c->model, "Model preset name or a .gguf file (default Llama-3.1-8B)");
  cap->add_option("--weight-dtype", c->weight_dtype,
                  "Weight storage for a preset: bf16, f16, fp8, int8, q8_0, q6_k, q5_1, q5_0, q4_1, q4_k, q4_0, int4");
  cap->add_option("--gpu", c->gpu, "GPU preset: H100, H200, MI300X, MI355X (default H100)");
  cap->add_option("--kv", c->kv, "KV configs, comma-separated (default f16)");
  cap->add_option("--gpu-mem-gib", c->gpu_mem_gib, "Override the GPU's memory (GiB)")->check(positive_number("GiB"));
  cap->add_option("--gpu-bw-gbs", c->gpu_bw_gbs, "Override the GPU's memory bandwidth (GB/s)")->check(positive_number("GB/s"));
  cap->add_option("--gpu-tflops", c->gpu_tflops, "Override the GPU's dense bf16 TFLOPS")->check(positive_number("TFLOPS"));
  cap->add_option("--mem-util", c->sim.mem_util, "Share of GPU memory for weights + KV (default 0.9)");
  cap->add_option("--tp", c->sim.tensor_parallel, "Tensor-parallel GPUs (default 1)");
  cap->add_option("--time-scale", c->sim.time_scale, "Multiply arrival times (0.5 = replay twice as fast; default 1)");
  cap->add_option("--max-batch-tokens", c->sim.max_batch_tokens, "Token budget per step (default 8192)");
  cap->add_option("--max-seqs", c->sim.max_running, "Concurrent requests (default 256)");
  cap->add_option("--block-tokens", c->sim.block_tokens, "Cache block size for traces without block hashes (default 16)");
  cap->add_option("--step-overhead-ms", c->step_overhead_ms, "Fixed scheduler/launch time per step (default 0)");
  cap->add_option("--kv-overhead", c->kv_overhead,
                  "Per-config KV read/write time factors, e.g. 'fp8=1.05,tq4/4=1.3' (default 1)");
  cap->add_option("--kv-overhead-file", c->kv_overhead_file, "JSON object {\"SPEC\": factor, ...}");
  cap->add_flag("--json", c->as_json, "Print one JSON object");
  cap->callback([=] { run_capacity(*c); });

  CLI::App* workload = app.add_subcommand("workload", "Synthetic traffic and the planner's presets");
  workload->require_subcommand(1);
  CLI::App* gen = workload->add_subcommand("generate", "Write a deterministic agentic trace in kvgate's shape format");
  auto g = std::make_shared<wl::AgenticOptions>();
  auto gout = std::make_shared<std::string>();
  auto gjson = std::make_shared<bool>(false);
  gen->add_option("--out", *gout, "Output JSONL file")->required();
  gen->add_option("--sessions", g->sessions, "Sessions (default 100)");
  gen->add_option("--concurrency", g->concurrency, "Sessions active at once (default 32)");
  gen->add_option("--rounds", g->rounds, "Rounds per session (default 8)");
  gen->add_option("--system-tokens", g->system_tokens, "System prompt shared by all sessions (default 2000)");
  gen->add_option("--session-prefix-tokens", g->session_prefix_tokens, "Per-session prefix (default 6000)");
  gen->add_option("--input-tokens", g->input_tokens, "New input tokens per round, mean (default 800)");
  gen->add_option("--output-tokens", g->output_tokens, "Output tokens per round, mean (default 300)");
  gen->add_option("--jitter", g->jitter, "Relative spread of per-round lengths (default 0.25)");
  gen->add_option("--round-interval-s", g->round_interval_s, "Seconds between a session's rounds (default 15)");
  gen->add_option("--session-gap-s", g->session_gap_s, "Idle seconds between sessions in a slot (default 2)");
  gen->add_option("--block-tokens", g->block_tokens, "Tokens per hash block (default 16)");
  gen->add_option("--seed", g->seed, "Seed (default 1)")->check(seed_check());
  gen->add_flag("--json", *gjson, "Print one JSON object");
  gen->callback([=] { run_generate(*g, *gout, *gjson); });

  CLI::App* presets = workload->add_subcommand("presets", "List the model and GPU presets");
  auto prjson = std::make_shared<bool>(false);
  presets->add_flag("--json", *prjson, "Print one JSON object");
  presets->callback([=] { run_presets(*prjson); });
}

}  // namespace kvgate::harness
