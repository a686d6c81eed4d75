// llama.cpp's attention rotation (rot=wht), what the llama.cpp cache type names mean with it,
// and vLLM's --kv-cache-dtype spellings: accepted where a format stores the same bytes (nvfp4_4over6
// among them), refused with the reason otherwise.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/hash.h"
#include "core/rng.h"
#include "kernels/ggml_blocks.h"
#include "kernels/hadamard.h"
#include "kernels/kv_config.h"
#include "tests/kernels/gaussian.h"

namespace kvgate::kernels {
namespace {

std::string usage_error_of(const std::string& spec) {
  try {
    parse_kv_config(spec);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << spec << " parsed";
  return {};
}

TEST(Wht, IsTheSylvesterMatrixOverSqrtNBlockByBlock) {
  // ggml_gen_hadamard: H[i][j] = (-1)^popcount(i & j) / sqrt(n), applied per block of n.
  for (const auto& [size, block] : std::vector<std::pair<int, int>>{{64, 64}, {128, 128}, {192, 64}, {256, 64}}) {
    SCOPED_TRACE(std::to_string(size) + "/" + std::to_string(block));
    const BlockWalshHadamard h(size, block);
    const std::vector<float> x = gaussian(static_cast<size_t>(size), 3);
    std::vector<float> y(x.size()), back(x.size());
    h.apply(x.data(), y.data());
    for (int i = 0; i < size; ++i) {
      const int b0 = i / block * block;
      double want = 0.0;
      for (int j = b0; j < b0 + block; ++j)
        want += (std::popcount(static_cast<unsigned>((i - b0) & (j - b0))) % 2 ? -1.0 : 1.0) * x[static_cast<size_t>(j)];
      want /= std::sqrt(static_cast<double>(block));
      EXPECT_NEAR(y[static_cast<size_t>(i)], want, 1e-5) << i;
    }
    h.apply(y.data(), back.data());  // H H = I
    for (int i = 0; i < size; ++i) EXPECT_NEAR(back[static_cast<size_t>(i)], x[static_cast<size_t>(i)], 1e-5) << i;
  }
}

TEST(Wht, BlockSizesAreLlamaCpps) {
  // src/llama-kv-cache.cpp:340-356: keys the largest power of two >= 64 dividing head_dim, values 64;
  // nothing unless head_dim % 64 == 0.
  EXPECT_EQ(llama_cpp_key_rotation_block(64), 64);
  EXPECT_EQ(llama_cpp_key_rotation_block(128), 128);
  EXPECT_EQ(llama_cpp_key_rotation_block(256), 256);
  EXPECT_EQ(llama_cpp_key_rotation_block(192), 64);
  EXPECT_EQ(llama_cpp_key_rotation_block(320), 64);
  EXPECT_EQ(llama_cpp_key_rotation_block(96), 0);
  EXPECT_EQ(llama_cpp_value_rotation_block(256), 64);
  EXPECT_EQ(llama_cpp_value_rotation_block(80), 0);
}

TEST(Wht, CodecQuantizesTheRotatedRowAsGgmlDoes) {
  for (int d : {64, 128, 192}) {
    for (int option_block : {0, 64}) {
      SCOPED_TRACE("d " + std::to_string(d) + " block option " + std::to_string(option_block));
      FormatOptions o;
      o.rotation = Rotation::wht;
      o.rotation_block = option_block;
      const auto codec = make_codec("q4_0", d, o);
      ASSERT_TRUE(codec->rotates());
      const BlockWalshHadamard h(d, option_block == 0 ? llama_cpp_key_rotation_block(d) : 64);
      const std::vector<float> x = gaussian(static_cast<size_t>(d), 17);
      std::vector<float> rotated(x.size());
      h.apply(x.data(), rotated.data());
      std::vector<uint8_t> want(codec->group_bytes()), got(codec->group_bytes()), fast(codec->group_bytes());
      for (int b = 0; b < d / 32; ++b) ggml::Q4_0::quantize(rotated.data() + 32 * b, want.data() + ggml::Q4_0::kBytes * b);
      codec->quantize_ref(x.data(), got.data());
      codec->quantize(x.data(), fast.data());
      EXPECT_EQ(got, want);
      EXPECT_EQ(fast, want);
      // Dequantized back in the original basis: H applied to the decoded rotated row.
      std::vector<float> stored(x.size()), back(x.size()), unrotated(x.size());
      codec->dequantize_stored_ref(got.data(), stored.data());
      codec->dequantize_ref(got.data(), back.data());
      h.apply(stored.data(), unrotated.data());
      EXPECT_EQ(back, unrotated);
    }
  }
  // llama.cpp leaves head_dim 96 unrotated; so does the codec.
  FormatOptions o;
  o.rotation = Rotation::wht;
  EXPECT_FALSE(make_codec("q8_0", 96, o)->rotates());
}

TEST(Wht, LlamaCppTypeNamesMeanTheDefaultRotation) {
  for (const char* name : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"}) {
    SCOPED_TRACE(name);
    const KvConfig c = parse_kv_config(name);
    EXPECT_EQ(c.key.options.rotation, Rotation::wht);
    EXPECT_EQ(c.key.options.rotation_block, 0);  // the key rule
    EXPECT_EQ(c.value.options.rotation, Rotation::wht);
    EXPECT_EQ(c.value.options.rotation_block, 64);  // llama.cpp's value block
    EXPECT_EQ(c.canonical(), std::string(name) + ":rot=wht/" + name + ":rot=wht");
    const KvConfig off = parse_kv_config(std::string(name) + ":rot=none");
    EXPECT_EQ(off.key.options.rotation, Rotation::none);
    EXPECT_EQ(off.canonical(), std::string(name) + ":rot=none/" + name + ":rot=none");
    EXPECT_EQ(parse_kv_config(off.canonical()), off);
  }
  // K and V decided separately: a 16-bit side has no rotation to take.
  const KvConfig v_only = parse_kv_config("f16/q4_0");
  EXPECT_EQ(v_only.key.options.rotation, Rotation::none);
  EXPECT_EQ(v_only.value.options.rotation, Rotation::wht);
  EXPECT_EQ(v_only.canonical(), "f16/q4_0:rot=wht");
  // Formats llama.cpp does not cache keep no rotation by default; they may take one.
  EXPECT_EQ(parse_kv_config("mxfp4").key.options.rotation, Rotation::none);
  EXPECT_EQ(parse_kv_config("mxfp4:rot=wht").canonical(), "mxfp4:rot=wht/mxfp4:rot=wht");
  // The randomized rotation keeps its old spelling and meaning.
  EXPECT_EQ(parse_kv_config("q4_0:rot=hadamard").canonical(), "q4_0:rot/q4_0:rot");
  EXPECT_NE(usage_error_of("q4_0:rot=wht:seed=5").find("seed= only matters with rot=hadamard"), std::string::npos);
  EXPECT_NE(usage_error_of("q4_0:rot=qr").find("wht (llama.cpp's), hadamard (randomized), none"), std::string::npos);
  EXPECT_NE(usage_error_of("tq4:rot=wht/4").find("hadamard, qr"), std::string::npos);
}

TEST(Wht, StoredCanonicalStringsKeepTheirMeaning) {
  // Before rot=wht a bare llama.cpp name meant no rotation, and results are keyed by such strings.
  const KvConfig old = parse_stored_kv_config("q8_0/q4_0@3=q4_1/q4_1");
  EXPECT_EQ(old, parse_kv_config("q8_0:rot=none/q4_0:rot=none@3=q4_1:rot=none/q4_1:rot=none"));
  EXPECT_EQ(parse_stored_kv_config("q4_0:rot/q4_0:rot"), parse_kv_config("q4_0:rot"));
  // Every canonical string written now spells its rotation, so both readings agree on it.
  for (const char* spec : {"q4_0", "q8_0:rot=none/f16", "q4_1:rot@keep=2@engine=llama.cpp", "iq4_nl/q5_0:rot=none",
                           "tq3:nc/4", "fp8@engine=vllm-fa3"}) {
    SCOPED_TRACE(spec);
    const KvConfig c = parse_kv_config(spec);
    EXPECT_EQ(parse_stored_kv_config(c.canonical()), c);
    EXPECT_EQ(parse_kv_config(c.canonical()), c);
  }
  // The hash of an unrotated config from before this change is unchanged for configs without
  // llama.cpp types, and a new string for the ones that now spell their rotation.
  EXPECT_EQ(hex_u64(parse_kv_config("none").hash()), "7b493f66068cd35f");
  EXPECT_NE(parse_kv_config("q4_0:rot=none").canonical(), "q4_0/q4_0");
}

TEST(VllmNames, AreAcceptedWhereTheStorageMatchesAndRefusedWithTheReason) {
  EXPECT_EQ(parse_kv_config("int8_per_token_head").canonical(), "int8_pth/int8_pth");
  EXPECT_EQ(parse_kv_config("fp8_per_token_head").canonical(), "fp8_pth/fp8_pth");
  EXPECT_EQ(parse_kv_config("nvfp4_4over6").key.format, find_format("nvfp4_4over6"));
  const std::pair<const char*, const char*> refused[] = {
      {"fp8_inc", "calibration measurement file"},
      {"fp8_ds_mla", "multi-head latent attention model"},
      {"nvfp4_ds_mla", "multi-head latent attention model"},
      {"int4_per_token_head", "does not reproduce"},
      {"mxfp8", "also quantizes each query row to MXFP8"},  // SGLang's
  };
  for (const auto& [name, reason] : refused) {
    SCOPED_TRACE(name);
    const std::string what = usage_error_of(name);
    EXPECT_NE(what.find(std::string("--kv-cache-dtype ") + name), std::string::npos) << what;
    EXPECT_NE(what.find(reason), std::string::npos) << what;
  }
}

TEST(VllmNames, SkipLayersKeepThoseLayersInF16) {
  const KvConfig c = parse_kv_config("fp8@kv-cache-dtype-skip-layers=0:2:11");
  for (int layer = 0; layer < 12; ++layer) {
    const bool skipped = layer == 0 || layer == 2 || layer == 11;
    EXPECT_EQ(c.key_for_layer(layer, 12).format->name, skipped ? "f16" : "fp8_e4m3") << layer;
    EXPECT_EQ(c.value_for_layer(layer, 12).format->name, skipped ? "f16" : "fp8_e4m3") << layer;
  }
  EXPECT_NE(usage_error_of("fp8@kv-cache-dtype-skip-layers=sliding_window").find("list the sliding-window layers"),
            std::string::npos);
  EXPECT_NE(usage_error_of("fp8@kv-cache-dtype-skip-layers=0:x").find("separated by ':'"), std::string::npos);
}

TEST(Nvfp4FourOverSix, KeepsTheQuarterScaleWhereItReconstructsBetter) {
  // Block [2, 1.5, 0...]: amax/6 rounds to the E4M3 0.34375 (2 -> 2.0625, 1.5 -> 1.375), amax/4 is
  // exactly 0.5 (2 -> 4 * 0.5, 1.5 -> 3 * 0.5): four-over-six stores 0.5, nvfp4 0.34375.
  std::vector<float> x(16, 0.0f);
  x[0] = 2.0f;
  x[1] = 1.5f;
  const auto plain = make_codec("nvfp4", 16), four_six = make_codec("nvfp4_4over6", 16);
  std::vector<uint8_t> a(plain->group_bytes()), b(four_six->group_bytes());
  plain->quantize_ref(x.data(), a.data());
  four_six->quantize_ref(x.data(), b.data());
  EXPECT_EQ(fp8_to_f32(a[0], Fp8Kind::e4m3fn), 0.34375f);
  EXPECT_EQ(fp8_to_f32(b[0], Fp8Kind::e4m3fn), 0.5f);
  std::vector<float> y(16);
  four_six->dequantize_ref(b.data(), y.data());
  EXPECT_EQ(y, x);
  // A block both scales store exactly keeps amax/6 (ties go to it), as nvfp4 stores it.
  std::vector<float> threes(16, 3.0f);
  plain->quantize_ref(threes.data(), a.data());
  four_six->quantize_ref(threes.data(), b.data());
  EXPECT_EQ(a, b);
  // On Gaussian rows the search never loses to the plain scale.
  const std::vector<float> g = gaussian(16 * 256, 5);
  double err_plain = 0.0, err_search = 0.0;
  for (size_t r = 0; r < 256; ++r) {
    plain->quantize_ref(&g[r * 16], a.data());
    four_six->quantize_ref(&g[r * 16], b.data());
    std::vector<float> ya(16), yb(16);
    plain->dequantize_ref(a.data(), ya.data());
    four_six->dequantize_ref(b.data(), yb.data());
    double ea = 0.0, eb = 0.0;
    for (int i = 0; i < 16; ++i) {
      ea += std::pow(ya[static_cast<size_t>(i)] - g[r * 16 + static_cast<size_t>(i)], 2);
      eb += std::pow(yb[static_cast<size_t>(i)] - g[r * 16 + static_cast<size_t>(i)], 2);
    }
    EXPECT_LE(eb, ea + 1e-9) << "row " << r;
    err_plain += ea;
    err_search += eb;
  }
  EXPECT_LT(err_search, err_plain);
}

}  // namespace
}  // namespace kvgate::kernels
