// The runtime's weight decoders against gguf-py's (see tests/golden/make_weight_golden.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "runtime/weights.h"

namespace kvgate::runtime {
namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

nlohmann::json golden() {
  std::ifstream in(std::string(KVGATE_SOURCE_DIR) + "/tests/golden/weight_blocks.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

GgmlType type_named(const std::string& name) {
  for (const GgmlTypeTraits& t : ggml_type_table())
    if (name == t.name) return t.type;
  ADD_FAILURE() << "unknown type " << name;
  return GgmlType::F32;
}

TEST(Weights, BlockDecodersMatchGgufPy) {
  const nlohmann::json g = golden();
  ASSERT_EQ(g.size(), 7u);
  for (auto it = g.begin(); it != g.end(); ++it) {
    const std::vector<uint8_t> bytes = from_hex(it.value()["bytes_hex"].get<std::string>());
    const std::vector<float> want = it.value()["values"].get<std::vector<float>>();
    WeightMatrix w;
    w.type = type_named(it.key());
    w.rows = 1;
    w.cols = static_cast<int64_t>(want.size());
    w.row_bytes = bytes.size();
    w.data = bytes.data();
    std::vector<float> got(want.size());
    dequantize_weight_row(w, 0, got.data());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << it.key() << " element " << i;

    // The blockwise dot equals the dot with the decoded row up to float summation order.
    std::vector<float> x(want.size());
    double exact = 0.0, magnitude = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
      exact += static_cast<double>(x[i]) * want[i];
      magnitude += std::fabs(static_cast<double>(x[i]) * want[i]);
    }
    EXPECT_NEAR(dot_weight_row(w, 0, x.data()), exact, 1e-5 * magnitude + 1e-6) << it.key();
  }
}

TEST(Weights, FastMatvecAgreesWithBlockwiseDot) {
  const nlohmann::json g = golden();
  ThreadPool pool(2);
  for (auto it = g.begin(); it != g.end(); ++it) {
    const std::vector<uint8_t> bytes = from_hex(it.value()["bytes_hex"].get<std::string>());
    const size_t n_values = it.value()["values"].size();
    const int64_t block_elems = n_values == 3 * 256 ? 256 : 32;
    // Reinterpret the three blocks as a 3-row matrix, one block per row.
    WeightMatrix w;
    w.type = type_named(it.key());
    w.rows = 3;
    w.cols = block_elems;
    w.row_bytes = bytes.size() / 3;
    w.data = bytes.data();
    std::vector<float> x(static_cast<size_t>(block_elems)), y(3);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.3f * static_cast<float>(i)) - 0.2f;
    matvec(pool, w, x.data(), y.data());
    for (int r = 0; r < 3; ++r) {
      const float want = dot_weight_row(w, r, x.data());
      EXPECT_NEAR(y[static_cast<size_t>(r)], want, 1e-5f * (1.0f + std::fabs(want))) << it.key() << " row " << r;
    }
  }
}

TEST(Weights, MatmulPrefillAgreesWithDecodePath) {
  const nlohmann::json g = golden();
  const std::vector<uint8_t> bytes = from_hex(g["Q4_1"]["bytes_hex"].get<std::string>());
  // Three Q4_1 blocks as a 3 x 32 matrix.
  WeightMatrix w;
  w.type = GgmlType::Q4_1;
  w.rows = 3;
  w.cols = 32;
  w.row_bytes = 20;
  w.data = bytes.data();
  const int n = 5;
  std::vector<float> x(n * 32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i));
  ThreadPool pool(2);
  std::vector<float> y(n * 3), y1(3);
  matmul(pool, w, x.data(), n, y.data());
  for (int i = 0; i < n; ++i) {
    matmul(pool, w, x.data() + i * 32, 1, y1.data());
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(y[i * 3 + r], y1[r], 1e-5f);
  }
}

}  // namespace
}  // namespace kvgate::runtime
