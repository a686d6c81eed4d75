#pragma once
// Items built from the user's own material: commit diffs of a git repository and passages of
// .txt/.md documents. Rules for what is scored are in docs/evalsets.md.
#include <cstddef>
#include <string>
#include <vector>

#include "evalsets/item.h"

namespace kvgate::evalsets {

struct FromGitOptions {
  std::string repo;
  size_t max_commits = 50;
  size_t max_diff_bytes = 12000;  // a file diff larger than this is skipped as huge
  size_t max_files_per_commit = 4;
};

struct ImportReport {
  std::vector<EvalItem> items;
  size_t sources = 0;  // commits or documents read
  size_t skipped_binary = 0, skipped_huge = 0, skipped_not_utf8 = 0, skipped_no_text_change = 0, skipped_short = 0;
  size_t skipped() const {
    return skipped_binary + skipped_huge + skipped_not_utf8 + skipped_no_text_change + skipped_short;
  }
};

// Runs `git rev-list` / `git show` in the repository (no merges, newest first). A path that is
// not a repository with commits is an input error; a missing git is an environment error.
ImportReport items_from_git(const FromGitOptions& options);

// One file's part of `git show` output, split for item building.
struct FileDiff {
  std::string path;   // post-image path ("b/..."), or the pre-image one for deletions
  std::string hunks;  // from the first "@@" line to the end, '\n'-terminated lines
  bool binary = false;
};
std::vector<FileDiff> split_git_diff(const std::string& diff_text);

struct FromTextOptions {
  std::string dir;
  size_t context_tokens = 1000;  // estimated tokens of context before each scored passage
  size_t max_span_bytes = 1000;  // a longer continuation paragraph is cut at a sentence end
  // Depth sweeps instead (evalsets/sweep.h): each file cut into documents of context_tokens
  // estimated tokens, each scored from a short warm-up to its end.
  bool sweep = false;
};

// Reads every .txt/.md file under dir (recursively, in byte order of the relative path).
ImportReport items_from_text(const FromTextOptions& options);

// Splits a document into paragraphs (separated by blank lines; CRLF normalized).
std::vector<std::string> split_paragraphs(const std::string& text);

// Quotes a string for /bin/sh as one word.
std::string shell_quote(const std::string& s);

}  // namespace kvgate::evalsets
