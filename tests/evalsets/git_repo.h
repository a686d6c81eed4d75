#pragma once
// Builds a small git repository for importer tests: text edits, a binary file and a huge diff.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace kvgate::testing {

inline void write_file(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << content;
}

inline void git_in(const std::string& repo, const std::string& args) {
  const std::string cmd = "cd '" + repo + "' && git -c user.name=kvgate -c user.email=kvgate@example.invalid " +
                          "-c init.defaultBranch=main -c commit.gpgsign=false " + args + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// Three commits: an initial file, an edit of it (plus a binary file), and a huge file.
inline std::string make_test_repo(const std::string& name) {
  const std::string repo = ::testing::TempDir() + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(repo);
  std::filesystem::create_directories(repo);
  git_in(repo, "init -q");
  write_file(repo + "/src/calc.py", "def add(a, b):\n    return a + b\n\n\nLIMIT = 10\n");
  git_in(repo, "add -A && git -c user.name=kvgate -c user.email=kvgate@example.invalid commit -q -m 'Add calc'");
  write_file(repo + "/src/calc.py", "def add(a, b):\n    total = a + b\n    return total\n\n\nLIMIT = 25\n");
  write_file(repo + "/logo.bin", std::string("\x00\x01\x02\xff\xfe", 5) + std::string(100, '\0'));
  git_in(repo, "add -A && git -c user.name=kvgate -c user.email=kvgate@example.invalid commit -q -m 'Raise the limit'");
  std::string big;
  for (int i = 0; i < 3000; ++i) big += "line " + std::to_string(i) + " of a generated table\n";
  write_file(repo + "/data/big.txt", big);
  git_in(repo, "add -A && git -c user.name=kvgate -c user.email=kvgate@example.invalid commit -q -m 'Add big table'");
  return repo;
}

}  // namespace kvgate::testing
