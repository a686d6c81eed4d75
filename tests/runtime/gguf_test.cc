#include "runtime/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "core/error.h"
#include "runtime/model_store.h"
#include "tests/runtime/gguf_writer.h"

namespace kvgate::runtime {
namespace {

using namespace kvgate::testing;

GgufFile parse(const std::vector<uint8_t>& bytes) { return GgufFile::parse(bytes, "test.gguf"); }

// Parsing must fail with an input error (exit 2) shaped "test.gguf: at byte N: ..." that
// mentions `problem`.
void expect_input_error(const std::vector<uint8_t>& bytes, const std::string& problem, int64_t at = -1) {
  try {
    parse(bytes);
    ADD_FAILURE() << "parsed, expected an error mentioning '" << problem << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.exit_code(), 2) << msg;
    EXPECT_EQ(msg.rfind("test.gguf: at byte ", 0), 0u) << msg;
    EXPECT_NE(msg.find(problem), std::string::npos) << msg;
    if (at >= 0) {
      EXPECT_NE(msg.find("at byte " + std::to_string(at) + ":"), std::string::npos) << msg;
    }
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

// A small file using every feature: each value type, arrays, tensors of three types.
GgufWriter feature_file() {
  GgufWriter w;
  add_tiny_llama_metadata(w);
  w.add<uint8_t>("t.u8", kU8, 200);
  w.add<int8_t>("t.i8", kI8, -100);
  w.add<uint16_t>("t.u16", kU16, 60000);
  w.add<int16_t>("t.i16", kI16, -30000);
  w.add<uint32_t>("t.u32", kU32, 4000000000u);
  w.add<int32_t>("t.i32", kI32, -2000000000);
  w.add<float>("t.f32", kF32, 1.5f);
  w.add_bool("t.bool", true);
  w.add_string("t.string", "h\xc3\xa9llo");
  w.add<uint64_t>("t.u64", kU64, 1ull << 40);
  w.add<int64_t>("t.i64", kI64, -(1ll << 40));
  w.add<double>("t.f64", kF64, -2.25);
  w.add_array<int16_t>("t.arr_i16", kI16, {-1, 2, -3});
  w.add_array<float>("t.arr_f32", kF32, {0.5f, 0.25f});
  w.add_array<uint8_t>("t.arr_bool", kBool, {1, 0, 1});
  w.add_array<uint32_t>("t.arr_empty", kU32, {});
  // [[1, 2], [3]]
  ByteBuffer& nested = w.begin_kv("t.arr_nested", kArray);
  nested.put<uint32_t>(kArray).put<uint64_t>(2);
  nested.put<uint32_t>(kU32).put<uint64_t>(2).put<uint32_t>(1).put<uint32_t>(2);
  nested.put<uint32_t>(kU32).put<uint64_t>(1).put<uint32_t>(3);
  w.add_tensor("f32.weight", kTF32, {4, 3}, pattern_bytes(4 * 3 * 4, 1));
  w.add_tensor("q4_1.weight", kTQ4_1, {64, 2}, pattern_bytes(2 * 2 * 20, 2));
  w.add_tensor("q8_0.weight", kTQ8_0, {32}, pattern_bytes(34, 3));
  return w;
}

TEST(Gguf, EveryScalarValueTypeReadsBack) {
  const std::vector<uint8_t> bytes = feature_file().finish();
  const GgufFile f = parse(bytes);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.find("t.u8")->type(), GgufValueType::u8);
  EXPECT_EQ(f.get_u32("t.u8"), 200u);
  EXPECT_EQ(f.get_i64("t.i8"), -100);
  EXPECT_EQ(f.get_u32("t.u16"), 60000u);
  EXPECT_EQ(f.get_i64("t.i16"), -30000);
  EXPECT_EQ(f.get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(f.get_i64("t.i32"), -2000000000);
  EXPECT_EQ(f.get_f32("t.f32"), 1.5f);
  EXPECT_EQ(f.get_bool("t.bool"), true);
  EXPECT_EQ(f.get_string("t.string"), "h\xc3\xa9llo");
  EXPECT_EQ(f.get_u64("t.u64"), 1ull << 40);
  EXPECT_EQ(f.get_i64("t.i64"), -(1ll << 40));
  EXPECT_EQ(f.get_f64("t.f64"), -2.25);
  EXPECT_EQ(f.find("t.f64")->type(), GgufValueType::f64);
  EXPECT_EQ(f.find("absent"), nullptr);
  EXPECT_FALSE(f.get_u32("absent").has_value());
  // Metadata keeps file order.
  EXPECT_EQ(f.metadata().front().first, "general.architecture");
  EXPECT_EQ(f.metadata().back().first, "t.arr_nested");
}

TEST(Gguf, ArraysOfScalarsStringsAndNestedArrays) {
  const std::vector<uint8_t> bytes = feature_file().finish();
  const GgufFile f = parse(bytes);
  const GgufArray* i16 = f.get_array("t.arr_i16");
  ASSERT_NE(i16, nullptr);
  EXPECT_EQ(i16->element_type, GgufValueType::i16);
  ASSERT_EQ(i16->count, 3u);
  EXPECT_EQ(GgufValue::array_float(*i16, 0), -1.0);
  EXPECT_EQ(GgufValue::array_uint(*i16, 1), 2u);
  EXPECT_FALSE(GgufValue::array_uint(*i16, 2).has_value());  // negative
  EXPECT_FALSE(GgufValue::array_uint(*i16, 3).has_value());  // out of range
  const GgufArray* f32 = f.get_array("t.arr_f32");
  EXPECT_EQ(GgufValue::array_float(*f32, 1), 0.25);
  const GgufArray* b = f.get_array("t.arr_bool");
  EXPECT_EQ(b->element_type, GgufValueType::boolean);
  EXPECT_EQ(GgufValue::array_uint(*b, 0), 1u);
  EXPECT_EQ(GgufValue::array_uint(*b, 1), 0u);
  EXPECT_EQ(f.get_array("t.arr_empty")->count, 0u);
  const GgufArray* tokens = f.get_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens->strings.size(), 5u);
  EXPECT_EQ(tokens->strings[1], "</s>");
  const GgufArray* nested = f.get_array("t.arr_nested");
  ASSERT_EQ(nested->arrays.size(), 2u);
  const GgufArray* first = nested->arrays[0].as_array();
  const GgufArray* second = nested->arrays[1].as_array();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(GgufValue::array_uint(*first, 1), 2u);
  EXPECT_EQ(second->count, 1u);
  EXPECT_EQ(GgufValue::array_uint(*second, 0), 3u);
}

TEST(Gguf, TensorsHaveShapesSizesAndAlignedDataPointers) {
  const std::vector<uint8_t> bytes = feature_file().finish();
  const GgufFile f = parse(bytes);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_section_offset() % 32, 0u);
  const GgufTensor* q41 = f.find_tensor("q4_1.weight");
  ASSERT_NE(q41, nullptr);
  EXPECT_EQ(q41->type, GgmlType::Q4_1);
  EXPECT_EQ(q41->n_dims, 2u);
  EXPECT_EQ(q41->dims[0], 64u);
  EXPECT_EQ(q41->dims[1], 2u);
  EXPECT_EQ(q41->dims[2], 1u);
  EXPECT_EQ(q41->n_elements, 128u);
  EXPECT_EQ(q41->n_bytes, 80u);
  EXPECT_EQ(q41->data, bytes.data() + q41->file_offset);
  EXPECT_EQ(q41->data[0], pattern_bytes(1, 2)[0]);
  for (const GgufTensor& t : f.tensors()) {
    EXPECT_EQ(t.file_offset % 32, 0u) << t.name;
    EXPECT_EQ(t.file_offset, f.data_section_offset() + t.data_offset) << t.name;
  }
  EXPECT_EQ(f.find_tensor("q8_0.weight")->n_bytes, 34u);
  EXPECT_EQ(f.find_tensor("f32.weight")->n_bytes, 48u);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(Gguf, GeneralAlignmentMovesDataSection) {
  GgufWriter w;
  w.set_alignment(64);
  w.add_tensor("a", kTF32, {3}, pattern_bytes(12, 1));
  w.add_tensor("b", kTF16, {5}, pattern_bytes(10, 2));
  const std::vector<uint8_t> bytes = w.finish();
  const GgufFile f = parse(bytes);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_section_offset() % 64, 0u);
  EXPECT_EQ(f.find_tensor("b")->data_offset, 64u);
  EXPECT_EQ(f.find_tensor("b")->data[0], pattern_bytes(1, 2)[0]);
}

TEST(Gguf, VersionTwoIsAccepted) {
  GgufWriter w(2);
  w.add<uint32_t>("k", kU32, 7);
  const std::vector<uint8_t> bytes = w.finish();
  const GgufFile f = parse(bytes);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_u32("k"), 7u);
}

TEST(Gguf, EmptyFileWithHeaderOnlyParses) {
  const std::vector<uint8_t> bytes = GgufWriter().finish();
  const GgufFile f = parse(bytes);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Gguf, TypeTableMatchesGgmlBlockLayouts) {
  std::set<std::string> names;
  for (const GgmlTypeTraits& t : ggml_type_table()) {
    EXPECT_TRUE(names.insert(t.name).second) << t.name;
    EXPECT_EQ(find_ggml_type(static_cast<uint32_t>(t.type)), &t) << t.name;
    EXPECT_TRUE(t.block_size == 1 || t.block_size == 32 || t.block_size == 256) << t.name;
    EXPECT_GT(t.block_bytes, 0u) << t.name;
    // No type stores more than 8 bytes (64 bits) per element.
    EXPECT_LE(t.block_bytes, 8u * t.block_size) << t.name;
  }
  // Spot checks against ggml's block structs (fp16 scales, packed nibbles).
  auto bytes_per_block = [](GgmlType t) { return find_ggml_type(static_cast<uint32_t>(t))->block_bytes; };
  EXPECT_EQ(bytes_per_block(GgmlType::Q4_0), 2u + 16u);
  EXPECT_EQ(bytes_per_block(GgmlType::Q4_1), 2u + 2u + 16u);
  EXPECT_EQ(bytes_per_block(GgmlType::Q5_0), 2u + 4u + 16u);
  EXPECT_EQ(bytes_per_block(GgmlType::Q5_1), 2u + 2u + 4u + 16u);
  EXPECT_EQ(bytes_per_block(GgmlType::Q8_0), 2u + 32u);
  EXPECT_EQ(bytes_per_block(GgmlType::Q4_K), 2u + 2u + 12u + 128u);
  EXPECT_EQ(bytes_per_block(GgmlType::Q6_K), 128u + 64u + 16u + 2u);
  EXPECT_EQ(bytes_per_block(GgmlType::IQ4_NL), 2u + 16u);
  EXPECT_EQ(bytes_per_block(GgmlType::BF16), 2u);
  EXPECT_EQ(find_ggml_type(4), nullptr);  // Q4_2, removed from ggml
  EXPECT_EQ(find_ggml_type(1000), nullptr);
}

TEST(Gguf, TypedGettersRejectWrongTypesNamingTheKey) {
  GgufWriter w;
  w.add_string("s", "text");
  w.add<int32_t>("neg", kI32, -1);
  w.add<uint64_t>("big", kU64, 1ull << 33);
  w.add<float>("f", kF32, 2.0f);
  const std::vector<uint8_t> bytes = w.finish();
  const GgufFile f = parse(bytes);
  for (const char* key : {"s", "neg", "big"}) {
    try {
      f.get_u32(key);
      ADD_FAILURE() << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find(std::string("'") + key + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(f.get_string("f"), Error);
  EXPECT_THROW(f.get_array("s"), Error);
  EXPECT_THROW(f.get_bool("f"), Error);
  EXPECT_EQ(f.get_u64("big"), 1ull << 33);
  EXPECT_EQ(f.get_f64("neg"), -1.0);  // integers convert to floating point
}

// ---- malformed files -------------------------------------------------------------------------

template <class T>
void patch(std::vector<uint8_t>& bytes, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + at, &v, sizeof(T));
}

TEST(GgufMalformed, WrongMagic) {
  std::vector<uint8_t> bytes = GgufWriter().finish();
  bytes[3] = 'X';
  expect_input_error(bytes, "not a GGUF file", 0);
  expect_input_error({'G', 'G'}, "truncated", 0);
}

TEST(GgufMalformed, UnsupportedVersions) {
  expect_input_error(GgufWriter(1).finish(), "unsupported GGUF version 1", 4);
  expect_input_error(GgufWriter(4).finish(), "unsupported GGUF version 4", 4);
  expect_input_error(GgufWriter(0x03000000).finish(), "big-endian", 4);
}

TEST(GgufMalformed, HugeTensorAndMetadataCountsAreRejectedBeforeAllocating) {
  std::vector<uint8_t> bytes = GgufWriter().finish();
  patch<uint64_t>(bytes, 8, 1ull << 60);
  expect_input_error(bytes, "tensor count 1152921504606846976 cannot fit", 8);
  bytes = GgufWriter().finish();
  patch<uint64_t>(bytes, 16, 1ull << 60);
  expect_input_error(bytes, "metadata count 1152921504606846976 cannot fit", 16);
  bytes = GgufWriter().finish();
  patch<uint64_t>(bytes, 16, ~0ull);
  expect_input_error(bytes, "metadata count", 16);
}

TEST(GgufMalformed, HugeArrayLengthIsRejectedBeforeAllocating) {
  for (uint32_t element : {kU8, kU64, kString, kArray}) {
    GgufWriter w;
    w.begin_kv("a", kArray).put<uint32_t>(element).put<uint64_t>(1ull << 60);
    // Offset of the count: header 24, key 8+1, value type 4, element type 4.
    expect_input_error(w.finish(), "cannot fit", 24 + 9 + 4 + 4);
  }
}

TEST(GgufMalformed, HugeStringLengths) {
  GgufWriter key_len;
  key_len.begin_kv("k", kU8).put<uint8_t>(1);
  std::vector<uint8_t> bytes = key_len.finish();
  patch<uint64_t>(bytes, 24, 1ull << 60);
  expect_input_error(bytes, "metadata key length 1152921504606846976 exceeds", 24);

  GgufWriter value_len;
  value_len.begin_kv("k", kString).put<uint64_t>(~0ull);
  expect_input_error(value_len.finish(), "string value length", 24 + 9 + 4);

  GgufWriter element_len;
  element_len.begin_kv("k", kArray).put<uint32_t>(kString).put<uint64_t>(1).put<uint64_t>(1000);
  expect_input_error(element_len.finish(), "array string length 1000 exceeds", 24 + 9 + 4 + 12);

  GgufWriter name_len;
  name_len.add_tensor("t", kTF32, {1}, pattern_bytes(4, 0));
  bytes = name_len.finish();
  patch<uint64_t>(bytes, 24, 1ull << 62);
  expect_input_error(bytes, "tensor name length", 24);
}

TEST(GgufMalformed, UnknownValueTypes) {
  GgufWriter w;
  w.begin_kv("k", 13).put<uint32_t>(0);
  expect_input_error(w.finish(), "unknown metadata value type 13", 24 + 9);
  GgufWriter a;
  a.begin_kv("k", kArray).put<uint32_t>(0xffffffffu).put<uint64_t>(0);
  expect_input_error(a.finish(), "unknown array element type 4294967295", 24 + 9 + 4);
}

TEST(GgufMalformed, UnknownTensorTypes) {
  for (uint32_t type : {4u, 5u, 31u, 1000u}) {
    GgufWriter w;
    w.add_tensor("t", type, {32}, pattern_bytes(64, 0));
    // Offset of the type: header 24, name 8+1, n_dims 4, one dim 8.
    expect_input_error(w.finish(), "unknown ggml type " + std::to_string(type), 24 + 9 + 4 + 8);
  }
}

TEST(GgufMalformed, DimensionOverflowAndCount) {
  GgufWriter overflow;
  overflow.add_tensor("t", kTF32, {1ull << 32, 1ull << 32}, {});
  expect_input_error(overflow.finish(), "element count overflows");
  GgufWriter bytes_overflow;
  bytes_overflow.add_tensor("t", kTF32, {1ull << 62}, {});
  expect_input_error(bytes_overflow.finish(), "byte size overflows");
  GgufWriter five;
  five.add_tensor("t", kTF32, {1, 1, 1, 1, 1}, pattern_bytes(4, 0));
  expect_input_error(five.finish(), "has 5 dimensions", 24 + 9);
  GgufWriter partial_block;
  partial_block.add_tensor("t", kTQ4_0, {48}, pattern_bytes(36, 0));
  expect_input_error(partial_block.finish(), "row length 48 is not a multiple of Q4_0's block size 32");
}

TEST(GgufMalformed, TensorDataPastTheEnd) {
  GgufWriter w;
  w.add_tensor("t", kTF32, {8}, pattern_bytes(32, 0));
  std::vector<uint8_t> bytes = w.finish();
  bytes.resize(bytes.size() - 1);
  expect_input_error(bytes, "tensor 't' data (32 bytes at data offset 0) extends past the end", 24);
  GgufWriter far;
  far.add_tensor_at("t", kTF32, {8}, 1ull << 40);
  expect_input_error(far.finish(), "extends past the end");
  GgufWriter wrap;
  wrap.add_tensor_at("t", kTF32, {8}, ~0ull - 31);
  expect_input_error(wrap.finish(), "extends past the end");
}

TEST(GgufMalformed, OverlappingTensors) {
  GgufWriter w;
  w.add_tensor_at("a", kTF32, {16}, 0);   // bytes [0, 64)
  w.add_tensor_at("b", kTF32, {16}, 32);  // bytes [32, 96)
  w.append_data(128);
  expect_input_error(w.finish(), "tensor 'b' data overlaps tensor 'a'");
  GgufWriter same;
  same.add_tensor_at("a", kTF32, {8}, 0);
  same.add_tensor_at("b", kTF32, {8}, 0);
  same.append_data(64);
  expect_input_error(same.finish(), "overlaps");
}

TEST(GgufMalformed, UnalignedTensorOffset) {
  GgufWriter w;
  w.add_tensor_at("t", kTF32, {1}, 4);
  w.append_data(64);
  expect_input_error(w.finish(), "data offset 4 is not a multiple of the alignment 32", 24 + 9 + 4 + 8 + 4);
}

TEST(GgufMalformed, DuplicateKeysAndTensorNames) {
  GgufWriter keys;
  keys.add<uint32_t>("k", kU32, 1);
  keys.add<uint32_t>("k", kU32, 2);
  expect_input_error(keys.finish(), "duplicate metadata key 'k'", 24 + 9 + 4 + 4);
  GgufWriter names;
  names.add_tensor("t", kTF32, {1}, pattern_bytes(4, 0));
  names.add_tensor("t", kTF32, {1}, pattern_bytes(4, 0));
  expect_input_error(names.finish(), "duplicate tensor name 't'");
}

TEST(GgufMalformed, BadAlignmentValues) {
  for (uint32_t alignment : {0u, 3u, 48u}) {
    GgufWriter w;
    w.add<uint32_t>("general.alignment", kU32, alignment);
    expect_input_error(w.finish(), "general.alignment must be a power of two");
  }
  GgufWriter s;
  s.add_string("general.alignment", "32");
  expect_input_error(s.finish(), "general.alignment must be a power of two integer, not a string");
}

TEST(GgufMalformed, BoolsOtherThanZeroOrOne) {
  GgufWriter w;
  w.add<uint8_t>("b", kBool, 2);
  expect_input_error(w.finish(), "bool value 2");
  GgufWriter a;
  a.add_array<uint8_t>("b", kBool, {0, 1, 7});
  expect_input_error(a.finish(), "bool array element 7");
}

TEST(GgufMalformed, DeepNestingAndEmptyNames) {
  GgufWriter deep;
  ByteBuffer& b = deep.begin_kv("k", kArray);
  for (int level = 0; level < 64; ++level) b.put<uint32_t>(kArray).put<uint64_t>(1);
  b.put<uint32_t>(kU8).put<uint64_t>(0);
  expect_input_error(deep.finish(), "nested deeper than");
  GgufWriter key;
  key.add<uint32_t>("", kU32, 1);
  expect_input_error(key.finish(), "empty metadata key", 24);
  GgufWriter tensor;
  tensor.add_tensor("", kTF32, {1}, pattern_bytes(4, 0));
  expect_input_error(tensor.finish(), "empty tensor name", 24);
}

TEST(GgufMalformed, MillionsOfNestedEmptyArraysAreCapped) {
  const uint64_t count = (uint64_t{1} << 20) + 1;
  GgufWriter w;
  ByteBuffer& b = w.begin_kv("k", kArray);
  b.put<uint32_t>(kArray).put<uint64_t>(count);
  for (uint64_t k = 0; k < count; ++k) b.put<uint32_t>(kU8).put<uint64_t>(0);
  expect_input_error(w.finish(), "more than 1048576 nested arrays", 24 + 9 + 4 + 4);
}

TEST(GgufMalformed, HostileKeysStayOnOneLine) {
  GgufWriter w;
  w.add<uint32_t>("a\nb", kU32, 1);
  w.add<uint32_t>("a\nb", kU32, 1);
  expect_input_error(w.finish(), "duplicate metadata key 'a\\x0ab'");
}

TEST(GgufMalformed, TruncationAtEveryByteIsAnInputError) {
  const std::vector<uint8_t> full = feature_file().finish();
  ASSERT_NO_THROW(parse(full));
  for (size_t len = 0; len < full.size(); ++len) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(len));
    try {
      GgufFile::parse(cut, "cut.gguf");
      ADD_FAILURE() << "truncation to " << len << " bytes parsed";
    } catch (const Error& e) {
      ASSERT_EQ(e.exit_code(), 2) << len << ": " << e.what();
      ASSERT_EQ(std::string(e.what()).rfind("cut.gguf: at byte ", 0), 0u) << e.what();
    }
  }
}

// ---- files on disk and the model architecture ------------------------------------------------

TEST(Gguf, OpenReadsFromDiskAndMissingFileIsInputError) {
  const std::string path = ::testing::TempDir() + "kvgate_gguf_open_test.gguf";
  write_file(path, feature_file().finish());
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.name(), path);
  EXPECT_EQ(f.tensors().size(), 3u);
  // Views point into the mapping, which must survive moving the GgufFile.
  GgufFile moved = std::move(f);
  EXPECT_EQ(moved.find_tensor("q8_0.weight")->data[0], pattern_bytes(1, 3)[0]);
  EXPECT_EQ(moved.get_string("general.name"), "tiny");
  std::remove(path.c_str());
  try {
    GgufFile::open(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

TEST(ModelArch, ReadsLlamaHyperParameters) {
  const std::vector<uint8_t> bytes = feature_file().finish();
  const ModelArch m = read_model_arch(parse(bytes));
  EXPECT_EQ(m.arch, "llama");
  EXPECT_EQ(m.name, "tiny");
  EXPECT_EQ(m.n_layers, 2u);
  EXPECT_EQ(m.n_heads, 4u);
  EXPECT_EQ(m.n_kv_heads, 2u);
  EXPECT_EQ(m.head_dim, 8u);  // embedding / heads: no key_length in the file
  EXPECT_EQ(m.head_dim_v, 8u);
  EXPECT_EQ(m.n_embd, 32u);
  EXPECT_EQ(m.n_ff, 64u);
  EXPECT_EQ(m.n_vocab, 5u);
  EXPECT_EQ(m.n_ctx_train, 256u);
  EXPECT_EQ(m.rope_base, 10000.0f);
  EXPECT_EQ(m.rms_eps, 1e-5f);
  EXPECT_EQ(m.kv_bytes_per_token(2.0), 2u * 2u * 2u * 8u * 2u);
}

TEST(ModelArch, ExplicitKeyLengthAndMissingOrInconsistentKeys) {
  GgufWriter w;
  add_tiny_llama_metadata(w);
  w.add<uint32_t>("llama.attention.key_length", kU32, 16);
  std::vector<uint8_t> bytes = w.finish();
  EXPECT_EQ(read_model_arch(parse(bytes)).head_dim, 16u);

  GgufWriter missing;
  missing.add_string("general.architecture", "llama");
  bytes = missing.finish();
  try {
    read_model_arch(parse(bytes));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("llama.block_count"), std::string::npos) << e.what();
  }

  GgufWriter odd;
  odd.add_string("general.architecture", "llama");
  odd.add<uint32_t>("llama.block_count", kU32, 1);
  odd.add<uint32_t>("llama.embedding_length", kU32, 32);
  odd.add<uint32_t>("llama.attention.head_count", kU32, 4);
  odd.add<uint32_t>("llama.attention.head_count_kv", kU32, 3);
  bytes = odd.finish();
  EXPECT_THROW(read_model_arch(parse(bytes)), Error);

  GgufWriter no_arch;
  bytes = no_arch.finish();
  EXPECT_THROW(read_model_arch(parse(bytes)), Error);
}

TEST(DefaultModel, ParsesWithExpectedShape) {
  const auto home = kvgate_home();
  if (check_cached_model(default_model(), home) != CacheState::verified)
    GTEST_SKIP() << "default model not fetched into " << home << "; run `kvgate model fetch` (scripts/test does)";
  const GgufFile f = GgufFile::open(cached_model_path(default_model(), home).string());
  const ModelArch m = read_model_arch(f);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(m.arch, "llama");
  EXPECT_EQ(m.n_layers, 30u);
  EXPECT_EQ(m.n_heads, 9u);
  EXPECT_EQ(m.n_kv_heads, 3u);
  EXPECT_EQ(m.head_dim, 64u);
  EXPECT_EQ(m.n_embd, 576u);
  EXPECT_EQ(m.n_vocab, 49152u);
  EXPECT_EQ(m.kv_bytes_per_token(2.0), 23040u);
  EXPECT_EQ(f.tensors().size(), 272u);
  uint64_t weight_bytes = 0;
  for (const GgufTensor& t : f.tensors()) weight_bytes += t.n_bytes;
  EXPECT_LE(weight_bytes, f.file_size() - f.data_section_offset());
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, GgmlType::Q4_1);
}

}  // namespace
}  // namespace kvgate::runtime
