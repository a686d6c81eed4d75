// `kvgate gate`: compares a candidate run with a baseline run item by item under a gate policy,
// prints and stores every check's decision, and exits 1 when any check fails. JUnit XML lets a
// CI system show each check as a test case; the Markdown report is for PR comments.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "harness/report/answers.h"
#include "harness/report/config_labels.h"
#include "harness/commands.h"
#include "harness/report/report_html.h"
#include "harness/report/verdicts.h"
#include "kernels/kv_config.h"
#include "results/store.h"
#include "scoring/gate.h"
#include "scoring/gate_policy.h"

namespace kvgate::harness {
namespace {

struct GateArgs {
  std::string baseline, candidate = "latest", policy, db, junit, report;
  std::vector<std::string> pair_configs;  // "BASE=CAND": compare the baseline's BASE config with the candidate's CAND
  bool json = false;
  bool allow_missing_baseline = false;
  bool no_store = false;  // do not record the decisions in the database (a read-only one)
};

// A rule whose domain no item of the candidate has never matches: a typo there would leave its
// limits unapplied without a word, so each such rule is named in the gate's notes.
std::vector<std::string> unmatched_domain_notes(const scoring::GatePolicy& policy, const scoring::GateRun& run) {
  std::set<std::string> domains;
  for (const scoring::GateItem& item : run.items) domains.insert(item.domain);
  std::string listed;
  for (const std::string& d : domains) listed += (listed.empty() ? "" : ", ") + d;
  std::vector<std::string> notes;
  std::set<std::string> named;
  for (const scoring::GateRule& r : policy.rules)
    if (r.domain != "*" && !domains.count(r.domain) && named.insert(r.domain).second)
      notes.push_back(fmt::format("policy {}: no item of candidate run {} is in domain '{}' (its domains: {}); the "
                                  "rules for that domain matched nothing and were not applied",
                                  policy.source, run.id, echo_user_text(r.domain), listed.empty() ? "none" : listed));
  return notes;
}

// "latest:smoke" matches runs of the built-in suite (stored as "suite:smoke") and runs whose
// suite name is exactly what was given (an eval set or trace path).
bool suite_matches(const std::string& stored, const std::string& wanted) {
  return wanted.empty() || stored == wanted || stored == "suite:" + wanted;
}

bool has_failed_gate(results::Store& store, int64_t run_id) {
  for (const results::GateDecision& d : store.gate_decisions_for_candidate(run_id))
    if (!d.passed) return true;
  return false;
}

// RUN | latest[:SUITE] | passing[:SUITE]. `latest` is the latest complete run; `passing` the
// latest complete run that no stored gate decision failed. As a baseline (before != nullopt)
// both pick a run older than the candidate, and `passing` one of the candidate's model.
std::optional<results::RunRecord> select_run(results::Store& store, const std::string& ref,
                                             std::optional<int64_t> before, const std::string& model_sha256) {
  const size_t colon = ref.find(':');
  const std::string head = ref.substr(0, colon);
  const std::string suite = colon == std::string::npos ? "" : ref.substr(colon + 1);
  if (head != "latest" && head != "passing") return store.resolve_run(ref);
  if (colon != std::string::npos && suite.empty()) throw_usage_error("run '" + ref + "': give a suite name after ':'");
  const std::vector<results::RunRecord> runs = store.list_runs();
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
    if (it->status != results::RunStatus::complete || !suite_matches(it->info.suite_name, suite)) continue;
    if (before && it->id >= *before) continue;
    if (head == "passing" && (it->info.model_sha256 != model_sha256 || has_failed_gate(store, it->id))) continue;
    return *it;
  }
  return std::nullopt;
}

std::string md_cell(const std::string& s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? std::string("\\|") : ch == '\n' ? std::string(" ") : std::string(1, ch);
  return out;
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "-"; }


std::string junit_xml(const scoring::GateOutcome& o, const std::string& title) {
  std::map<std::string, std::vector<const scoring::CheckResult*>> by_kind;
  for (const scoring::CheckResult& c : o.checks) by_kind[scoring::check_kind_name(c.kind)].push_back(&c);
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format("<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\">\n", xml_escape(title), o.checks.size(), o.failed());
  for (const auto& [kind, checks] : by_kind) {
    size_t failures = 0;
    for (const auto* c : checks) failures += c->passed ? 0 : 1;
    x += fmt::format("  <testsuite name=\"kvgate.gate.{}\" tests=\"{}\" failures=\"{}\">\n", kind, checks.size(), failures);
    for (const auto* c : checks) {
      x += fmt::format("    <testcase classname=\"kvgate.gate.{}\" name=\"{}\"", kind, xml_escape(c->name));
      if (c->skipped) {
        x += fmt::format("><skipped message=\"{}\"/></testcase>\n", xml_escape(c->detail));
      } else if (c->passed) {
        x += fmt::format("><system-out>{}</system-out></testcase>\n", xml_escape(c->detail));
      } else {
        x += fmt::format("><failure message=\"{}\" type=\"{}\">{}</failure></testcase>\n", xml_escape(c->detail), kind,
                         xml_escape(c->detail));
      }
    }
    x += "  </testsuite>\n";
  }
  if (!o.notes.empty()) {
    // Notes ride in a passing test case so every CI viewer shows them next to the checks.
    x += "  <testsuite name=\"kvgate.gate.notes\" tests=\"1\" failures=\"0\">\n    <testcase classname=\"kvgate.gate.notes\" "
         "name=\"notes\"><system-out>";
    for (const std::string& n : o.notes) x += xml_escape(n) + "\n";
    x += "</system-out></testcase>\n  </testsuite>\n";
  }
  x += "</testsuites>\n";
  return x;
}

// The candidate's answers that changed under a failed check's config (and domain), so a reader
// goes from the number to what the model said.
std::string changed_answers_link(const scoring::CheckResult& c, const RunAnswers& answers, int64_t run_id) {
  if (c.config.empty() || !answers.stored) return "";
  const std::string domain = c.domain == "*" ? "" : c.domain;
  const std::vector<std::string> items = changed_items(answers, c.config, domain);
  if (items.empty())
    return fmt::format("  - no answer changed under {} against the reference {}\n", answers.label(c.config),
                       answers.label(answers.reference));
  std::string list;
  for (size_t i = 0; i < items.size() && i < 8; ++i) list += (i ? ", " : "") + ("`" + items[i] + "`");
  if (items.size() > 8) list += fmt::format(" and {} more", items.size() - 8);
  return fmt::format("  - answers that changed ({}): {}; read them with `kvgate runs show {} --answers --changed --config {}{}` "
                     "or in the HTML report's section #{}\n",
                     items.size(), list, run_id, answers.label(c.config), domain.empty() ? "" : " --domain " + domain,
                     changed_answers_anchor(c.config));
}

std::string markdown_report(const scoring::GateOutcome& o, const std::string& headline, const RunAnswers& answers,
                            int64_t candidate_run) {
  std::string md = "## kvgate gate: " + std::string(o.passed() ? "PASS" : "FAIL") + "\n\n" + headline + "\n\n";
  // Tables name configs as typed; check names keep the canonical spec (stable ids for CI history).
  if (const std::string legend = canonical_legend(answers.names); !legend.empty()) md += "Configs as typed; " + legend + ".\n\n";
  md += fmt::format("{} checks, {} failed, {} skipped.\n\n", o.checks.size(), o.failed(), o.skipped());
  if (o.failed() > 0) {
    md += "### Failing checks\n\n| check | domain | config | baseline | candidate | delta | CI | limit | items most affected |\n"
          "|---|---|---|---|---|---|---|---|---|\n";
    for (const scoring::CheckResult& c : o.checks) {
      if (c.passed) continue;
      std::string items;
      for (const auto& m : c.most_affected) items += (items.empty() ? "" : ", ") + fmt::format("{} ({:+.4g})", m.item_key, m.delta);
      const std::string ci = std::isfinite(c.ci_low) ? fmt::format("[{:+.4g}, {:+.4g}]", c.ci_low, c.ci_high) : "-";
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", md_cell(c.kind == scoring::CheckKind::regression ||
                                                                                      c.kind == scoring::CheckKind::absolute
                                                                                  ? std::string(scoring::check_kind_name(c.kind)) + " " + c.metric
                                                                                  : c.name),
                        md_cell(c.domain), md_cell(c.config.empty() ? "-" : answers.label(c.config)), num(c.baseline_value),
                        num(c.candidate_value), num(c.delta), ci, num(c.threshold), md_cell(items.empty() ? "-" : items));
    }
    md += "\nDetails:\n\n";
    for (const scoring::CheckResult& c : o.checks)
      if (!c.passed) md += "- `" + c.name + "`: " + c.detail + "\n" + changed_answers_link(c, answers, candidate_run);
    md += "\n";
  }
  if (o.skipped() > 0) {
    // Listed apart so that a check that could not decide is never read as a pass.
    md += "### Skipped checks\n\n";
    for (const scoring::CheckResult& c : o.checks)
      if (c.skipped) md += "- `" + c.name + "`: " + c.detail + "\n";
    md += "\n";
  }
  if (!o.notes.empty()) {
    md += "### Notes\n\n";
    for (const std::string& n : o.notes) md += "- " + n + "\n";
    md += "\n";
  }
  md += "<details><summary>All checks</summary>\n\n| check | result | detail |\n|---|---|---|\n";
  for (const scoring::CheckResult& c : o.checks)
    md += fmt::format("| `{}` | {} | {} |\n", md_cell(c.name), c.skipped ? "skipped" : c.passed ? "pass" : "**FAIL**",
                      md_cell(c.detail));
  md += "\n</details>\n";
  return md;
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json outcome_json(const scoring::GateOutcome& o, const std::optional<results::RunRecord>& base,
                            const results::RunRecord& cand, const std::string& policy, const std::string& db,
                            const std::vector<results::StoredConfig>& cand_configs) {
  nlohmann::json checks = nlohmann::json::array();
  for (const scoring::CheckResult& c : o.checks) {
    nlohmann::json affected = nlohmann::json::array();
    for (const auto& m : c.most_affected)
      affected.push_back({{"item", m.item_key}, {"baseline", m.baseline}, {"candidate", m.candidate}, {"delta", m.delta}});
    checks.push_back({{"name", c.name},
                      {"kind", scoring::check_kind_name(c.kind)},
                      {"metric", c.metric},
                      {"domain", c.domain},
                      {"config", c.config},
                      {"config_label", c.config.empty() ? nlohmann::json(nullptr) : nlohmann::json(label_of(cand_configs, c.config))},
                      {"passed", c.passed},
                      {"skipped", c.skipped},
                      {"baseline_value", number_or_null(c.baseline_value)},
                      {"candidate_value", number_or_null(c.candidate_value)},
                      {"delta", number_or_null(c.delta)},
                      {"ci_low", number_or_null(c.ci_low)},
                      {"ci_high", number_or_null(c.ci_high)},
                      {"threshold", number_or_null(c.threshold)},
                      {"items", c.items},
                      {"most_affected", affected},
                      {"detail", c.detail}});
  }
  return {{"passed", o.passed()},
          {"failed", o.failed()},
          {"skipped", o.skipped()},
          {"checks_total", o.checks.size()},
          {"baseline", base ? nlohmann::json(base->id) : nlohmann::json(nullptr)},
          {"candidate", cand.id},
          {"policy", policy},
          {"db", db},
          {"notes", o.notes},
          {"checks", checks}};
}

void run_gate(const GateArgs& a, CommandContext& ctx) {
  const scoring::GatePolicy loaded_policy = load_policy_or_default(a.policy);
  results::Store store = results::Store::open(results::resolve_db_path(a.db), results::Store::Mode::existing);
  if (store.read_only() && !a.no_store)
    throw_usage_error(store.path() + ": the database is read-only here, and the gate records its decisions in it (which "
                      "--baseline passing reads); give --no-store to gate without recording them");
  const std::optional<results::RunRecord> cand = select_run(store, a.candidate, std::nullopt, "");
  if (!cand) throw_input_error(store.path() + ": no complete run matches --candidate " + a.candidate);
  const std::optional<results::RunRecord> base = select_run(store, a.baseline, cand->id, cand->info.model_sha256);
  if (!base && !a.allow_missing_baseline)
    throw_input_error(store.path() + ": no complete run before candidate run " + std::to_string(cand->id) +
                      " matches --baseline " + a.baseline + " (first run of a suite? pass --allow-missing-baseline)");

  const results::StoredRun cand_stored = results::StoredRun::load(store, *cand);
  const scoring::GateRun cand_run = load_gate_run(cand_stored);
  std::optional<results::StoredRun> base_stored;
  std::optional<scoring::GateRun> base_run;
  if (base) {
    // A run gated against itself is read once.
    base_stored = base->id == cand->id ? cand_stored : results::StoredRun::load(store, *base);
    base_run = load_gate_run(*base_stored);
  }
  // Rules name configs by what they mean (config_labels.h); one that names none is refused.
  std::vector<std::string> policy_notes;
  const scoring::GatePolicy policy = bind_policy(loaded_policy, cand_stored.configs, cand->id, &policy_notes);
  // `--pair-config BASE=CAND`: each side names exactly one config of its run, as a rule does; a
  // GateRun's configs are its StoredRun's, in the same order.
  auto named = [&](const std::string& typed, const results::StoredRun& run, const char* side) {
    const ConfigMatcher matcher(typed);
    std::vector<scoring::ConfigIndex> found;
    for (scoring::ConfigIndex i = 0; i < run.configs.size(); ++i)
      if (matcher.names(run.configs[i])) found.push_back(i);
    if (found.size() != 1)
      throw_input_error(fmt::format("{}: --pair-config: {} run {} has {} config named '{}' (its configs: {}){}",
                                    store.path(), side, run.record.id, found.empty() ? "no" : "more than one",
                                    echo_user_text(typed), config_list(run.configs),
                                    found.empty() && !matcher.parse_problem().empty()
                                        ? "; as a KV spec: " + matcher.parse_problem()
                                        : ""));
    return found.front();
  };
  std::vector<scoring::ConfigPairing> pairings;
  for (const std::string& pair : a.pair_configs) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == pair.size())
      throw_usage_error("--pair-config '" + echo_user_text(pair) + "': expected BASE_SPEC=CANDIDATE_SPEC");
    if (!base_run) throw_usage_error("--pair-config needs a baseline run");
    pairings.push_back({named(pair.substr(0, eq), *base_stored, "baseline"), named(pair.substr(eq + 1), cand_stored, "candidate")});
  }
  scoring::GateOutcome outcome = scoring::evaluate_gate(policy, base_run ? &*base_run : nullptr, cand_run, pairings);
  for (std::string& note : policy_notes) outcome.notes.push_back(std::move(note));
  for (std::string& note : unmatched_domain_notes(policy, cand_run)) outcome.notes.push_back(std::move(note));

  for (const scoring::CheckResult& c : outcome.checks) {
    results::GateDecision d;
    // A first run has no baseline; its decisions name the candidate on both sides.
    d.baseline_run_id = base ? base->id : cand->id;
    d.candidate_run_id = cand->id;
    d.config_id = c.config_id;
    d.check_name = c.name;
    d.metric = c.metric;
    d.passed = c.passed;
    d.baseline_value = c.baseline_value;
    d.candidate_value = c.candidate_value;
    d.delta = c.delta;
    d.ci_low = c.ci_low;
    d.ci_high = c.ci_high;
    d.threshold = c.threshold;
    // The table keeps pass/fail; a skipped check is stored as not failed, and says so first.
    d.detail = c.skipped ? "SKIPPED: " + c.detail : c.detail;
    if (!a.no_store) store.add_gate_decision(d);
  }

  const std::string headline =
      base ? fmt::format("Baseline run {} ({}, {} items) vs candidate run {} ({}, {} items), policy `{}`.", base->id,
                         base->info.suite_name, base->items, cand->id, cand->info.suite_name, cand->items, a.policy)
           : fmt::format("Candidate run {} ({}, {} items), no baseline, policy `{}`.", cand->id, cand->info.suite_name,
                         cand->items, a.policy);
  if (!a.junit.empty()) write_output_file(a.junit, junit_xml(outcome, "kvgate gate " + std::to_string(cand->id)));
  if (!a.report.empty()) write_output_file(a.report, markdown_report(outcome, headline, read_answers(cand_stored), cand->id));

  if (a.json) {
    std::printf("%s\n", outcome_json(outcome, base, *cand, a.policy, store.path(), cand_stored.configs).dump(2).c_str());
  } else {
    std::printf("%s\n", headline.c_str());
    // Check names keep the canonical specs: the candidate's configs as typed, to read them by.
    if (const std::string legend = canonical_legend(config_names(cand_stored.configs)); !legend.empty())
      std::printf("configs as typed; %s\n", legend.c_str());
    for (const scoring::CheckResult& c : outcome.checks)
      if (!c.passed) std::printf("FAIL %s: %s\n", c.name.c_str(), c.detail.c_str());
    for (const scoring::CheckResult& c : outcome.checks)
      if (c.skipped) std::printf("SKIPPED %s: %s\n", c.name.c_str(), c.detail.c_str());
    for (const std::string& n : outcome.notes) std::printf("note: %s\n", n.c_str());
    std::printf("gate %s: %zu of %zu checks failed, %zu skipped\n", outcome.passed() ? "PASSED" : "FAILED",
                outcome.failed(), outcome.checks.size(), outcome.skipped());
  }
  if (!outcome.passed()) ctx.exit_code = 1;
}

}  // namespace

void add_gate_commands(CLI::App& app, CommandContext& ctx) {
  auto a = std::make_shared<GateArgs>();
  CLI::App* g = app.add_subcommand("gate", "Compare a candidate run with a baseline run under a gate policy (exit 1 on failure)");
  g->add_option("--baseline", a->baseline, "Baseline: RUN id, latest[:SUITE] or passing[:SUITE] (older than the candidate)")
      ->required();
  g->add_option("--candidate", a->candidate, "Candidate: RUN id or latest[:SUITE]")->capture_default_str();
  g->add_option("--policy", a->policy, "Gate policy JSON (see docs/gates.md; ci/gates/default.json)")->required();
  g->add_option("--db", a->db, "Results database (default: $KVGATE_DB or ./kvgate.db)");
  g->add_option("--junit", a->junit, "Write the checks as JUnit XML test cases to FILE");
  g->add_option("--report", a->report, "Write a Markdown report (for PR comments) to FILE");
  g->add_option("--pair-config", a->pair_configs,
                "BASE=CAND: compare the baseline run's config BASE with the candidate run's CAND (a pre-rollout "
                "comparison of two KV configs); repeatable");
  g->add_flag("--allow-missing-baseline", a->allow_missing_baseline,
              "When no baseline run matches, check absolute limits only and pass with a note (a suite's first night)");
  g->add_flag("--no-store", a->no_store,
              "Do not record the decisions in the database (for a read-only one; `--baseline passing` will not see "
              "this gate)");
  g->add_flag("--json", a->json, "Machine-readable output");
  g->callback([a, &ctx] { run_gate(*a, ctx); });
}

}  // namespace kvgate::harness
