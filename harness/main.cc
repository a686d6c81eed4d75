// kvgate's entry point: builds the command tree and maps every failure to the exit codes of
// the CLI contract (0 ok, 1 gate failed, 2 bad usage/input, 3 internal/environment). Errors go
// to stderr as one line, or with --json as one JSON object, and never longer than
// kMaxMessageBytes whatever a command put into them.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/interrupt.h"
#include "harness/build_info.h"
#include "harness/commands.h"
#include "runtime/blas_kernels.h"

namespace {

// A message is one line for a person: a few lines of terminal at most. The sites that quote
// user input cut it to kvgate::kEchoBytes; this is the backstop for any site that does not.
constexpr size_t kMaxMessageBytes = 1000;

std::string version_line() {
  return std::string("kvgate ") + kvgate::harness::kVersion + " (git " + kvgate::harness::kGitSha +
         ", backends: " + kvgate::harness::kBackends + ", OpenBLAS " + kvgate::runtime::blas_kernels_name() + ")";
}

// OpenBLAS chose its kernels when it loaded, before main; where it fell back to its generic ones
// on a CPU it does not know (runtime/blas_kernels.h), run again with the fitting set requested.
// Once: the variable is then set, and a user's own OPENBLAS_CORETYPE always stands. The same
// process id and arguments, so callers waiting on it or signalling it see no difference.
void use_fitting_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string wanted =
      kvgate::runtime::blas_kernels_to_request(kvgate::runtime::blas_kernels_name(), kvgate::runtime::host_cpu_vectors());
  if (wanted.empty()) return;
  // The binary's own path, not /proc/self/exe: the process keeps its name ("kvgate", not "exe")
  // in ps, top and pkill.
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  if (setenv("OPENBLAS_CORETYPE", wanted.c_str(), 1) != 0) return;
  execv(self, argv);
  // Only a failed exec returns: the generic kernels give the same kind of numbers, slower.
  std::fprintf(stderr, "kvgate: warning: could not restart with OpenBLAS's %s kernels; running on its generic ones\n",
               wanted.c_str());
}

bool wants_json(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--json") return true;
  }
  return false;
}

// Prints an error the way the caller asked for it; returns the exit code.
int report_error(bool as_json, kvgate::ErrorKind kind, const std::string& message, const char* plain_prefix = "error") {
  const std::string text = kvgate::echo_user_text(message, kMaxMessageBytes);
  const int code = kvgate::exit_code_of(kind);
  if (as_json) {
    const nlohmann::ordered_json j = {{"error", text}, {"kind", kvgate::error_kind_name(kind)}, {"exit_code", code}};
    // A message may quote bytes that are not UTF-8; they must not turn the error into a crash.
    std::fprintf(stderr, "%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
  } else {
    std::fprintf(stderr, "kvgate: %s: %s\n", plain_prefix, text.c_str());
  }
  return code;
}

// Edits (insert, delete, substitute, swap two neighbours) between a typed word and a command.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// When parsing failed, finds the first word that should have named a subcommand of a command
// group but names none (`kvgate evl`, `kvgate runs lst`) and says so, with the closest names.
// Group commands take no options of their own, so every word that is not a flag is a command
// name until a command without subcommands is reached.
std::optional<std::string> unknown_command_message(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  std::string path;  // the command words so far, e.g. "runs"
  const std::function<bool(CLI::App*)> every = [](CLI::App*) { return true; };
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") return std::nullopt;
    if (word.starts_with("-")) continue;
    const std::vector<CLI::App*> subcommands = current->get_subcommands(every);
    if (subcommands.empty()) return std::nullopt;  // a leaf: its positional arguments are its own
    const auto match = std::find_if(subcommands.begin(), subcommands.end(), [&](CLI::App* s) { return s->check_name(word); });
    if (match != subcommands.end()) {
      current = *match;
      path += (path.empty() ? "" : " ") + word;
      continue;
    }
    std::vector<std::string> names, closest;
    size_t best = std::string::npos;
    for (CLI::App* s : subcommands) {
      const std::string& name = s->get_name();
      names.push_back(name);
      const size_t distance = edit_distance(word, name);
      const bool close = distance <= std::max<size_t>(1, (name.size() + 1) / 3) || (word.size() >= 2 && name.starts_with(word));
      if (!close || distance > best) continue;
      if (distance < best) closest.clear();
      best = distance;
      closest.push_back(name);
    }
    std::sort(names.begin(), names.end());
    std::string message = "unknown command '" + kvgate::echo_user_text(word) + "'";
    if (!path.empty()) message += " for 'kvgate " + path + "'";
    const std::string prefix = path.empty() ? "" : path + " ";
    if (closest.empty()) {
      message += "; commands:";
      for (size_t k = 0; k < names.size(); ++k) message += (k ? ", " : " ") + names[k];
      return message;
    }
    message += "; did you mean ";
    for (size_t k = 0; k < closest.size(); ++k)
      message += (k == 0 ? "" : k + 1 == closest.size() ? " or " : ", ") + ("'" + prefix + closest[k] + "'");
    return message + "?";
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  use_fitting_blas_kernels(argv);
  CLI::App app{"kvgate: evaluation and regression gates for KV-cache quantization"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_line());
  kvgate::harness::CommandContext ctx;
  for (int i = 0; i < argc; ++i) ctx.command_line += (i ? " " : "") + std::string(argv[i]);
  const bool as_json = wants_json(argc, argv);
  try {
    kvgate::harness::add_model_commands(app, ctx);
    kvgate::harness::add_evalset_commands(app, ctx);
    kvgate::harness::add_kv_commands(app, ctx);
    kvgate::harness::add_bench_commands(app, ctx);
    kvgate::harness::add_tokenize_commands(app, ctx);
    kvgate::harness::add_runs_commands(app, ctx);
    kvgate::harness::add_generate_commands(app, ctx);
    kvgate::harness::add_perplexity_commands(app, ctx);
    kvgate::harness::add_eval_commands(app, ctx);
    kvgate::harness::add_workload_commands(app, ctx);
    kvgate::harness::add_gate_commands(app, ctx);
    kvgate::harness::add_report_commands(app, ctx);
    kvgate::harness::add_compare_commands(app, ctx);
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (const auto unknown = unknown_command_message(app, argc, argv))
      return report_error(as_json, kvgate::ErrorKind::usage, *unknown);
    if (as_json) return report_error(true, kvgate::ErrorKind::usage, e.what());
    // CLI11's own wording, capped like every other message.
    std::fprintf(stderr, "%s\nRun with --help for more information.\n", kvgate::echo_user_text(e.what(), kMaxMessageBytes).c_str());
    return 2;
  } catch (const kvgate::Interrupted& e) {
    // Not an error of the run: it stopped as asked, resumable, and exits as a shell reports a
    // process ended by that signal (128 + its number).
    const std::string text = kvgate::echo_user_text(e.what(), kMaxMessageBytes);
    if (as_json) {
      const nlohmann::ordered_json j = {{"error", text}, {"kind", "interrupted"}, {"exit_code", e.exit_code()}};
      std::fprintf(stderr, "%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    } else {
      std::fprintf(stderr, "kvgate: interrupted: %s\n", text.c_str());
    }
    return e.exit_code();
  } catch (const kvgate::Error& e) {
    return report_error(as_json, e.kind(), e.what());
  } catch (const std::bad_alloc&) {
    return report_error(as_json, kvgate::ErrorKind::environment, "out of memory");
  } catch (const std::exception& e) {
    return report_error(as_json, kvgate::ErrorKind::internal, e.what(), "internal error");
  }
  return ctx.exit_code;
}
