// The latency yardstick (harness/eval/calibration.h): what it times and what it shares with
// kvgate, which is nothing. Its times themselves are never asserted (a benchmark's business:
// bench/latency-gate-bench).
#include "harness/eval/calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace kvgate::harness {
namespace {

// Each part's CPU time, every thread's, net of polling: positive and finite on any thread count.
TEST(Calibration, TimesBothPartsOnEveryThreadCount) {
  for (const int threads : {1, 2, 3}) {
    Calibration c(CalibrationShape{64, 2, 1 << 20, threads});
    for (int i = 0; i < 2; ++i) {
      const results::ItemCalibration s = c.sample();
      EXPECT_TRUE(std::isfinite(s.prefill_ms) && s.prefill_ms > 0) << threads;
      EXPECT_TRUE(std::isfinite(s.decode_ms) && s.decode_ms > 0) << threads;
    }
  }
}

// The text two runs must share for their calibrated latencies to compare: fixed by the shape
// and the threads, never by how fast the machine happens to be.
TEST(Calibration, WorkloadIsFixedByTheShapeAndThreads) {
  const std::string a = Calibration(CalibrationShape{576, 30, 100'000'000, 2}).workload();
  EXPECT_EQ(a, Calibration(CalibrationShape{576, 30, 100'000'000, 2}).workload());
  EXPECT_NE(a, Calibration(CalibrationShape{576, 30, 100'000'000, 1}).workload());
  EXPECT_NE(a, Calibration(CalibrationShape{960, 30, 100'000'000, 2}).workload());
  EXPECT_NE(a, Calibration(CalibrationShape{576, 32, 100'000'000, 2}).workload());
  EXPECT_NE(a.find("8x576x256"), std::string::npos) << a;
  EXPECT_NE(a.find("4 steps of 121 hand-offs"), std::string::npos) << "4 per layer and the output: " << a;
  EXPECT_NE(a.find("(64.0 MiB)"), std::string::npos) << "capped: " << a;
  EXPECT_NE(a.find("; 2 threads"), std::string::npos) << a;
  const std::string small = Calibration(CalibrationShape{576, 30, 8 << 20, 1}).workload();
  EXPECT_NE(small.find("(8.0 MiB)"), std::string::npos) << "as large as the weights: " << small;
  EXPECT_NE(small.find("; 1 thread"), std::string::npos) << small;
}

// A yardstick that ran on kvgate's kernels, SIMD dispatch or thread pool would slow down with
// them and hide the very regression it is there to show: its source includes nothing of kvgate
// but its own header, and that header only the results type it returns.
TEST(Calibration, SharesNoCodeWithKvgate) {
  for (const auto& [file, allowed] : {std::pair<std::string, std::string>{"harness/eval/calibration.cc",
                                                                         "harness/eval/calibration.h"},
                                      {"harness/eval/calibration.h", "results/store.h"}}) {
    std::ifstream in(std::string(KVGATE_SOURCE_DIR) + "/" + file);
    ASSERT_TRUE(in) << file;
    std::stringstream text;
    text << in.rdbuf();
    const std::string source = text.str();
    const std::regex include("#include \"([^\"]+)\"");
    int own = 0;
    for (auto it = std::sregex_iterator(source.begin(), source.end(), include); it != std::sregex_iterator(); ++it) {
      EXPECT_EQ((*it)[1].str(), allowed) << file << " includes kvgate's " << (*it)[1].str();
      ++own;
    }
    EXPECT_EQ(own, 1) << file;
  }
}

}  // namespace
}  // namespace kvgate::harness
