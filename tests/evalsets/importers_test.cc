#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"
#include "evalsets/importers.h"
#include "evalsets/item.h"
#include "tests/evalsets/git_repo.h"

namespace kvgate::evalsets {
namespace {

using kvgate::testing::make_test_repo;
using kvgate::testing::write_file;

TEST(FromGit, ItemsFromCommitsSkipBinaryAndHugeDiffs) {
  const std::string repo = make_test_repo("from_git");
  FromGitOptions o;
  o.repo = repo;
  o.max_diff_bytes = 4000;
  const ImportReport r = items_from_git(o);
  EXPECT_EQ(r.sources, 3u);
  EXPECT_EQ(r.skipped_binary, 1u);
  EXPECT_EQ(r.skipped_huge, 1u);
  ASSERT_EQ(r.items.size(), 2u);  // the edit of calc.py and the initial calc.py
  // Newest first: the "Raise the limit" commit's calc.py edit.
  const EvalItem& edit = r.items[0];
  EXPECT_EQ(edit.domain, "diffs");
  EXPECT_EQ(edit.meta["file"], "src/calc.py");
  EXPECT_NE(edit.messages[1].content.find("Commit: Raise the limit"), std::string::npos);
  EXPECT_NE(edit.messages[1].content.find("@@ -1,5 +1,6 @@"), std::string::npos) << edit.messages[1].content;
  EXPECT_EQ(edit.meta["question"], "added_lines");
  EXPECT_EQ(edit.answer, "    total = a + b\n    return total\nLIMIT = 25");
  const EvalItem& initial = r.items[1];
  EXPECT_EQ(initial.meta["question"], "post_patch_hunk");  // the two question kinds alternate
  EXPECT_EQ(initial.answer, "def add(a, b):\n    return a + b\n\n\nLIMIT = 10");
  // Items survive the loader's validation.
  EXPECT_EQ(parse_items(canonical_jsonl(r.items), "git.jsonl").size(), 2u);
  // Deterministic for the same repository state.
  EXPECT_EQ(canonical_jsonl(items_from_git(o).items), canonical_jsonl(r.items));
}

TEST(FromGit, NotARepositoryIsInputError) {
  const std::string dir = ::testing::TempDir() + "not_a_repo_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  FromGitOptions o;
  o.repo = dir + "/it's here";  // a quote in the path must not break the shell command
  std::filesystem::create_directories(o.repo);
  try {
    items_from_git(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("not a git repository"), std::string::npos) << e.what();
  }
}

TEST(FromGit, SplitsGitShowOutputPerFile) {
  const std::string show =
      "Subject line\n\ndiff --git a/x.c b/x.c\nindex 1..2 100644\n--- a/x.c\n+++ b/x.c\n@@ -1 +1 @@\n-a\n+b\n"
      "diff --git a/img.png b/img.png\nBinary files a/img.png and b/img.png differ\n"
      "diff --git a/gone.txt b/gone.txt\ndeleted file mode 100644\n--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n";
  const auto files = split_git_diff(show);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].path, "x.c");
  EXPECT_EQ(files[0].hunks, "@@ -1 +1 @@\n-a\n+b\n");
  EXPECT_TRUE(files[1].binary);
  EXPECT_EQ(files[2].path, "gone.txt");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

TEST(FromText, ContinuationAndFactItemsFollowTheRule) {
  const std::string dir = ::testing::TempDir() + "from_text_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::string doc = "# Handbook\r\n\r\n";
  for (int i = 0; i < 12; ++i)
    doc += "Section " + std::to_string(i) + " explains the rules for team " + std::to_string(i) +
           ". The budget for this team is 1,250,000 won per year. Requests are reviewed weekly.\n\n";
  write_file(dir + "/b/handbook.md", doc);
  write_file(dir + "/a.txt", "Only one paragraph here, so no item.\n");
  write_file(dir + "/ignored.pdf", "not text");
  FromTextOptions o;
  o.dir = dir;
  o.context_tokens = 80;
  const ImportReport r = items_from_text(o);
  EXPECT_EQ(r.sources, 2u);
  ASSERT_FALSE(r.items.empty());
  size_t facts = 0, continuations = 0;
  for (const EvalItem& item : r.items) {
    ASSERT_TRUE(item.has_text);
    ASSERT_EQ(item.spans.size(), 1u);
    const std::string scored = item.text.substr(item.spans[0].begin, item.spans[0].end - item.spans[0].begin);
    EXPECT_EQ(scored, item.answer);
    EXPECT_EQ(item.meta["file"], "b/handbook.md");
    EXPECT_EQ(item.text.find('\r'), std::string::npos);
    if (item.meta["rule"] == "fact") {
      ++facts;
      // Paragraph k (after the title) is "Section k-1 ...": its first number is k-1.
      EXPECT_EQ(scored, std::to_string(item.meta["paragraph"].get<int>() - 1));
    } else {
      ++continuations;
      EXPECT_EQ(item.text.substr(item.spans[0].begin - 2, 2), "\n\n");
      EXPECT_EQ(scored.rfind("Section ", 0), 0u);
    }
  }
  EXPECT_EQ(facts, continuations);
  EXPECT_EQ(parse_items(canonical_jsonl(r.items), "text.jsonl").size(), r.items.size());
  // A fact item's text ends at the end of the sentence holding the number.
  bool saw_section_fact = false;
  for (const EvalItem& item : r.items)
    if (item.meta["rule"] == "fact") {
      saw_section_fact = true;
      EXPECT_TRUE(item.text.ends_with("Section " + item.answer + " explains the rules for team " + item.answer + "."))
          << item.text;
    }
  EXPECT_TRUE(saw_section_fact);
}

TEST(FromText, InvalidUtf8NamesFileAndOffset) {
  const std::string dir = ::testing::TempDir() + "from_text_bad_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  write_file(dir + "/bad.txt", "fine\n\nbro\xc3ken\n");
  FromTextOptions o;
  o.dir = dir;
  try {
    items_from_text(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("bad.txt: at byte 9: invalid UTF-8"), std::string::npos) << e.what();
  }
}

TEST(FromText, SplitsParagraphsOnBlankLines) {
  const auto p = split_paragraphs("a\nb\n\n  \n\nc  \r\n\r\nd");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], "a\nb");
  EXPECT_EQ(p[1], "c");
  EXPECT_EQ(p[2], "d");
}

}  // namespace
}  // namespace kvgate::evalsets
