// `kvgate evalset generate | from-git | from-text | validate`: build eval sets from the
// built-in generators or the user's own repositories and documents, and check item or suite
// files before a run.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/hash.h"
#include "evalsets/generate.h"
#include "evalsets/importers.h"
#include "evalsets/item.h"
#include "evalsets/suite.h"
#include "harness/commands.h"
#include "harness/eval/eval_plan.h"
#include "kernels/kv_config.h"

namespace kvgate::harness {
namespace {

namespace ev = kvgate::evalsets;
using nlohmann::json;

// Writes next to the target and renames, so an interrupted run never leaves half a file.
void write_output(const std::string& path, const std::string& bytes) {
  if (path.empty() || path == "-") {
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    return;
  }
  write_output_file(path, bytes);
}

json summarize(const std::vector<ev::EvalItem>& items) {
  std::map<std::string, size_t> domains;
  size_t min_tokens = 0, max_tokens = 0, total = 0, scored = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    ++domains[items[i].domain];
    const size_t t = ev::estimate_tokens(items[i]);
    min_tokens = i == 0 ? t : std::min(min_tokens, t);
    max_tokens = std::max(max_tokens, t);
    total += t;
    scored += ev::scored_targets(items[i]).size();
  }
  return {{"items", items.size()},
          {"hash", hex_u64(ev::evalset_hash(items))},
          {"domains", domains},
          {"scored_targets", scored},
          {"estimated_tokens", {{"min", min_tokens}, {"max", max_tokens}, {"mean", items.empty() ? 0 : total / items.size()}}}};
}

std::string summary_line(const json& s) {
  std::string domains;
  for (const auto& [d, n] : s["domains"].items()) domains += (domains.empty() ? "" : ", ") + d + " " + n.dump();
  return fmt::format("{} items ({}), {} scored targets, ~{}-{} tokens (mean ~{}), hash {}", s["items"].get<size_t>(),
                     domains, s["scored_targets"].get<size_t>(), s["estimated_tokens"]["min"].get<size_t>(),
                     s["estimated_tokens"]["max"].get<size_t>(), s["estimated_tokens"]["mean"].get<size_t>(),
                     s["hash"].get<std::string>());
}

// Items go to --out (or stdout); the summary goes to stdout with --json, else to stderr.
void emit(const std::vector<ev::EvalItem>& items, const std::string& out, bool as_json, json extra) {
  if (as_json && (out.empty() || out == "-")) throw_usage_error("--json prints a summary; give --out FILE for the items");
  write_output(out, ev::canonical_jsonl(items));
  json s = summarize(items);
  for (auto& [k, v] : extra.items()) s[k] = v;
  if (!out.empty() && out != "-") s["out"] = out;
  if (as_json) {
    std::printf("%s\n", s.dump().c_str());
  } else {
    std::string skipped;
    if (s.contains("skipped")) skipped = fmt::format("; skipped {}", s["skipped"].dump());
    std::fprintf(stderr, "%s%s%s\n", (out.empty() || out == "-") ? "" : (out + ": ").c_str(), summary_line(s).c_str(),
                 skipped.c_str());
  }
}

json skipped_json(const ev::ImportReport& r) {
  return {{"binary", r.skipped_binary},       {"huge", r.skipped_huge},   {"not_utf8", r.skipped_not_utf8},
          {"no_text_change", r.skipped_no_text_change}, {"short", r.skipped_short}, {"total", r.skipped()}};
}

bool looks_like_suite(const std::string& arg) {
  if (arg.ends_with(".jsonl")) return false;
  if (arg.ends_with(".json")) return true;
  return arg.find('/') == std::string::npos && !std::filesystem::exists(arg);  // a built-in suite name
}

void validate(const std::string& file, bool as_json) {
  if (!looks_like_suite(file)) {
    const std::vector<ev::EvalItem> items = ev::load_items(file);
    json s = summarize(items);
    s["file"] = file;
    if (as_json) std::printf("%s\n", s.dump().c_str());
    else std::printf("%s: ok, %s\n", file.c_str(), summary_line(s).c_str());
    return;
  }
  const ev::Suite suite = ev::load_suite(file);
  parse_suite_kv(suite);
  const std::vector<ev::EvalItem> items = ev::materialize_suite(suite);
  json s = summarize(items);
  s["suite"] = suite.name;
  s["file"] = suite.file;
  s["kv"] = suite.kv;
  s["ref"] = suite.ref;
  s["suite_hash"] = hex_u64(ev::suite_hash(suite, items));
  if (as_json) {
    std::printf("%s\n", s.dump().c_str());
  } else {
    std::string kv;
    for (const std::string& k : suite.kv) kv += (kv.empty() ? "" : ", ") + k;
    std::printf("%s: suite %s ok, kv [%s] vs %s, %s, suite hash %s\n", suite.file.c_str(), suite.name.c_str(), kv.c_str(),
                suite.ref.c_str(), summary_line(s).c_str(), s["suite_hash"].get<std::string>().c_str());
  }
}

}  // namespace

void add_evalset_commands(CLI::App& app, CommandContext& ctx) {
  CLI::App* evalset = app.add_subcommand("evalset", "Build and check eval sets (items JSONL) and suites");
  evalset->require_subcommand(1);

  struct GenerateArgs {
    std::string domain, out, depth;
    uint64_t seed = 1;
    size_t n = 10, tokens_min = 0, tokens_max = 0;
    bool json = false, sweep = false;
  };
  auto g = std::make_shared<GenerateArgs>();
  CLI::App* generate = evalset->add_subcommand("generate", "Generate a deterministic eval set for a built-in domain");
  generate->add_option("--domain", g->domain,
                       "tables, diffs, korean, policy, agentic, lookup, all; retrieval, long_tables, long_diffs, "
                       "long_policy, long_korean, long_agentic, long")
      ->required();
  generate->add_option("--seed", g->seed, "Seed; the same seed and options give byte-identical output")
      ->capture_default_str()
      ->check(seed_check());
  generate->add_option("--n", g->n, "Items per domain")->capture_default_str();
  generate->add_option("--tokens-min", g->tokens_min, "Approximate minimum prompt length in tokens (estimated from characters)");
  generate->add_option("--tokens-max", g->tokens_max, "Approximate maximum prompt length in tokens");
  generate->add_option("--depth", g->depth,
                       "Long domains: where the evidence sits, as a fraction of the document from 0 to 1, or a "
                       "comma-separated list (each document at every depth listed; default: each item draws one of 0, "
                       "0.1, ..., 1)");
  generate->add_flag("--sweep", g->sweep,
                     "Long domains: each document as a depth sweep, scored at every token after a short warm-up "
                     "instead of asked about");
  generate->add_option("--out", g->out, "Output JSONL file (default: stdout)");
  generate->add_flag("--json", g->json, "Print a JSON summary");
  generate->callback([g] {
    if ((g->tokens_min == 0) != (g->tokens_max == 0)) throw_usage_error("give both --tokens-min and --tokens-max, or neither");
    const std::vector<int> depths = g->depth.empty() ? std::vector<int>{} : ev::parse_depths(g->depth);
    const auto items =
        ev::generate(ev::GenerateOptions{g->domain, g->seed, g->n, {g->tokens_min, g->tokens_max}, depths, g->sweep});
    emit(items, g->out, g->json, json::object());
  });

  struct GitArgs {
    std::string repo, out;
    size_t max_commits = 50, max_diff_bytes = 12000;
    bool json = false;
  };
  auto gi = std::make_shared<GitArgs>();
  CLI::App* from_git = evalset->add_subcommand("from-git", "Build diff items from the commits of a git repository");
  from_git->add_option("--repo", gi->repo, "Path of the repository")->required();
  from_git->add_option("--max-commits", gi->max_commits, "Newest non-merge commits to read")->capture_default_str();
  from_git->add_option("--max-diff-bytes", gi->max_diff_bytes, "Skip a file diff larger than this")->capture_default_str();
  from_git->add_option("--out", gi->out, "Output JSONL file (default: stdout)");
  from_git->add_flag("--json", gi->json, "Print a JSON summary");
  from_git->callback([gi] {
    ev::FromGitOptions o;
    o.repo = gi->repo;
    o.max_commits = gi->max_commits;
    o.max_diff_bytes = gi->max_diff_bytes;
    const ev::ImportReport r = ev::items_from_git(o);
    if (r.items.empty()) throw_input_error(gi->repo + ": no usable text diffs in the last " + std::to_string(gi->max_commits) + " commits");
    emit(r.items, gi->out, gi->json, {{"commits", r.sources}, {"skipped", skipped_json(r)}});
  });

  struct TextArgs {
    std::string dir, out;
    size_t context_tokens = 1000;
    bool json = false, sweep = false;
  };
  auto t = std::make_shared<TextArgs>();
  CLI::App* from_text = evalset->add_subcommand("from-text", "Build continuation and fact items from .txt/.md documents");
  from_text->add_option("--dir", t->dir, "Folder searched recursively for .txt and .md files")->required();
  from_text->add_option("--context-tokens", t->context_tokens,
                        "Approximate context before each scored passage (with --sweep: each document's length)")
      ->capture_default_str();
  from_text->add_flag("--sweep", t->sweep,
                      "Depth sweeps: each file cut into documents of --context-tokens, each scored at every token "
                      "after a short warm-up");
  from_text->add_option("--out", t->out, "Output JSONL file (default: stdout)");
  from_text->add_flag("--json", t->json, "Print a JSON summary");
  from_text->callback([t] {
    ev::FromTextOptions o;
    o.dir = t->dir;
    o.context_tokens = t->context_tokens;
    o.sweep = t->sweep;
    const ev::ImportReport r = ev::items_from_text(o);
    if (r.items.empty())
      throw_input_error(t->dir + (o.sweep ? ": no documents (need .txt/.md files of at least 90% of --context-tokens)"
                                          : ": no items (need .txt/.md files with at least two paragraphs)"));
    emit(r.items, t->out, t->json, {{"documents", r.sources}, {"skipped", skipped_json(r)}});
  });

  struct ValidateArgs {
    std::string file;
    bool json = false;
  };
  auto v = std::make_shared<ValidateArgs>();
  CLI::App* validate_cmd = evalset->add_subcommand(
      "validate", "Check an items file (.jsonl) or a suite (.json or a built-in name such as smoke)");
  validate_cmd->add_option("file", v->file, "Items JSONL, suite JSON, or built-in suite name")->required();
  validate_cmd->add_flag("--json", v->json, "Print a JSON summary");
  validate_cmd->callback([v] { validate(v->file, v->json); });
  (void)ctx;
}

}  // namespace kvgate::harness
