// `kvgate report`: renders one run (optionally against a baseline run) as a self-contained HTML
// page and/or a Markdown summary. Only reads the results store.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "harness/commands.h"
#include "harness/report/report_html.h"
#include "harness/weights_axis.h"
#include "results/store.h"

namespace kvgate::harness {
namespace {

struct ReportArgs {
  std::string run = "latest", baseline, db, html, md, policy;
  bool json = false;
  GpuFlags gpu;
};


void run_report(const ReportArgs& a) {
  if (a.html.empty() && a.md.empty()) throw_usage_error("kvgate report: give --html FILE and/or --md FILE");
  results::Store store = results::Store::open(results::resolve_db_path(a.db), results::Store::Mode::existing);
  ReportInput in;
  in.run = results::StoredRun::load(store, store.resolve_run(a.run));
  in.weight_bytes = file_size_or_nan(in.run.record.info.model_path);
  in.budget = gpu_budget(a.gpu.gpu, a.gpu.mem_gib, a.gpu.mem_util, a.gpu.context);
  in.weights_kv = weights_kv_rows(in.run, in.budget, in.weight_bytes);
  in.engine = read_engine_view(in.run);
  in.answers = read_answers(in.run);
  in.verdicts = run_verdicts(in.run, a.policy);
  if (!a.baseline.empty()) {
    const results::RunRecord baseline = store.resolve_run(a.baseline);
    // A run against itself is read once.
    in.baseline = baseline.id == in.run.record.id ? in.run : results::StoredRun::load(store, baseline);
  }
  if (!a.html.empty()) write_output_file(a.html, render_report_html(in));
  if (!a.md.empty()) write_output_file(a.md, render_report_markdown(in));
  if (a.json) {
    nlohmann::json j = {{"run", in.run.record.id},
                        {"baseline", in.baseline ? nlohmann::json(in.baseline->record.id) : nlohmann::json(nullptr)},
                        {"html", a.html.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.html)},
                        {"md", a.md.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.md)},
                        {"charts", report_chart_ids()},
                        {"items", in.run.record.items},
                        {"configs", in.run.configs.size()}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("report for run %lld%s:%s%s\n", static_cast<long long>(in.run.record.id),
                in.baseline ? (" vs baseline " + std::to_string(in.baseline->record.id)).c_str() : "",
                a.html.empty() ? "" : (" " + a.html).c_str(), a.md.empty() ? "" : (" " + a.md).c_str());
  }
}

}  // namespace

void add_report_commands(CLI::App& app, CommandContext& ctx) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* r = app.add_subcommand("report", "Render a run as a self-contained HTML report and a Markdown summary");
  r->add_option("--run", a->run, "Run id or latest")->capture_default_str();
  r->add_option("--baseline", a->baseline, "Baseline run id (adds per-item deltas)");
  r->add_option("--db", a->db, "Results database (default: $KVGATE_DB or ./kvgate.db)");
  r->add_option("--html", a->html, "Write the HTML report to FILE");
  r->add_option("--md", a->md, "Write the Markdown summary to FILE");
  r->add_option("--policy", a->policy,
                "Rollout policy the verdict per config holds its bounds against (default: the built-in "
                "ci/gates/rollout.json; docs/gates.md)");
  r->add_flag("--json", a->json, "Machine-readable output");
  add_gpu_flags(r, a->gpu);
  r->callback([a] { run_report(*a); });
}

}  // namespace kvgate::harness
