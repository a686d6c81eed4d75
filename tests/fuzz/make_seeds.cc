// Writes the fuzzer's seed corpus: small valid GGUF files, each exercising different parts of
// the format, so mutation starts from deep inside the parser instead of at the magic.
//   gguf_fuzz_seeds DIR
#include <cstdio>
#include <string>

#include "tests/runtime/gguf_writer.h"

using namespace kvgate::testing;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  auto save = [&](const char* name, const GgufWriter& w) { write_file(dir + "/" + name, w.finish()); };

  save("seed-empty.gguf", GgufWriter());
  save("seed-v2.gguf", GgufWriter(2));

  GgufWriter scalars;
  scalars.add<uint8_t>("u8", kU8, 1);
  scalars.add<int8_t>("i8", kI8, -1);
  scalars.add<uint16_t>("u16", kU16, 2);
  scalars.add<int16_t>("i16", kI16, -2);
  scalars.add<uint32_t>("u32", kU32, 3);
  scalars.add<int32_t>("i32", kI32, -3);
  scalars.add<float>("f32", kF32, 0.5f);
  scalars.add_bool("bool", true);
  scalars.add_string("string", "text");
  scalars.add<uint64_t>("u64", kU64, 4);
  scalars.add<int64_t>("i64", kI64, -4);
  scalars.add<double>("f64", kF64, 0.25);
  save("seed-scalars.gguf", scalars);

  GgufWriter arrays;
  arrays.add_array<uint32_t>("a.u32", kU32, {1, 2, 3});
  arrays.add_array<uint8_t>("a.bool", kBool, {0, 1});
  arrays.add_string_array("a.str", {"x", "yz", ""});
  ByteBuffer& nested = arrays.begin_kv("a.nested", kArray);
  nested.put<uint32_t>(kArray).put<uint64_t>(2);
  nested.put<uint32_t>(kI16).put<uint64_t>(1).put<int16_t>(-7);
  nested.put<uint32_t>(kString).put<uint64_t>(1).put_string("s");
  save("seed-arrays.gguf", arrays);

  GgufWriter tensors;
  tensors.set_alignment(64);
  tensors.add_tensor("f32", kTF32, {2, 2}, pattern_bytes(16, 1));
  tensors.add_tensor("q4_0", kTQ4_0, {32}, pattern_bytes(18, 2));
  tensors.add_tensor("bf16", kTBF16, {4, 1, 1, 2}, pattern_bytes(16, 3));
  save("seed-tensors.gguf", tensors);

  GgufWriter llama;
  add_tiny_llama_metadata(llama);
  llama.add<uint32_t>("llama.attention.key_length", kU32, 8);
  llama.add_tensor("token_embd.weight", kTQ8_0, {32, 5}, pattern_bytes(5 * 34, 4));
  llama.add_tensor("blk.0.attn_q.weight", kTQ4_1, {32, 32}, pattern_bytes(32 * 20, 5));
  llama.add_tensor("output_norm.weight", kTF32, {32}, pattern_bytes(128, 6));
  save("seed-llama.gguf", llama);
  return 0;
}
