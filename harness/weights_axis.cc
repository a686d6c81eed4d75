#include "harness/weights_axis.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "core/digits.h"
#include "core/error.h"
#include "core/hash.h"
#include "harness/commands.h"
#include "harness/eval/eval_plan.h"
#include "harness/stored_scores.h"
#include "harness/workload_models.h"
#include "scoring/metrics.h"

namespace kvgate::harness {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// MiB, as the report's memory section prints bytes, so one weight file reads the same everywhere.
std::string mib(double bytes) { return std::isfinite(bytes) ? fmt::format("{:.1f}", bytes / kMiB) : "-"; }
std::string or_dash(double v, const char* spec) { return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : "-"; }


// Sliding-window models hold less than kv_bytes_per_token x context; the file says which layers.
// The KV config is the one the run ran, read as stored (results::StoredConfig::kv).
double session_bytes(const results::StoredConfig& c, const GpuBudget& budget) {
  const double full = c.kv_bytes_per_token * static_cast<double>(budget.context);
  if (!c.model || !c.kv) return full;
  std::error_code ec;
  if (std::filesystem::file_size(c.model->path, ec) != static_cast<uintmax_t>(c.model->file_bytes) || ec) return full;
  try {
    const workloads::ModelShape shape = model_from_gguf(c.model->path);
    if (shape.sliding_window == 0) return full;
    return workloads::kv_bytes_for_context(shape, *c.kv, budget.context);
  } catch (const Error&) {
    return full;  // a file changed or gone since the run: the full-context bound still holds
  }
}

// For each config that changes both the weights and the KV spec from the reference's, where its
// mean KLD comes from: the same weights with the reference's KV, and the reference's weights
// with the same KV.
std::vector<std::string> attribution(const std::vector<WeightsKvRow>& rows) {
  std::vector<std::string> out;
  if (rows.empty() || rows.front().role != results::ConfigRole::reference || rows.front().weights.empty()) return out;
  const WeightsKvRow& ref = rows.front();
  auto find = [&](const std::string& weights, const std::string& kv) -> const WeightsKvRow* {
    for (const WeightsKvRow& r : rows)
      if (r.weights == weights && r.kv == kv) return &r;
    return nullptr;
  };
  for (const WeightsKvRow& r : rows) {
    if (r.weights == ref.weights || r.kv == ref.kv || r.weights.empty()) continue;
    const WeightsKvRow* weights_only = find(r.weights, ref.kv);
    const WeightsKvRow* kv_only = find(ref.weights, r.kv);
    if (!weights_only || !kv_only) continue;
    out.push_back(fmt::format("{}: mean KLD {}; weights alone ({}) {}, KV alone ({}) {}, the rest {:+.6f}; "
                              "weights {} MiB, KV {} MiB per session",
                              r.label, or_dash(r.quality.kld_mean, "{:.6f}"), weights_only->label,
                              or_dash(weights_only->quality.kld_mean, "{:.6f}"), kv_only->label,
                              or_dash(kv_only->quality.kld_mean, "{:.6f}"),
                              r.quality.kld_mean - weights_only->quality.kld_mean - kv_only->quality.kld_mean,
                              mib(r.weight_bytes), mib(r.kv_bytes_per_session)));
  }
  return out;
}

}  // namespace

WeightsKvTable weights_kv_table(const std::vector<WeightsKvRow>& rows) {
  WeightsKvTable t;
  using scoring::Metric, scoring::metric_info;
  t.header = {"config", "weights", "KV", std::string(metric_info(Metric::kld_mean).label),
              std::string(metric_info(Metric::kld_p99).label), scoring::metric_heading(metric_info(Metric::same_top1), true),
              "Δ answer", "weights MiB", "KV B/token", "KV MiB/session", "sessions"};
  const scoring::GoldSignal gold = !rows.empty() && rows.front().role == results::ConfigRole::reference
                                       ? scoring::gold_signal(rows.front().quality)
                                       : scoring::GoldSignal{};
  // The reference cannot answer the gold questions: a delta of zero would read as "nothing lost"
  // (the table's reader finds the reason in the note its caller prints under the summary).
  const bool gold_na = !gold.informative() && gold.reference_answered > 0;
  for (const WeightsKvRow& r : rows)
    t.rows.push_back({r.role == results::ConfigRole::reference ? r.label + " (ref)" : r.label,
                      r.weight_type.empty() ? "-" : r.weight_type,
                      r.kv,
                      or_dash(r.quality.kld_mean, "{:.6f}"),
                      or_dash(r.quality.kld_p99, "{:.5f}"),
                      or_dash(100 * r.quality.same_top1, "{:.2f}"),
                      gold_na ? gold.unavailable() : or_dash(100 * r.gold_accuracy_delta, "{:+.1f}%"),
                      mib(r.weight_bytes),
                      or_dash(r.kv_bytes_per_token, "{:.0f}"),
                      mib(r.kv_bytes_per_session),
                      r.sessions < 0 ? "-" : grouped_digits(r.sessions)});
  t.attribution = attribution(rows);
  return t;
}

std::string tokenizer_fingerprint(const runtime::ModelFiles& files) { return files.tokenizer().fingerprint(); }

void check_same_tokenizer(const runtime::Model& reference, const runtime::Model& other) {
  const runtime::Tokenizer ta = reference.files().tokenizer(), tb = other.files().tokenizer();
  const std::string a = ta.fingerprint(), b = tb.fingerprint();
  if (a != b)
    throw_input_error(fmt::format("{} and {} have different tokenizers (fingerprint {} against {}: vocabulary, merges, "
                                  "scores, special tokens or pipeline differ: {} against {}); weights are compared only "
                                  "on one tokenizer",
                                  reference.path(), other.path(), a, b, ta.pipeline_description(),
                                  tb.pipeline_description()));
  if (reference.arch().n_vocab != other.arch().n_vocab)
    throw_input_error(fmt::format("{} and {} have different vocabulary sizes ({} against {} logits)", reference.path(),
                                  other.path(), reference.arch().n_vocab, other.arch().n_vocab));
}

results::ConfigModel weights_identity(const runtime::Model& model, const std::string& label, const std::string& sha256) {
  results::ConfigModel m;
  m.label = label;
  m.path = model.path();
  m.sha256 = sha256;
  m.file_bytes = static_cast<int64_t>(model.files().file_bytes());
  std::map<runtime::GgmlType, int64_t> by_type;
  for (const runtime::ModelTensor& t : model.files().tensors()) {
    m.weight_bytes += static_cast<int64_t>(t.n_bytes);
    by_type[t.type] += static_cast<int64_t>(t.n_bytes);
  }
  const auto most = std::max_element(by_type.begin(), by_type.end(),
                                     [](const auto& x, const auto& y) { return x.second < y.second; });
  m.weight_type = most == by_type.end() ? "" : runtime::ggml_type_name(most->first);
  return m;
}

void add_gpu_flags(CLI::App* command, GpuFlags& flags) {
  command->add_option("--gpu", flags.gpu, "GPU the weights x KV table fits sessions on: a capacity preset (H100, H200, MI300X, MI355X)")
      ->capture_default_str();
  command->add_option("--gpu-mem-gib", flags.mem_gib, "Override that GPU's memory (GiB)")->check(positive_number("GiB"));
  command->add_option("--mem-util", flags.mem_util, "Share of GPU memory for weights + KV")->capture_default_str();
  command->add_option("--context", flags.context, "Tokens per session in the weights x KV table")->capture_default_str();
}

double file_size_or_nan(const std::string& path) {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  return ec ? std::nan("") : static_cast<double>(bytes);
}

std::string GpuBudget::describe() const {
  return fmt::format("{} ({:.4g} GB x {:.2f}), sessions of {} tokens", gpu.name, gpu.mem_bytes / 1e9, mem_util,
                     grouped_digits(context));
}

GpuBudget gpu_budget(const std::string& gpu, double mem_gib, double mem_util, int64_t context) {
  GpuBudget b;
  b.gpu = workloads::find_gpu_preset(gpu);
  if (mem_gib < 0 || !std::isfinite(mem_gib)) throw_usage_error("--gpu-mem-gib must be a positive number of GiB");
  if (mem_gib > 0) b.gpu.mem_bytes = mem_gib * kGiB;
  if (!(mem_util > 0 && mem_util <= 1)) throw_usage_error("--mem-util must be in (0, 1]");
  if (context < 1) throw_usage_error("--context must be at least 1 token");
  b.mem_util = mem_util;
  b.context = context;
  return b;
}

std::vector<WeightsKvRow> weights_kv_rows(const results::StoredRun& run, const GpuBudget& budget,
                                          double fallback_weight_bytes) {
  std::map<int64_t, scoring::ItemAggregator> by_config;
  for (const results::RunItemMetrics& r : run.items) by_config[r.metrics.config_id].add(item_scores(r.metrics));
  std::vector<WeightsKvRow> rows;
  for (const results::StoredConfig& c : run.configs) {
    WeightsKvRow r;
    r.spec = c.spec;
    r.label = c.label.empty() ? c.spec : c.label;
    r.role = c.role;
    r.kv = c.model ? c.model->kv_spec : c.spec;
    if (c.model) {
      // A plain run's configs share the run's model: the label says nothing a column would not.
      r.weights = c.model->kv_spec != c.spec ? c.model->label : "";
      r.weight_type = c.model->weight_type;
    }
    r.quality = by_config[c.config_id].result();
    // An endpoint serves whatever weights its engine loaded; the local model file says nothing
    // about them, so neither the weight bytes nor the sessions that fit are known.
    const bool served_by_endpoint = c.served_by_endpoint();
    if (served_by_endpoint) r.weights = r.weight_type = "engine";
    r.weight_bytes = served_by_endpoint ? kNaN
                     : c.model          ? static_cast<double>(c.model->weight_bytes)
                                        : fallback_weight_bytes;
    r.kv_bytes_per_token = c.kv_bytes_per_token;
    r.kv_bytes_per_session = session_bytes(c, budget);
    const double free_bytes = budget.gpu.mem_bytes * budget.mem_util - r.weight_bytes;
    r.sessions = !std::isfinite(r.weight_bytes) || !(r.kv_bytes_per_session > 0) ? -1
                 : free_bytes <= 0                                                 ? 0
                        : static_cast<int64_t>(std::floor(free_bytes / r.kv_bytes_per_session));
    rows.push_back(std::move(r));
  }
  // run_configs lists the reference first; accuracy deltas are against it.
  const double ref_accuracy = !rows.empty() && rows.front().role == results::ConfigRole::reference ? rows.front().quality.gold_accuracy : kNaN;
  for (WeightsKvRow& r : rows) r.gold_accuracy_delta = r.quality.gold_accuracy - ref_accuracy;
  return rows;
}

std::string weights_kv_text(const std::vector<WeightsKvRow>& rows, const GpuBudget& budget) {
  if (rows.empty()) return "";
  const WeightsKvTable t = weights_kv_table(rows);
  std::vector<size_t> width(t.header.size());
  auto display_width = [](const std::string& s) {
    size_t n = 0;
    for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;  // UTF-8 code points ("Δ")
    return n;
  };
  for (size_t k = 0; k < t.header.size(); ++k) {
    width[k] = display_width(t.header[k]);
    for (const auto& row : t.rows) width[k] = std::max(width[k], display_width(row[k]));
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = " ";
    for (size_t k = 0; k < cells.size(); ++k) {
      const std::string pad(width[k] - display_width(cells[k]), ' ');
      out += ' ';
      out += k < 3 ? cells[k] + pad : pad + cells[k];  // names left, numbers right
    }
    return out + "\n";
  };
  std::string text = "weights x KV: quality against the reference, memory on " + budget.describe() + "\n";
  text += line(t.header);
  for (const auto& row : t.rows) text += line(row);
  for (const std::string& a : t.attribution) text += "  " + a + "\n";
  return text;
}

std::string weights_kv_markdown(const std::vector<WeightsKvRow>& rows, const GpuBudget& budget) {
  if (rows.empty()) return "";
  const WeightsKvTable t = weights_kv_table(rows);
  auto line = [](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (const std::string& c : cells) out += " " + c + " |";
    return out + "\n";
  };
  std::string md = "## Weights x KV\n\nQuality against the reference, memory on " + budget.describe() + ".\n\n";
  md += line(t.header);
  md += "|";
  for (size_t k = 0; k < t.header.size(); ++k) md += k < 3 ? "---|" : "---:|";
  md += "\n";
  for (const auto& row : t.rows) md += line(row);
  if (!t.attribution.empty()) {
    md += "\n";
    for (const std::string& a : t.attribution) md += "- " + a + "\n";
  }
  return md + "\n";
}

}  // namespace kvgate::harness
