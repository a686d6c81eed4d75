#pragma once
// `kvgate report` rendering: one self-contained HTML page (inline SVG, no scripts, no network;
// well-formed XHTML so a strict parser can check it) and a Markdown summary for PR comments.
// Every number comes from the results store rows passed in here.
#include <optional>
#include <string>
#include <vector>

#include "harness/report/answers.h"
#include "harness/report/engine_report.h"
#include "harness/report/verdicts.h"
#include "harness/weights_axis.h"
#include "results/store.h"
#include "results/stored_run.h"

namespace kvgate::harness {

struct ReportInput {
  results::StoredRun run;
  double weight_bytes = 0;  // the model file's size; NaN when the file is gone
  // Per config: quality against the reference beside weight and KV memory on `budget`.
  std::vector<WeightsKvRow> weights_kv;
  GpuBudget budget;
  std::optional<results::StoredRun> baseline;
  EngineRunView engine;  // engine mode: endpoints, failed items, load replay (empty otherwise)
  RunAnswers answers;    // every turn's answers (harness/report/answers.h): the report shows those that changed
  RunVerdicts verdicts;  // one line per candidate config, from the rollout policy in use
};

// The anchor of a config's "answers that changed" in the HTML report (the gate report links to it).
std::string changed_answers_anchor(const std::string& spec);

// The ids of the charts every report carries, in page order (scripts/check-report-html looks
// for each of them in the rendered page).
const std::vector<std::string>& report_chart_ids();

std::string render_report_html(const ReportInput& in);
// Escapes text for XML/XHTML content and attribute values (JUnit files and the report); other
// control characters than newline and tab become spaces, since XML 1.0 cannot carry them.
std::string xml_escape(const std::string& s);
std::string render_report_markdown(const ReportInput& in);

}  // namespace kvgate::harness
