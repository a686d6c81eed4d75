// `kvgate generate` and `kvgate perplexity`: run the model with its KV cache in a chosen format.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "harness/backend.h"
#include "harness/commands.h"
#include "harness/inference.h"
#include "runtime/chat_template.h"
#include "scoring/kld_report.h"
#include "scoring/token_metrics.h"

namespace kvgate::harness {
namespace {

std::vector<runtime::ChatMessage> read_messages(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_whole_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw_input_error_at(path, e.byte, "not valid JSON");
  }
  if (!j.is_array()) throw_input_error(path + ": expected a JSON array of {\"role\", \"content\"} messages");
  std::vector<runtime::ChatMessage> messages;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& m = j[i];
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
        !m["content"].is_string())
      throw_input_error(path + ": message " + std::to_string(i) + " needs string fields \"role\" and \"content\"");
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

struct GenerateArgs {
  std::string prompt, messages_file, kv = "none", model, backend = "cpu";
  int n = 64;
  int threads = 0;
  bool chat = false, ignore_eos = false, json = false;
};

void run_generate(const GenerateArgs& a) {
  if (a.prompt.empty() == a.messages_file.empty()) throw_usage_error("give exactly one of --prompt or --messages");
  if (a.n < 1) throw_usage_error("-n must be at least 1");
  const kernels::KvConfig config = kernels::parse_kv_config(a.kv);
  LoadedModel lm = load_model(a.model);
  std::string text;
  if (!a.messages_file.empty()) {
    text = runtime::render_chat(lm.model->gguf(), read_messages(a.messages_file), true);
  } else if (a.chat) {
    text = runtime::render_chat(lm.model->gguf(), {{"user", a.prompt}}, true);
  } else {
    text = a.prompt;
  }
  std::vector<int32_t> prompt = lm.tokenizer.encode(text, true);
  if (lm.tokenizer.add_bos() && lm.tokenizer.bos_id()) prompt.insert(prompt.begin(), *lm.tokenizer.bos_id());
  if (prompt.empty()) throw_usage_error("the prompt is empty");
  const int64_t ctx_limit = lm.model->arch().n_ctx_train;
  if (static_cast<int64_t>(prompt.size()) + a.n > ctx_limit)
    throw_usage_error(fmt::format("prompt ({} tokens) + -n {} exceeds the model's context of {} tokens", prompt.size(),
                                  a.n, ctx_limit));

  const std::unique_ptr<runtime::Engine> engine = make_engine(a.backend, *lm.model, a.threads);
  const std::unique_ptr<runtime::EngineSequence> seq = engine->start(config, static_cast<int64_t>(prompt.size()) + a.n);
  std::vector<float> logits(lm.model->arch().n_vocab);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> token_times;
  engine->forward(*seq, prompt, false, logits.data());
  std::vector<int32_t> out;
  const bool live = !a.json && ::isatty(STDOUT_FILENO);
  for (int i = 0; i < a.n; ++i) {
    // Greedy: the lowest id wins a tie, so the choice is deterministic.
    int32_t best = 0;
    for (size_t t = 1; t < logits.size(); ++t)
      if (logits[t] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(t);
    token_times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!a.ignore_eos && lm.tokenizer.eos_id() && best == *lm.tokenizer.eos_id()) break;
    out.push_back(best);
    if (live) {
      std::fputs(lm.tokenizer.piece(best, false).c_str(), stdout);
      std::fflush(stdout);
    }
    if (i + 1 < a.n) engine->forward(*seq, std::span<const int32_t>(&best, 1), false, logits.data());
  }
  const double ttft = token_times.empty() ? 0.0 : token_times.front();
  const double tpot = token_times.size() > 1 ? (token_times.back() - ttft) / static_cast<double>(token_times.size() - 1) : 0.0;
  const std::string completion = lm.tokenizer.decode(out, false);
  if (a.json) {
    nlohmann::json j = {{"kv", config.canonical()},          {"prompt_tokens", prompt.size()},
                        {"tokens", out},                     {"text", completion},
                        {"ttft_ms", ttft * 1e3},             {"tpot_ms", tpot * 1e3}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  if (!live) std::fputs(completion.c_str(), stdout);
  std::printf("\n");
  std::fprintf(stderr, "[kv %s] prompt %zu tokens, generated %zu, TTFT %.1f ms, TPOT %.1f ms\n",
               config.canonical().c_str(), prompt.size(), out.size(), ttft * 1e3, tpot * 1e3);
}

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
  const std::vector<int32_t> tokens = perplexity_tokens(lm, read_whole_file(a.file));
  const std::unique_ptr<runtime::Engine> engine = make_engine(a.backend, *lm.model, a.threads);
  const bool live = !a.json && ::isatty(STDERR_FILENO);
  const std::vector<PerplexityResult> results =
      run_perplexity(*engine, lm, tokens, candidates, ref ? &*ref : nullptr, options, [&](int done, int total) {
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

void add_infer_commands(CLI::App& app, CommandContext&) {
  auto gen = std::make_shared<GenerateArgs>();
  CLI::App* g = app.add_subcommand("generate", "Greedy continuation with the KV cache in a chosen format");
  g->add_option("--prompt", gen->prompt, "Prompt text (raw, unless --chat)");
  g->add_option("--messages", gen->messages_file, "JSON file: [{\"role\": ..., \"content\": ...}, ...]");
  g->add_flag("--chat", gen->chat, "Wrap --prompt as one user message in the model's chat template");
  g->add_option("--kv", gen->kv, "KV config (see `kvgate kv list`)")->capture_default_str();
  g->add_option("-n", gen->n, "Tokens to generate")->capture_default_str();
  g->add_option("--model", gen->model, "GGUF model (default: the fetched default model)");
  g->add_option("--threads", gen->threads, "Worker threads (0 = all cores)");
  add_backend_option(g, gen->backend);
  g->add_flag("--ignore-eos", gen->ignore_eos, "Keep generating past the end-of-sequence token");
  g->add_flag("--json", gen->json, "Machine-readable output");
  g->callback([gen] { run_generate(*gen); });

  auto ppl = std::make_shared<PerplexityArgs>();
  CLI::App* p = app.add_subcommand("perplexity", "Perplexity and KLD against a reference KV config, scored as llama-perplexity --kl-divergence");
  p->add_option("--file", ppl->file, "Text file")->required();
  p->add_option("--ctx", ppl->options.ctx, "Tokens per chunk; the second half of each is scored")->capture_default_str();
  p->add_option("--chunks", ppl->options.max_chunks, "Score at most this many chunks (0 = all)");
  p->add_option("--batch", ppl->options.batch, "Tokens per forward call within a chunk")->capture_default_str();
  p->add_option("--kv", ppl->kv,
                "KV config under test; repeat it to score several configs against one reference pass")
      ->capture_default_str();
  p->add_option("--ref", ppl->ref, "Reference KV config: report KLD, Δp and top-1 agreement against it");
  p->add_option("--kld-definition", ppl->kld_definition,
                "Per-token KL divergence: llama.cpp (llama-perplexity --kl-divergence: reference entries with "
                "ln p <= -16 left out), llama.cpp-stored (also the reference rounded to 16 bits as in its base "
                "file), full (every vocabulary entry, as `kvgate eval`)")
      ->capture_default_str();
  p->add_option("--model", ppl->model, "GGUF model (default: the fetched default model)");
  p->add_option("--threads", ppl->threads, "Worker threads (0 = all cores)");
  add_backend_option(p, ppl->backend);
  p->add_flag("--json", ppl->json, "Machine-readable output");
  p->callback([ppl] { run_perplexity_cmd(*ppl); });
}

}  // namespace kvgate::harness
