// `kvgate perplexity`: perplexity, and KLD against a reference KV config, over a text file.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "harness/backend.h"
#include "harness/commands.h"
#include "harness/inference.h"
#include "scoring/kld_report.h"
#include "scoring/token_metrics.h"

namespace kvgate::harness {
namespace {

struct PerplexityArgs {
  std::string file, ref, model, backend = "cpu", kld_definition = "llama.cpp";
  std::vector<std::string> kv = {"f16"};
  int threads = 0;
  bool json = false;
  PerplexityOptions options;
};

// --kld-definition values; the first is the default.
const std::vector<std::pair<std::string, scoring::KldDefinition>> kKldDefinitions = {
    {"llama.cpp", scoring::KldDefinition::kLlamaCpp},
    {"llama.cpp-stored", scoring::KldDefinition::kLlamaCppStored},
    {"full", scoring::KldDefinition::kFull},
};

scoring::KldDefinition parse_kld_definition(const std::string& name) {
  std::string known;
  for (const auto& [n, d] : kKldDefinitions) {
    if (n == name) return d;
    known += (known.empty() ? "" : ", ") + n;
  }
  throw_usage_error("--kld-definition: unknown value '" + name + "' (expected " + known + ")");
}

nlohmann::json vwe(const scoring::ValueWithError& v) { return {{"value", v.value}, {"error", v.error}}; }
nlohmann::json dist(const scoring::Distribution& d) {
  return {{"max", d.max},       {"p99.9", d.p99_9}, {"p99", d.p99}, {"p95", d.p95}, {"p90", d.p90},
          {"p75", d.p75},       {"median", d.median}, {"p25", d.p25}, {"p10", d.p10}, {"p5", d.p5},
          {"p1", d.p1},         {"p0.1", d.p0_1},  {"min", d.min}};
}

nlohmann::json perplexity_json(const PerplexityArgs& a, const kernels::KvConfig& candidate,
                               const kernels::KvConfig* ref, const PerplexityResult& r) {
  nlohmann::json j = {{"file", a.file},       {"kv", candidate.canonical()}, {"ctx", a.options.ctx},
                      {"chunks", r.chunks},   {"scored_tokens", r.scored_tokens}, {"ppl", vwe(r.ppl)},
                      {"seconds", r.seconds}, {"chunk_ppl", r.chunk_ppl}};
  if (ref) {
    const scoring::KldReport& k = r.kld;
    j["ref"] = ref->canonical();
    j["kld_definition"] = a.kld_definition;
    j["kld"] = {{"ppl_q", vwe(k.ppl_q)},           {"ppl_base", vwe(k.ppl_base)},
                {"ln_ppl_ratio", vwe(k.ln_ppl_ratio)}, {"ppl_ratio", vwe(k.ppl_ratio)},
                {"mean", vwe(k.kld_mean)},         {"distribution", dist(k.kld)},
                {"delta_p_mean", vwe(k.delta_p_mean)}, {"delta_p_rms", vwe(k.delta_p_rms)},
                {"delta_p", dist(k.delta_p)},      {"same_top1", vwe(k.same_top1)}};
  }
  return j;
}

void run_perplexity_cmd(const PerplexityArgs& a) {
  std::vector<kernels::KvConfig> candidates;
  for (const std::string& spec : a.kv) candidates.push_back(kernels::parse_kv_config(spec));
  std::optional<kernels::KvConfig> ref;
  if (!a.ref.empty()) ref = kernels::parse_kv_config(a.ref);
  PerplexityOptions options = a.options;
  options.kld = parse_kld_definition(a.kld_definition);
  LoadedModel lm = load_model(a.model);
  const std::vector<int32_t> tokens = perplexity_tokens(lm, read_whole_file(a.file, kMaxDataFileBytes), a.file);
  const std::unique_ptr<runtime::Backend> backend = make_backend(a.backend, *lm.model, a.threads);
  const bool live = !a.json && ::isatty(STDERR_FILENO);
  const std::vector<PerplexityResult> results =
      run_perplexity(*backend, lm, tokens, candidates, ref ? &*ref : nullptr, options, [&](int done, int total) {
        if (live) std::fprintf(stderr, "\rchunk %d/%d", done, total);
      });
  if (live) std::fprintf(stderr, "\n");
  for (size_t i = 0; i < candidates.size(); ++i) {
    const kernels::KvConfig& candidate = candidates[i];
    const PerplexityResult& r = results[i];
    if (a.json) {
      // One object per line: a single --kv prints exactly one JSON object.
      std::printf("%s\n", perplexity_json(a, candidate, ref ? &*ref : nullptr, r).dump().c_str());
      continue;
    }
    if (i > 0) std::printf("\n");
    std::printf("kv %s, %d chunks of %d tokens, %zu scored tokens, %.1f s\n", candidate.canonical().c_str(),
                r.chunks, a.options.ctx, r.scored_tokens, r.seconds);
    if (!ref) {
      std::printf("PPL = %.4f +/- %.5f\n", r.ppl.value, r.ppl.error);
      continue;
    }
    std::printf("reference %s, KLD definition %s\n\n%s", ref->canonical().c_str(), a.kld_definition.c_str(),
                scoring::format_kld_report(r.kld).c_str());
  }
}

}  // namespace

void add_perplexity_commands(CLI::App& app, CommandContext&) {
  auto ppl = std::make_shared<PerplexityArgs>();
  CLI::App* p = app.add_subcommand("perplexity", "Perplexity and KLD against a reference KV config, scored as llama-perplexity --kl-divergence");
  p->add_option("--file", ppl->file, "Text file")->required();
  p->add_option("--ctx", ppl->options.ctx, "Tokens per chunk; the second half of each is scored")->capture_default_str();
  p->add_option("--chunks", ppl->options.max_chunks, "Score at most this many chunks (0 = all)");
  p->add_option("--batch", ppl->options.batch, "Tokens per forward call within a chunk")->capture_default_str();
  // Comma-separated like `eval --kv`, and repeatable: one syntax everywhere.
  p->add_option("--kv", ppl->kv,
                "KV configs under test, comma-separated (or repeat --kv) to score several against one reference pass")
      ->delimiter(',')
      ->capture_default_str();
  p->add_option("--ref", ppl->ref, "Reference KV config: report KLD, Δp and top-1 agreement against it");
  p->add_option("--kld-definition", ppl->kld_definition,
                "Per-token KL divergence: llama.cpp (llama-perplexity --kl-divergence: reference entries with "
                "ln p <= -16 left out), llama.cpp-stored (also the reference rounded to 16 bits as in its base "
                "file), full (every vocabulary entry, as `kvgate eval`)")
      ->capture_default_str();
  p->add_option("--model", ppl->model, "GGUF model (default: the fetched default model)");
  p->add_option("--threads", ppl->threads, "Cores in total, BLAS included (0 = all cores). Metrics are bit-identical for the same thread count only: compare runs made with the same --threads")->check(thread_count_check())->capture_default_str();
  add_backend_option(p, ppl->backend);
  p->add_flag("--json", ppl->json, "Machine-readable output");
  p->callback([ppl] { run_perplexity_cmd(*ppl); });
}

}  // namespace kvgate::harness
