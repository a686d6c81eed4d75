#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "core/rng.h"
#include "kernels/kv_config.h"

namespace kvgate::kernels {
namespace {

// Runs `fn`, expects a usage error (exit 2) whose message contains every string in `needles`.
template <class Fn>
void expect_usage_error(Fn fn, std::vector<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected a usage error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

void expect_spec_error(const std::string& spec, std::vector<std::string> needles = {}) {
  SCOPED_TRACE(spec);
  expect_usage_error([&] { parse_kv_config(spec); }, std::move(needles));
}

TEST(KvConfig, NoneIsF16OnBothSides) {
  const KvConfig c = parse_kv_config("none");
  EXPECT_EQ(c.name, "none");
  EXPECT_EQ(c.key.format, find_format("f16"));
  EXPECT_EQ(c.value.format, find_format("f16"));
  EXPECT_TRUE(c.overrides.empty());
  EXPECT_EQ(c.canonical(), "f16/f16");
  EXPECT_EQ(parse_kv_config("f16"), c);
  EXPECT_EQ(parse_kv_config("auto"), c);
  EXPECT_EQ(parse_kv_config(" F16/float16 "), c);
}

TEST(KvConfig, CanonicalStringAndHashAreStable) {
  // Hard-coded so that a change to the canonical form (which keys stored results) is noticed.
  const KvConfig c = parse_kv_config("bf16/f16@keep=2@5=f32");
  EXPECT_EQ(c.canonical(), "bf16/f16@0-1=f16/f16@-2--1=f16/f16@5=f32/f32");
  EXPECT_EQ(c.hash(), xxhash64(c.canonical()));
  EXPECT_EQ(hex_u64(c.hash()), hex_u64(xxhash64(std::string("bf16/f16@0-1=f16/f16@-2--1=f16/f16@5=f32/f32"))));
  EXPECT_EQ(hex_u64(parse_kv_config("none").hash()), "7b493f66068cd35f");
}

TEST(KvConfig, KeepExpandsToFirstAndLastLayers) {
  const KvConfig a = parse_kv_config("bf16@keep=2");
  const KvConfig b = parse_kv_config("bf16/bf16@0-1=f16@-2--1=f16");
  EXPECT_EQ(a, b);
  const int n = 10;
  for (int layer = 0; layer < n; ++layer) {
    const bool kept = layer < 2 || layer >= n - 2;
    EXPECT_EQ(a.key_for_layer(layer, n).format->name, kept ? "f16" : "bf16") << layer;
    EXPECT_EQ(a.value_for_layer(layer, n).format->name, kept ? "f16" : "bf16") << layer;
  }
  EXPECT_EQ(parse_kv_config("bf16@keep=0"), parse_kv_config("bf16"));
}

TEST(KvConfig, LaterOverridesWin) {
  const KvConfig c = parse_kv_config("bf16@0-3=f16@2=f32/f16");
  EXPECT_EQ(c.key_for_layer(1, 8).format->name, "f16");
  EXPECT_EQ(c.key_for_layer(2, 8).format->name, "f32");
  EXPECT_EQ(c.value_for_layer(2, 8).format->name, "f16");
  EXPECT_EQ(c.key_for_layer(4, 8).format->name, "bf16");
  // A range past the model's end covers only the layers that exist.
  const KvConfig far = parse_kv_config("bf16@-100--1=f32");
  for (int layer = 0; layer < 4; ++layer) EXPECT_EQ(far.key_for_layer(layer, 4).format->name, "f32");
}

TEST(KvConfig, BytesPerTokenHonoursOverrides) {
  const KvShape shape{10, 4, 64};
  // f16: 2 bytes per element, K and V, 10 layers, 4 heads.
  EXPECT_DOUBLE_EQ(parse_kv_config("f16").bytes_per_token(shape), 2.0 * 2 * 10 * 4 * 64);
  EXPECT_DOUBLE_EQ(parse_kv_config("f16").bits_per_element(shape), 16.0);
  // f32 keys everywhere except layers 0-1 and 8-9 (f16).
  const KvConfig c = parse_kv_config("f32/f16@keep=2");
  const double expected = 4 * 64 * (6 * (4.0 + 2.0) + 4 * (2.0 + 2.0));
  EXPECT_DOUBLE_EQ(c.bytes_per_token(shape), expected);
  EXPECT_DOUBLE_EQ(c.bits_per_element(shape), 8.0 * expected / (2.0 * 10 * 4 * 64));
  expect_usage_error([&] { c.bytes_per_token(KvShape{0, 4, 64}); }, {"n_layers"});
}

TEST(KvConfig, CanonicalRoundTripsForEveryRegisteredFormat) {
  for (const FormatInfo* f : all_formats()) {
    SCOPED_TRACE(std::string(f->name));
    std::string spec;
    if (f->for_keys && f->for_values) spec = std::string(f->name);
    else if (f->for_keys) spec = std::string(f->name) + "/f16";
    else spec = "f16/" + std::string(f->name);
    const KvConfig c = parse_kv_config(spec + "@-3=f32@1-2=bf16");
    EXPECT_EQ(parse_kv_config(c.canonical()), c);
    EXPECT_EQ(parse_kv_config(c.canonical()).canonical(), c.canonical());
  }
}

TEST(KvConfig, EngineAliasesMapToTheirFormats) {
  const std::string boundary = "@0-1=f16/f16@-2--1=f16/f16";
  const std::pair<const char*, std::string> cases[] = {
      {"fp8", "fp8_e4m3/fp8_e4m3"},
      {"FP8_E5M2", "fp8_e5m2/fp8_e5m2"},
      {"int4", "int4_pth/int4_pth"},
      {"int8_per_token_head", "int8_pth/int8_pth"},
      {"fp8_per_token_head", "fp8_pth/fp8_pth"},
      {"q8_0/q4_0", "q8_0:rot=wht/q4_0:rot=wht"},
      {"q4_0:rot", "q4_0:rot/q4_0:rot"},
      {"q4_0:rot=none/q8_0", "q4_0:rot=none/q8_0:rot=wht"},
      {"Q4_1:ROT=WHT/f16", "q4_1:rot=wht/f16"},
      {"mxfp4", "mxfp4/mxfp4"},
      {"nvfp4_4over6", "nvfp4_4over6/nvfp4_4over6"},
      {"fp8_e4m3:scale=0.5", "fp8_e4m3:scale=0.5/fp8_e4m3:scale=0.5"},
      {"fp8:scale=0.125/f16", "fp8_e4m3:scale=0.125/f16"},
      {"tq4/4", "tq4/u4"},
      {"tq3/4", "tq3/u4"},
      {"tq4:rot=qr/u4", "tq4:rot=qr/u4"},
      {"tq4:nc/4@keep=2", "tq4:nc/u4" + boundary},
      {"k8v4", "fp8_e4m3/u4"},
      {"turboquant_k8v4", "fp8_e4m3/u4" + boundary},
      {"turboquant_4bit_nc", "tq4:nc/u4" + boundary},
      {"turboquant_k3v4_nc", "tq3:nc/u4" + boundary},
      {"turboquant_3bit_nc", "tq3:nc/u3" + boundary},
      {"turboquant_3bit_nc@5=q8_0", "tq3:nc/u3" + boundary + "@5=q8_0:rot=wht/q8_0:rot=wht"},
      {"fp8@kv-cache-dtype-skip-layers=0:1:29", "fp8_e4m3/fp8_e4m3@0=f16/f16@1=f16/f16@29=f16/f16"},
      {"fp8@kv_cache_dtype_skip_layers=3", "fp8_e4m3/fp8_e4m3@3=f16/f16"},
      {"q8_0@engine=llama.cpp", "q8_0:rot=wht/q8_0:rot=wht@engine=llama.cpp"},
      {"q4_0:rot=none@engine=llama.cpp-cuda@keep=1", "q4_0:rot=none/q4_0:rot=none@0=f16/f16@-1=f16/f16@engine=llama.cpp-cuda"},
      {"fp8@engine=vllm-fa3", "fp8_e4m3/fp8_e4m3@engine=vllm-fa3"},
      {"fp8@engine=exact", "fp8_e4m3/fp8_e4m3"},
      {"kivi4", "kivi4_k/kivi4_v"},
  };
  for (const auto& [spec, canonical] : cases) {
    SCOPED_TRACE(spec);
    const KvConfig c = parse_kv_config(spec);
    EXPECT_EQ(c.canonical(), canonical);
    EXPECT_EQ(parse_kv_config(c.canonical()), c);
    EXPECT_EQ(c.hash(), xxhash64(canonical));
  }
  EXPECT_EQ(parse_kv_config("fp8:scale=0.5").key.options.scale, 0.5f);
  EXPECT_EQ(parse_kv_config("nvfp4:scale=0.25/f16").key.options.scale, 0.25f);
  EXPECT_EQ(parse_kv_config("nvfp4:scale=0.25").canonical(), "nvfp4:scale=0.25/nvfp4:scale=0.25");
  EXPECT_EQ(parse_kv_config("q4_0:rot").key.options.rotation, Rotation::hadamard);
  EXPECT_TRUE(parse_kv_config("turboquant_4bit_nc").key.options.norm_correction);
}

TEST(KvConfig, PresetSizesUseEachLayersCodec) {
  // turboquant_4bit_nc on 6 layers: layers 0, 1, 4, 5 stay f16; 2 and 3 use tq4 keys, u4 values.
  const KvShape shape{6, 2, 128};
  const double tq_layer = make_codec("tq4", 128)->bytes_per_token() + make_codec("u4", 128)->bytes_per_token();
  const double f16_layer = 2.0 * 2 * 128;
  const KvConfig c = parse_kv_config("turboquant_4bit_nc");
  EXPECT_DOUBLE_EQ(c.bytes_per_token(shape), 2 * (2 * tq_layer + 4 * f16_layer));
  EXPECT_EQ(make_codec("tq4", 128)->group_bytes(), 66u);
  // KIVI keys count per token of their 32-token group.
  EXPECT_DOUBLE_EQ(parse_kv_config("kivi2").bytes_per_token(KvShape{1, 1, 128}), 48.0 + 48.0);
}

TEST(KvConfig, ContradictoryFormatSpecsAreRejected) {
  for (const FormatInfo* f : all_formats()) {
    if (!f->for_keys) expect_spec_error(std::string(f->name), {"value-only", "key formats: f32, f16"});
    if (!f->for_values) expect_spec_error("f16/" + std::string(f->name), {"key-only", "value formats: f32, f16"});
  }
  expect_spec_error("kivi2_v/kivi2_v", {"value-only"});
  expect_spec_error("tq4", {"key-only"});
  expect_spec_error("4/4", {"unknown format '4'"});
  expect_spec_error("q4_0:rot=qr", {"valid rotations"});
  expect_spec_error("fp8:scale=0", {"positive"});
  expect_spec_error("fp8:scale=abc", {"positive"});
  expect_spec_error("fp8:scale=1:scale=2", {"twice"});
  expect_spec_error("q8_0:scale=2", {"does not apply"});
  expect_spec_error("turboquant_4bit_nc/4", {"whole key/value config"});
  expect_spec_error("k8v4:nc", {"whole key/value config"});
  expect_spec_error("tq4/4:nc", {"does not apply"});
  expect_spec_error("q4_0:seed=5", {"only matters with rot"});
  EXPECT_EQ(parse_kv_config("q4_0:rot:seed=5").key.options.seed, 5u);
}

// Random strings over the grammar's alphabet: each either parses (and then round-trips through
// its canonical form) or is a usage error; nothing else may escape.
TEST(KvConfig, RandomSpecsParseOrFailCleanly) {
  const std::string pieces[] = {"f16", "q4_0", "q8_0", "fp8", "tq4", "tq2.5", "u4", "4", "kivi2", "kivi2_k",
                                "kivi2_v", "k8v4", "turboquant_4bit_nc", "none", "/", "/", "@", "@", ":", ":rot",
                                ":rot=qr", ":nc", ":scale=0.5", ":seed=0x1f", ":outliers=8", ":group=64",
                                ":residual=0", "=", "-", "-1", "0", "2", "keep=2", "0-1=f16", "-2--1=", "x", "",
                                "99999999999999999999", ":scale=nan", ":scale=inf"};
  Rng rng(77);
  int parsed = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string spec;
    const int n = 1 + static_cast<int>(rng.below(6));
    for (int i = 0; i < n; ++i) spec += pieces[rng.below(std::size(pieces))];
    try {
      const KvConfig c = parse_kv_config(spec);
      ++parsed;
      ASSERT_EQ(parse_kv_config(c.canonical()), c) << spec;
    } catch (const Error& e) {
      ASSERT_EQ(e.exit_code(), 2) << spec << ": " << e.what();
    }
  }
  EXPECT_GT(parsed, 100);  // the generator reaches valid specs, not only errors
}

TEST(KvConfig, ListSplitsOnCommas) {
  const std::vector<KvConfig> list = parse_kv_config_list("none, bf16 ,f32/f16@keep=1");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].canonical(), "f16/f16");
  EXPECT_EQ(list[1].canonical(), "bf16/bf16");
  EXPECT_EQ(list[2].canonical(), "f32/f16@0=f16/f16@-1=f16/f16");
  expect_usage_error([] { parse_kv_config_list("none,,bf16"); }, {"empty entry"});
  expect_usage_error([] { parse_kv_config_list("none,f16"); }, {"twice"});
}

TEST(KvConfig, ErrorsAreUsageErrorsNamingTheProblem) {
  const std::string valid = format_names_joined();
  expect_spec_error("", {"empty"});
  expect_spec_error("nosuch", {"unknown format 'nosuch'", valid});
  expect_spec_error("f16/nosuch", {"unknown format 'nosuch'", valid});
  expect_spec_error("f16/f16/f16", {"more than one '/'"});
  expect_spec_error("f16:bogus", {"unknown option"});
  expect_spec_error("f16:scale=0.5", {"does not apply"});
  expect_spec_error("f16:nc", {"does not apply"});
  expect_spec_error("f16:", {"empty option"});
  expect_spec_error("/f16", {"empty format name"});
  expect_spec_error("f16@", {"override"});
  expect_spec_error("f16@3-1=f32", {"empty"});
  expect_spec_error("f16@-1--2=f32", {"empty"});
  expect_spec_error("f16@2--1=f32", {"mixes"});
  expect_spec_error("f16@x=f32", {"bad layer index"});
  expect_spec_error("f16@-0=f32", {"bad layer index"});
  expect_spec_error("f16@99999=f32", {"bad layer index"});
  expect_spec_error("f16@keep=-1", {"keep=N"});
  expect_spec_error("f16@1=nosuch", {"unknown format 'nosuch'"});
  expect_spec_error("f16@1=turboquant_k8v4", {"its own layer overrides"});
  expect_spec_error("f16,bf16", {"commas separate"});
  expect_spec_error("f16 /bf16", {"space"});
  expect_spec_error("kivi2/f16", {"whole key/value config"});
}

TEST(KvConfig, AliasesOfUnregisteredFormatsFailCleanly) {
  // Every alias either parses or names the missing format; none may crash or pass silently.
  for (const char* alias : {"fp8", "int4", "int8", "k8v4", "turboquant_k8v4", "turboquant_4bit_nc",
                            "turboquant_k3v4_nc", "turboquant_3bit_nc", "kivi2", "kivi4", "tq4/4", "tq3/4",
                            "q8_0/q4_0", "fp8_e5m2", "int8_per_token_head", "fp8_per_token_head"}) {
    SCOPED_TRACE(alias);
    try {
      const KvConfig c = parse_kv_config(alias);
      EXPECT_EQ(parse_kv_config(c.canonical()), c);
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      EXPECT_NE(std::string(e.what()).find(format_names_joined()), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace kvgate::kernels
