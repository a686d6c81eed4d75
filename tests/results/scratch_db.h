#pragma once
// Test helper: a database file of its own per test (process id and test name in the name, so
// parallel ctest runs never share one), removed with its WAL files before and after the test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace kvgate::testing {

class ScratchDbTest : public ::testing::Test {
 protected:
  explicit ScratchDbTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = ::testing::TempDir() + prefix_ + std::to_string(::getpid()) + "_" + info->name() + ".db";
    remove_db();
  }
  void TearDown() override { remove_db(); }
  void remove_db() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path_ + suffix).c_str());
  }
  std::string prefix_;
  std::string path_;
};

}  // namespace kvgate::testing
