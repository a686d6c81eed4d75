// evalset from-git: one item per changed text file of a commit (up to a few per commit),
// asking for the lines the commit added or for the first hunk as it reads after the commit.
#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "evalsets/importers.h"
#include "evalsets/unified_diff.h"
#include "evalsets/utf8.h"

namespace kvgate::evalsets {
namespace {

// A commit whose `git show` output is larger than this is not read further (skipped as huge),
// so a repository with giant vendored commits cannot make the importer allocate without bound.
constexpr size_t kMaxShowBytes = 8u << 20;

struct CommandOutput {
  std::string text;
  int exit_status = -1;
  bool truncated = false;
};

CommandOutput run_command(const std::string& command, size_t max_bytes) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw_environment_error("cannot start: " + command);
  CommandOutput out;
  char buffer[65536];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) {
    if (out.text.size() + got > max_bytes) {
      out.truncated = true;
      break;
    }
    out.text.append(buffer, got);
  }
  const int status = ::pclose(pipe);
  out.exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return out;
}

std::string git(const std::string& repo) {
  return "LC_ALL=C git -c color.ui=never -c core.quotepath=off -C " + shell_quote(repo) + " ";
}

bool is_hex_sha(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" : "") + lines[i];
  return out;
}

}  // namespace

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

std::vector<FileDiff> split_git_diff(const std::string& diff_text) {
  std::vector<FileDiff> files;
  bool in_hunks = false;
  for (const std::string& line : split_lines(diff_text)) {
    if (line.rfind("diff --git ", 0) == 0) {
      files.emplace_back();
      in_hunks = false;
      continue;
    }
    if (files.empty()) continue;
    FileDiff& f = files.back();
    if (!in_hunks) {
      if (line.rfind("Binary files ", 0) == 0 || line == "GIT binary patch") f.binary = true;
      else if (line.rfind("+++ b/", 0) == 0) f.path = line.substr(6);
      else if (line.rfind("--- a/", 0) == 0 && f.path.empty()) f.path = line.substr(6);
      else if (line.rfind("@@ ", 0) == 0) in_hunks = true;
      if (!in_hunks) continue;
    }
    f.hunks += line + "\n";
  }
  return files;
}

ImportReport items_from_git(const FromGitOptions& options) {
  if (options.max_commits == 0) throw_usage_error("--max-commits must be at least 1");
  const CommandOutput version = run_command("git --version 2>/dev/null", 4096);
  if (version.exit_status != 0) throw_environment_error("git is not installed or not on PATH");
  const CommandOutput head = run_command(git(options.repo) + "rev-parse --verify -q HEAD 2>/dev/null", 4096);
  if (head.exit_status != 0) throw_input_error(options.repo + ": not a git repository with at least one commit");
  const CommandOutput list = run_command(git(options.repo) + "rev-list --no-merges --max-count=" +
                                             std::to_string(options.max_commits) + " HEAD 2>/dev/null",
                                         1u << 24);
  if (list.exit_status != 0) throw_environment_error(options.repo + ": git rev-list failed");
  ImportReport report;
  for (const std::string& sha : split_lines(list.text)) {
    if (!is_hex_sha(sha)) continue;
    const CommandOutput show = run_command(
        git(options.repo) + "show --no-ext-diff --no-renames --no-textconv -U3 --format=%s " + sha + " 2>/dev/null",
        kMaxShowBytes);
    ++report.sources;
    if (show.truncated) {
      ++report.skipped_huge;
      continue;
    }
    if (show.exit_status != 0) throw_environment_error(options.repo + ": git show " + sha + " failed");
    const size_t first_newline = show.text.find('\n');
    const std::string subject = show.text.substr(0, first_newline);
    size_t used = 0;
    const std::vector<FileDiff> files = split_git_diff(show.text);
    for (size_t f = 0; f < files.size() && used < options.max_files_per_commit; ++f) {
      const FileDiff& file = files[f];
      if (file.binary) { ++report.skipped_binary; continue; }
      if (file.hunks.empty()) { ++report.skipped_no_text_change; continue; }
      if (file.hunks.size() > options.max_diff_bytes) { ++report.skipped_huge; continue; }
      if (find_invalid_utf8(file.hunks) != std::string::npos || find_invalid_utf8(subject) != std::string::npos) {
        ++report.skipped_not_utf8;
        continue;
      }
      std::vector<std::string> added, first_hunk_after;
      int hunk_count = 0;
      for (const std::string& line : split_lines(file.hunks)) {
        if (line.rfind("@@", 0) == 0) { ++hunk_count; continue; }
        if (line.empty() || line[0] == '\\') continue;  // "\ No newline at end of file"
        if (line[0] == '+') added.push_back(line.substr(1));
        if (hunk_count == 1 && line[0] != '-') first_hunk_after.push_back(line.substr(1));
      }
      // A scored span of only whitespace says nothing about the model.
      const bool has_added = !join_lines(added).empty() &&
                             join_lines(added).find_first_not_of(" \t\n") != std::string::npos;
      // Alternate the two questions over the items made so far, so both kinds appear.
      const bool ask_added = has_added && report.items.size() % 2 == 0;
      std::string question, answer;
      if (ask_added) {
        question = "List the lines this commit adds to " + file.path + ", exactly, in order, one per line.";
        answer = join_lines(added);
      } else {
        question = "Write the region of " + file.path + " covered by the first hunk exactly as it reads after the commit.";
        answer = join_lines(first_hunk_after);
      }
      if (answer.find_first_not_of(" \t\n") == std::string::npos) { ++report.skipped_no_text_change; continue; }
      EvalItem item;
      item.id = "git-" + sha.substr(0, 12) + "-" + std::to_string(f);
      item.domain = "diffs";
      const std::string user = "Commit: " + subject + "\nFile: " + file.path + "\n\n```diff\n--- a/" + file.path +
                               "\n+++ b/" + file.path + "\n" + file.hunks + "```\n\nQuestion: " + question +
                               "\nAnswer with the exact text only.";
      item.messages = {Message{"system", "You are a careful code reviewer. Reply with the exact text only.", {}, {}, {}},
                       Message{"user", user, {}, {}, {}}, Message{"assistant", answer, {}, {}, {}}};
      item.score = ScoreKind::answer;
      item.answer = answer;
      item.has_answer = true;
      item.meta = {{"source", "git"}, {"commit", sha}, {"file", file.path},
                   {"question", ask_added ? "added_lines" : "post_patch_hunk"}};
      report.items.push_back(std::move(item));
      ++used;
    }
  }
  return report;
}

}  // namespace kvgate::evalsets
