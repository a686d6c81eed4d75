// `kvgate kv ...` end to end: the real binary, real .npy files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/float_convert.h"
#include "core/npy.h"
#include "core/rng.h"
#include "kernels/kv_format.h"
#include "tests/cli/run_cli.h"

namespace kvgate::testing {
namespace {

using nlohmann::json;

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "kvgate_kv_" + std::to_string(::getpid()) + "_" + name; }

std::vector<float> gaussian(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  return x;
}

json parse_stdout(const CliResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out);
}

TEST(KvList, JsonListsEveryRegisteredFormatInOrder) {
  const json j = parse_stdout(run_kvgate("kv list --json"));
  const auto formats = kernels::all_formats();
  ASSERT_EQ(j.size(), formats.size());
  for (size_t i = 0; i < formats.size(); ++i) {
    EXPECT_EQ(j[i]["name"], std::string(formats[i]->name));
    EXPECT_EQ(j[i]["family"], std::string(formats[i]->family));
    EXPECT_FALSE(j[i]["backends"].empty());
    EXPECT_TRUE(j[i]["backends"][0] == "cpu");
  }
  const auto f16 = std::find_if(j.begin(), j.end(), [](const json& e) { return e["name"] == "f16"; });
  ASSERT_NE(f16, j.end());
  EXPECT_EQ((*f16)["bits_per_element"]["64"], 16.0);
  EXPECT_EQ((*f16)["bits_per_element"]["128"], 16.0);
  EXPECT_EQ((*f16)["bytes_per_token_head_128"], 256.0);
}

TEST(KvList, TextTableHasOneLinePerFormat) {
  const CliResult r = run_kvgate("kv list");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const kernels::FormatInfo* f : kernels::all_formats())
    EXPECT_NE(r.out.find("\n" + std::string(f->name) + " "), std::string::npos) << f->name;
}

TEST(KvShow, DefaultShapeIsTheDefaultModel) {
  const json j = parse_stdout(run_kvgate("kv show none --json"));
  EXPECT_EQ(j["shape"]["layers"], 30);
  EXPECT_EQ(j["shape"]["kv_heads"], 3);
  EXPECT_EQ(j["shape"]["head_dim"], 64);
  EXPECT_EQ(j["bits_per_element"], 16.0);
  EXPECT_EQ(j["bytes_per_token"], 2.0 * 2 * 30 * 3 * 64);  // K and V, f16
  EXPECT_EQ(j["hash"].get<std::string>().size(), 16u);
  // Two spellings of one config have one canonical form and hash.
  const json same = parse_stdout(run_kvgate("kv show f16/f16 --json"));
  EXPECT_EQ(same["canonical"], j["canonical"]);
  EXPECT_EQ(same["hash"], j["hash"]);
}

TEST(KvShow, ShapeFlagsAndPerLayerOverrides) {
  const json j = parse_stdout(run_kvgate("kv show turboquant_k8v4 --layers 6 --kv-heads 8 --head-dim 128 --json"));
  EXPECT_EQ(j["shape"]["layers"], 6);
  ASSERT_EQ(j["layers"].size(), 3u) << j.dump();  // kept first layers, the body, kept last layers
  EXPECT_EQ(j["layers"][0]["first"], 0);
  EXPECT_EQ(j["layers"][2]["last"], 5);
  EXPECT_NE(j["layers"][1]["key"], j["layers"][0]["key"]);
  EXPECT_LT(j["bits_per_element"].get<double>(), 16.0);
  const CliResult text = run_kvgate("kv show turboquant_k8v4");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("layers"), std::string::npos);
}

TEST(KvShow, StatesTheRotationAndTheEngineArithmetic) {
  const json j = parse_stdout(run_kvgate("kv show q4_0@engine=llama.cpp --head-dim 128 --json"));
  EXPECT_EQ(j["canonical"], "q4_0:rot=wht/q4_0:rot=wht@engine=llama.cpp");
  EXPECT_NE(j["key_rotation"].get<std::string>().find("blocks of 128"), std::string::npos) << j.dump();
  EXPECT_NE(j["value_rotation"].get<std::string>().find("blocks of 64"), std::string::npos) << j.dump();
  EXPECT_EQ(j["engine"], "llama.cpp");
  EXPECT_NE(j["arithmetic"]["decode"].get<std::string>().find("query q8_0"), std::string::npos) << j.dump();
  EXPECT_NE(j["arithmetic"]["matmul_inputs"].get<std::string>().find("q8_1 for Q4_1"), std::string::npos) << j.dump();
  const json plain = parse_stdout(run_kvgate("kv show q4_0 --head-dim 96 --json"));
  EXPECT_NE(plain["key_rotation"].get<std::string>().find("none at head_dim 96"), std::string::npos) << plain.dump();
  EXPECT_EQ(plain["engine"], "exact");
  EXPECT_EQ(plain["arithmetic"]["matmul_inputs"], "");
  const CliResult text = run_kvgate("kv show q8_0:rot=none/f16@engine=llama.cpp-cuda");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("LLAMA_ATTN_ROT_DISABLE=1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("q8_1"), std::string::npos) << text.out;
  const CliResult refused = run_kvgate("kv show fp8_ds_mla");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("multi-head latent attention"), std::string::npos) << refused.err;
}

TEST(KvShow, BadSpecOrShapeIsUsageError) {
  const CliResult r = run_kvgate("kv show no_such_format");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no_such_format"), std::string::npos) << r.err;
  EXPECT_EQ(run_kvgate("kv show f16 --layers 0").exit_code, 2);
  EXPECT_EQ(run_kvgate("kv show").exit_code, 2);
}

TEST(KvCheck, GaussianErrorsGrowAsBitsShrink) {
  const json exact = parse_stdout(run_kvgate("kv check f32 --n 256 --json"));
  ASSERT_EQ(exact["roles"].size(), 2u);
  EXPECT_EQ(exact["roles"][0]["nmse"], 0.0);
  EXPECT_EQ(exact["roles"][0]["vectors"], 256);
  EXPECT_LT(exact["roles"][0]["ip_rel_error"].get<double>(), 1e-6);

  double previous = 0.0;
  for (const char* spec : {"f16", "q8_0", "q4_0"}) {
    const json j = parse_stdout(run_kvgate(std::string("kv check ") + spec + " --n 512 --seed 3 --json"));
    for (const json& role : j["roles"]) {
      EXPECT_GT(role["nmse"].get<double>(), previous) << spec;
      EXPECT_GT(role["ip_rel_error"].get<double>(), 0.0) << spec;
      EXPECT_LT(std::abs(role["ip_bias_rel"].get<double>()), 0.1) << spec << ": these formats are unbiased";
    }
    previous = j["roles"][0]["nmse"].get<double>();
  }
  const CliResult text = run_kvgate("kv check q4_0 --n 64");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("NMSE"), std::string::npos);
}

TEST(KvCheck, SameSeedSameNumbers) {
  EXPECT_EQ(run_kvgate("kv check q4_0/q8_0 --n 300 --seed 9 --json").out,
            run_kvgate("kv check q4_0/q8_0 --n 300 --seed 9 --json").out);
}

TEST(KvCheck, ReadsTheUsersDump) {
  const std::string path = temp_path("dump.npy");
  const auto x = gaussian(40 * 2 * 64, 5);
  write_npy(path, {40, 2, 64}, x.data(), NpyDtype::f16);
  const json j = parse_stdout(run_kvgate("kv check q8_0 --input " + path + " --json"));
  EXPECT_EQ(j["head_dim"], 64);
  EXPECT_EQ(j["roles"][0]["vectors"], 80);
  EXPECT_GT(j["roles"][0]["nmse"].get<double>(), 0.0);
  EXPECT_EQ(run_kvgate("kv check q8_0 --input " + path + " --head-dim 128").exit_code, 2);
  std::remove(path.c_str());
}

TEST(KvCheck, MalformedOrMissingInputIsInputError) {
  const std::string path = temp_path("bad.npy");
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    std::fputs("\x93NUMPY\x01\x00\x20\x00{'descr': '<f4', 'shape': (9,9)}", f);
    std::fclose(f);
  }
  const CliResult r = run_kvgate("kv check q8_0 --input " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(path + ": at byte"), std::string::npos) << r.err;
  EXPECT_EQ(run_kvgate("kv check q8_0 --input /nonexistent/k.npy").exit_code, 2);
  EXPECT_EQ(run_kvgate("kv check q8_0 --n 0").exit_code, 2);
  std::remove(path.c_str());
}

TEST(KvRoundtrip, EveryFormatWritesFloat32OfTheSameShape) {
  const std::string in = temp_path("in.npy"), out = temp_path("out.npy");
  const int64_t tokens = 33;  // a partial group for multi-token formats
  const auto x = gaussian(tokens * 2 * 64, 6);
  write_npy(in, {tokens, 2, 64}, x.data());
  for (const kernels::FormatInfo* f : kernels::all_formats()) {
    const std::string name(f->name);
    const bool as_key = f->for_keys;
    const std::string spec = as_key ? name + "/f16" : "f16/" + name;
    const CliResult r = run_kvgate("kv roundtrip " + spec + " --input " + in + " --output " + out + " --role " +
                                   (as_key ? "k" : "v") + " --json");
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    const NpyArray y = read_npy(out);
    EXPECT_EQ(y.shape, (std::vector<int64_t>{tokens, 2, 64})) << name;
    EXPECT_EQ(y.dtype, NpyDtype::f32);
    double err = 0, ref = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (y.data[i] - x[i]) * (y.data[i] - x[i]);
      ref += x[i] * x[i];
    }
    // Better than storing zeros; tqprod2 (1-bit MSE codes + 1-bit QJL residual) sits near 0.57 by design.
    EXPECT_LT(err / ref, 0.8) << name;
    EXPECT_NEAR(json::parse(r.out)["nmse"].get<double>(), err / ref, 1e-6 + 1e-3 * err / ref) << name;
    // Tokens after the last whole group are kept in f16, as the cache's window keeps them.
    const int g = kernels::make_codec(*f, 64)->token_group();
    for (int64_t t = tokens / g * g; t < tokens; ++t)
      for (int i = 0; i < 2 * 64; ++i)
        ASSERT_EQ(y.data[t * 128 + i], f16_to_f32(f32_to_f16(x[t * 128 + i]))) << name;
  }
  const CliResult exact = run_kvgate("kv roundtrip f32 --input " + in + " --output " + out);
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  EXPECT_EQ(read_npy(out).data, x);
  EXPECT_EQ(run_kvgate("kv roundtrip f32 --input " + in + " --output " + out + " --role x").exit_code, 2);
  EXPECT_EQ(run_kvgate("kv roundtrip f32 --input " + in).exit_code, 2);
  std::remove(in.c_str());
  std::remove(out.c_str());
}


// `kvgate bench kernels` is measured, not asserted on: this checks the report's shape only.
TEST(BenchKernels, JsonReportsEveryRequestedFormatAgainstCopyBandwidth) {
  const json j = parse_stdout(run_kvgate("bench kernels --formats f16,q8_0 --tokens 64,96 --min-time 0.01 --json"));
  EXPECT_GT(j["copy"]["gb_per_s"].get<double>(), 0.0);
  EXPECT_EQ(j["threads"], 1);
  ASSERT_EQ(j["formats"].size(), 2u);
  EXPECT_EQ(j["formats"][0]["format"], "f16");
  EXPECT_EQ(j["formats"][1]["format"], "q8_0");
  for (const json& f : j["formats"]) {
    EXPECT_GT(f["quantize_gb_per_s"].get<double>(), 0.0);
    EXPECT_GT(f["dequantize_gb_per_s"].get<double>(), 0.0);
    ASSERT_EQ(f["decode"].size(), 2u);
    EXPECT_EQ(f["decode"][1]["tokens"], 96);
    EXPECT_GT(f["decode"][1]["ratio_to_copy"].get<double>(), 0.0);
  }
  // f16 K and V: 96 tokens x 8 KV heads x 128 x 2 bytes x 2.
  EXPECT_EQ(j["formats"][0]["decode"][1]["kv_bytes"], 96.0 * 8 * 128 * 2 * 2);
  EXPECT_EQ(run_kvgate("bench kernels --formats no_such_format").exit_code, 2);
  EXPECT_EQ(run_kvgate("bench kernels --tokens 12x").exit_code, 2);
}

}  // namespace
}  // namespace kvgate::testing
