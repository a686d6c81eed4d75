#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/npy.h"

namespace kvgate {
namespace {

std::vector<uint8_t> raw_npy(const std::string& dict, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.push_back(static_cast<uint8_t>(dict.size() & 0xff));
  out.push_back(static_cast<uint8_t>(dict.size() >> 8));
  out.insert(out.end(), dict.begin(), dict.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// Returns the error message; fails the test if parsing succeeds.
std::string parse_error(const std::vector<uint8_t>& bytes) {
  try {
    parse_npy(bytes.data(), bytes.size(), "dump.npy");
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "expected an input error";
  return "";
}

TEST(Npy, Float32RoundTripKeepsShapeAndBits) {
  const std::vector<int64_t> shape = {3, 2, 4};
  std::vector<float> data(24);
  for (size_t i = 0; i < data.size(); ++i) data[i] = std::sin(static_cast<float>(i)) * 1e3f;
  const std::vector<uint8_t> bytes = encode_npy(shape, data.data(), NpyDtype::f32);
  EXPECT_EQ((bytes.size() - 24 * 4) % 64, 0u) << "data must start 64-byte aligned as numpy writes it";
  const NpyArray a = parse_npy(bytes.data(), bytes.size(), "x.npy");
  EXPECT_EQ(a.shape, shape);
  EXPECT_EQ(a.dtype, NpyDtype::f32);
  EXPECT_EQ(a.data, data);
}

TEST(Npy, Float16IsDecodedToFloat32) {
  const std::vector<float> data = {1.0f, -2.5f, 0.333251953125f, 65504.0f};
  const std::vector<uint8_t> bytes = encode_npy({4}, data.data(), NpyDtype::f16);
  const NpyArray a = parse_npy(bytes.data(), bytes.size(), "x.npy");
  EXPECT_EQ(a.dtype, NpyDtype::f16);
  EXPECT_EQ(a.shape, std::vector<int64_t>{4});
  EXPECT_EQ(a.data, data);  // all exactly representable in binary16
}

TEST(Npy, AcceptsNumpyHeaderVariants) {
  // Exactly what numpy 1.x writes for np.zeros((2, 1), np.float32), double quotes, and a 1-D tuple.
  std::vector<uint8_t> payload(8, 0);
  const auto a_bytes = raw_npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }          \n", payload);
  const NpyArray a = parse_npy(a_bytes.data(), a_bytes.size(), "a");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 1}));
  const auto b_bytes = raw_npy("{\"shape\": (2,), \"descr\": \"<f4\"}\n", payload);
  const NpyArray b = parse_npy(b_bytes.data(), b_bytes.size(), "b");
  EXPECT_EQ(b.shape, std::vector<int64_t>{2});
}

TEST(Npy, WriteThenReadFile) {
  const std::string path = ::testing::TempDir() + "kvgate_npy_test.npy";
  const std::vector<float> data = {1, 2, 3, 4, 5, 6};
  write_npy(path, {2, 3}, data.data());
  const NpyArray a = read_npy(path);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.data, data);
  std::remove(path.c_str());
}

TEST(Npy, MissingFileIsInputError) {
  try {
    read_npy("/nonexistent/kvgate/dump.npy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/kvgate/dump.npy"), std::string::npos);
  }
}

TEST(Npy, MalformedFilesNameFileAndOffset) {
  std::vector<uint8_t> eight(8, 0);
  EXPECT_NE(parse_error({'P', 'K', 3, 4}).find("dump.npy: at byte 0: not a .npy"), std::string::npos);
  auto bad_version = raw_npy("{'descr': '<f4', 'shape': (2,)}", eight);
  bad_version[6] = 9;
  EXPECT_NE(parse_error(bad_version).find("at byte 6"), std::string::npos);

  auto huge_header = raw_npy("{'descr': '<f4', 'shape': (2,)}", eight);
  huge_header[8] = 0xff;
  huge_header[9] = 0xff;
  EXPECT_NE(parse_error(huge_header).find("at byte 8: header length 65535 runs past"), std::string::npos);

  EXPECT_NE(parse_error(raw_npy("{'descr': '<f8', 'shape': (1,)}", eight)).find("unsupported dtype '<f8'"), std::string::npos);
  EXPECT_NE(parse_error(raw_npy("{'descr': '>f4', 'shape': (2,)}", eight)).find("unsupported dtype"), std::string::npos);
  EXPECT_NE(parse_error(raw_npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,)}", eight)).find("Fortran"),
            std::string::npos);
  EXPECT_NE(parse_error(raw_npy("{'descr': '<f4'}", eight)).find("missing 'shape'"), std::string::npos);
  // The bad character '-' is at header byte 27, i.e. file byte 10 + 27.
  EXPECT_NE(parse_error(raw_npy("{'descr': '<f4', 'shape': (-2,)}", eight)).find("at byte 37:"), std::string::npos);
  EXPECT_NE(parse_error(raw_npy("{'descr': '<f4', 'shape': (2,", eight)).find("malformed .npy header"), std::string::npos);
  EXPECT_NE(parse_error(raw_npy("{'descr': '<f4', 'shape': (2,), 'extra': 1}", eight)).find("unexpected header key 'extra'"),
            std::string::npos);
}

TEST(Npy, TruncatedOrOversizedDataIsRejectedBeforeAllocating) {
  const std::vector<uint8_t> seven(7, 0);
  const std::string dict = "{'descr': '<f4', 'shape': (2,)}";
  EXPECT_NE(parse_error(raw_npy(dict, seven)).find("at byte " + std::to_string(10 + dict.size()) + ": data is truncated"),
            std::string::npos);
  // A shape whose product overflows 64 bits must be caught, not wrapped around.
  EXPECT_NE(parse_error(raw_npy("{'descr': '<f4', 'shape': (4294967296, 4294967296, 16)}", std::vector<uint8_t>(8, 0)))
                .find("data is truncated"),
            std::string::npos);
  EXPECT_NE(parse_error(raw_npy(dict, std::vector<uint8_t>(12, 0))).find("4 unexpected trailing bytes"), std::string::npos);
}

TEST(Npy, ZeroSizedArrayIsValid) {
  const auto bytes = raw_npy("{'descr': '<f4', 'shape': (0, 64)}", {});
  const NpyArray a = parse_npy(bytes.data(), bytes.size(), "empty.npy");
  EXPECT_EQ(a.elements(), 0);
  EXPECT_TRUE(a.data.empty());
}

}  // namespace
}  // namespace kvgate
