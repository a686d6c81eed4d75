// The GPU kernels' per-row arithmetic (kernels/gpu/kv_rows.h), compiled for the host, against
// the CPU codecs byte for byte. gpu_kv.cu runs the same functions on the device, so this is the
// bit-exactness check that does not need a GPU; tests/gpu repeats it on a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/rng.h"
#include "kernels/ggml_blocks.h"
#include "kernels/hadamard.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/kv_rows.h"
#include "kernels/gpu/tq_params.h"
#include "kernels/kv_format.h"
#include "kernels/orthogonal.h"
#include "tests/kernels/gpu_row_cases.h"

namespace kvgate::kernels::gpu {
namespace {

using testing::head_dim_for;
using testing::probe_rows;
using testing::same_float;
using testing::tensor_scale_for;
using testing::entry;
const char* name_of(FormatId f) { return kv_format_name(f); }

// One GPU format as a test case: the CPU codec with the same options, and the TurboQuant
// constants where the format has them. Each format at its defaults, plus TurboQuant with norm
// correction, with another rotation seed, with outlier channels that do not end on a byte and
// with rot=qr, and nvfp4 at the default global scale 1 as well.
struct Variant {
  FormatId format;
  int head_dim;
  FormatOptions options;
  std::optional<TqConstants> tq;
  std::string label;
  const TqParams* tq_ptr() const { return tq ? &tq->params : nullptr; }
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
  for (FormatId f : kv_formats()) {
    if (is_kivi(f)) continue;  // windowed token groups: KiviGroupsAndRowsEqualTheCpuReferenceBitForBit
    Variant v{f, head_dim_for(f), {}, std::nullopt, name_of(f)};
    v.options.scale = tensor_scale_for(f);
    if (is_tq(f)) {
      v.tq = make_tq_params(f, v.head_dim, v.options);
      Variant nc = v, seeded = v, outliers = v, qr = v;
      qr.options.rotation = Rotation::qr;
      qr.tq = make_tq_params(f, v.head_dim, qr.options);
      qr.label += ":rot=qr";
      out.push_back(qr);
      nc.options.norm_correction = true;
      nc.tq = make_tq_params(f, v.head_dim, nc.options);
      nc.label += ":nc";
      seeded.options.seed = 12345;
      seeded.tq = make_tq_params(f, v.head_dim, seeded.options);
      seeded.label += ":seed=12345";
      outliers.options.outlier_channels = 5 + tq_bits(f);
      outliers.options.norm_correction = true;
      outliers.tq = make_tq_params(f, v.head_dim, outliers.options);
      outliers.label += ":nc:outliers=" + std::to_string(outliers.options.outlier_channels);
      if (!is_tqprod(f)) {  // nc and outliers would bias tqprod's inner products: the CPU rejects them
        out.push_back(nc);
        out.push_back(outliers);
      }
      out.push_back(seeded);
    }
    if (f == FormatId::nvfp4 || f == FormatId::nvfp4_4over6) {
      Variant unit_scale = v;
      unit_scale.options.scale = 1.0f;
      unit_scale.label += ":scale=1";
      out.push_back(unit_scale);
    }
    out.push_back(v);
  }
  return out;
}

TEST(GpuRows, EveryGpuFormatIsARegisteredCpuFormatOfTheSameSize) {
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.label);
    const auto codec = make_codec(name_of(v.format), v.head_dim, v.options);
    EXPECT_EQ(codec->token_group(), 1);
    EXPECT_EQ(codec->group_bytes(), row_bytes(v.format, v.head_dim, v.tq_ptr()));
    EXPECT_EQ(is_tq(v.format), v.tq.has_value());
  }
  FormatOptions qr;
  qr.rotation = Rotation::qr;
  EXPECT_NE(make_tq_params(FormatId::tq3, 64, qr)->params.rotation_matrix, nullptr);
  EXPECT_EQ(make_tq_params(FormatId::tq3, 64)->params.rotation_matrix, nullptr);
  EXPECT_TRUE(make_tq_params(FormatId::tq3, 96, qr).has_value());  // rot=qr takes any head_dim
  EXPECT_FALSE(make_tq_params(FormatId::tq3, 96, FormatOptions{}).has_value());  // Hadamard: a power of two
  EXPECT_FALSE(make_tq_params(FormatId::tq3, 320, qr).has_value());  // past the kernels' head_dim
  EXPECT_FALSE(make_tq_params(FormatId::tq2_5, 66, qr).has_value());  // head_dim / 4 outliers: a multiple of 4
  EXPECT_FALSE(make_tq_params(3, 96).has_value());  // not a power of two
  EXPECT_FALSE(make_tq_params(2, 64, false, kTqDefaultSeed, 65).has_value());  // more outliers than channels
  EXPECT_FALSE(make_tq_params(FormatId::q4_0, 64, FormatOptions{}).has_value());
  // tq2.5 is tq2 with head_dim/4 outlier channels unless the spec names a count.
  EXPECT_EQ(make_tq_params(FormatId::tq2_5, 64, FormatOptions{})->params.outliers, 16);
  EXPECT_EQ(make_tq_params(FormatId::tq3, 64, FormatOptions{})->params.outliers, 0);
  FormatOptions outliers;
  outliers.outlier_channels = 7;
  EXPECT_EQ(make_tq_params(FormatId::tq3_5, 64, outliers)->params.outliers, 7);
  EXPECT_EQ(make_tq_params(FormatId::tq2, 64, outliers)->params.outliers, 7);
  EXPECT_FALSE(make_tq_params(FormatId::tqprod3, 64, outliers).has_value());  // the CPU codec rejects both
  FormatOptions nc;
  nc.norm_correction = true;
  EXPECT_FALSE(make_tq_params(FormatId::tqprod3, 64, nc).has_value());
  FormatOptions scaled;
  scaled.scale = 0.5f;
  EXPECT_FALSE(make_tq_params(FormatId::tq3, 64, scaled).has_value());
  EXPECT_EQ(make_tq_params(FormatId::tq3, 64)->sketch, nullptr);
  const std::optional<TqConstants> prod = make_tq_params(FormatId::tqprod4, 64);
  ASSERT_TRUE(prod.has_value());
  EXPECT_EQ(prod->params.bits, 3);
  ASSERT_NE(prod->sketch, nullptr);
  EXPECT_EQ(prod->sketch->size(), 64u * 64u);
  EXPECT_EQ(prod->params.sketch, prod->sketch->data());
}

// The registry's backend column (kvgate kv list) says which formats a GPU build stores: exactly
// those with row functions behind the GPU's switch on the id (with_rows), and the GPU list is the
// registry's, by id.
TEST(GpuRows, RegistryBackendsNameExactlyTheFormatsWithGpuRows) {
  size_t with_gpu = 0;
  for (const FormatInfo* f : all_formats()) {
    const bool has_rows = row_bytes(f->id, 64) > 0;
    EXPECT_EQ((f->backends() & kBackendCuda) != 0, has_rows) << f->name;
    EXPECT_EQ((f->backends() & kBackendHip) != 0, has_rows) << f->name;
    if (has_rows) {
      EXPECT_EQ(kv_format_named(f->name), f->id) << f->name;
      EXPECT_EQ(std::string(kv_format_name(f->id)), f->name);
      ++with_gpu;
    } else {
      EXPECT_FALSE(kv_format_named(f->name).has_value()) << f->name;
    }
  }
  EXPECT_EQ(with_gpu, kv_formats().size());
  EXPECT_EQ(row_bytes(FormatId::external, 64), 0u);  // no GPU rows behind a run-time format
}

// The GPU host API's layout (kernels/gpu/kv_formats.cc, host code that builds without a GPU
// toolchain) agrees with the CPU registry: row sizes, names, and the entry's head_dim rules.
TEST(GpuRows, RowBytesEqualCpuGroupBytesAndBadShapesAreUsageErrors) {
  auto cpu_bytes = [](FormatId f, int head_dim) {
    FormatOptions options;
    options.scale = tensor_scale_for(f);
    return make_codec(name_of(f), head_dim, options)->group_bytes();
  };
  for (FormatId f : kv_formats()) {
    for (int head_dim : {32, 64, 96, 128, 256}) {
      if (is_tq(f) && head_dim == 96) continue;  // the rotation needs a power of two
      EXPECT_EQ(kv_row_bytes(f, head_dim), cpu_bytes(f, head_dim)) << name_of(f) << " d=" << head_dim;
    }
    try {
      kv_row_bytes(f, 0);
      ADD_FAILURE() << name_of(f) << ": head_dim 0 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
    }
    EXPECT_THROW(kv_row_bytes(f, kMaxKvHeadDim + 32), Error);
  }
  EXPECT_EQ(kv_format_named("tq3.5"), FormatId::tq3_5);
  EXPECT_EQ(kv_format_named("tqprod3"), FormatId::tqprod3);
  EXPECT_FALSE(kv_format_named("tq3_5").has_value());
  EXPECT_THROW(kv_row_bytes(FormatId::q4_0, 67), Error);
  EXPECT_THROW(kv_row_bytes(FormatId::mxfp4, 48), Error);
  EXPECT_THROW(kv_row_bytes(FormatId::tq2_5, 66), Error);  // the CPU codec's head_dim multiple of 4
  FormatOptions qr;
  qr.rotation = Rotation::qr;  // any head_dim
  EXPECT_EQ(kv_row_bytes(FormatId::tqprod3, 67), make_codec("tqprod3", 67, qr)->group_bytes());
  EXPECT_THROW(kv_row_bytes(FormatId::q5_1, 80), Error);
  EXPECT_THROW(kv_row_bytes(FormatId::nvfp4, 40), Error);
  EXPECT_EQ(kv_row_bytes(FormatId::nvfp4, 80), cpu_bytes(FormatId::nvfp4, 80));
  EXPECT_THROW(kv_row_bytes(FormatId::int4_pth, 67), Error);
  EXPECT_EQ(kv_row_bytes(FormatId::int8_pth, 67), cpu_bytes(FormatId::int8_pth, 67));
  EXPECT_THROW(kv_format_name(FormatId::external), Error);
}

// The outlier channels' codes lead the stream at b + 1 bits, so every count moves the byte
// boundaries of the rest; tq4's outliers take 5-bit codes, past the integer formats' widths.
TEST(GpuRows, TurboQuantOutlierWidthsEncodeAsTheCpu) {
  constexpr int kRows = 300;
  for (FormatId f : {FormatId::tq1, FormatId::tq2_5, FormatId::tq3_5, FormatId::tq4})
    for (int d : {16, 128})
      for (int outliers : {0, 1, 3, d / 4 + 1, d}) {
        SCOPED_TRACE(std::string(name_of(f)) + " d " + std::to_string(d) + " outliers " + std::to_string(outliers));
        FormatOptions options;
        options.outlier_channels = outliers;
        const auto codec = make_codec(name_of(f), d, options);
        const std::optional<TqConstants> constants = make_tq_params(f, d, options);
        ASSERT_TRUE(constants.has_value());
        const TqParams* tq = &constants->params;
        const size_t rb = row_bytes(f, d, tq);
        ASSERT_EQ(codec->group_bytes(), rb);
        const std::vector<float> x = probe_rows(d, kRows, 31);
        std::vector<uint8_t> cpu(rb), shared(rb);
        std::vector<float> want(d), got(d);
        for (int r = 0; r < kRows; ++r) {
          codec->quantize_ref(x.data() + static_cast<size_t>(r) * d, cpu.data());
          encode_row(f, d, 1.0f, x.data() + static_cast<size_t>(r) * d, shared.data(), tq);
          ASSERT_EQ(cpu, shared) << "row " << r;
          codec->dequantize_stored_ref(cpu.data(), want.data());
          decode_row(f, d, 1.0f, cpu.data(), got.data(), tq);
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "row " << r << " element " << i;
        }
      }
}

TEST(GpuRows, EncodeAndDecodeEqualTheCpuReferenceBitForBit) {
  constexpr int kRows = 64;
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.label);
    const FormatId f = v.format;
    const int d = v.head_dim;
    const float scale = v.options.scale;
    const auto codec = make_codec(name_of(f), d, v.options);
    const size_t rb = row_bytes(f, d, v.tq_ptr());
    const std::vector<float> x = probe_rows(d, kRows, 7);
    std::vector<uint8_t> cpu(rb * kRows, 0xa5), shared(rb * kRows, 0x5a);
    std::vector<float> cpu_y(x.size(), -7.0f), shared_y(x.size(), 7.0f);
    for (int r = 0; r < kRows; ++r) {
      codec->quantize_ref(x.data() + r * d, cpu.data() + r * rb);
      encode_row(f, d, scale, x.data() + r * d, shared.data() + r * rb, v.tq_ptr());
      codec->dequantize_stored_ref(cpu.data() + r * rb, cpu_y.data() + r * d);  // tq{b}: the rotated basis
      decode_row(f, d, scale, cpu.data() + r * rb, shared_y.data() + r * d, v.tq_ptr());
    }
    for (int r = 0; r < kRows; ++r) {
      EXPECT_EQ(0, std::memcmp(cpu.data() + r * rb, shared.data() + r * rb, rb)) << "encoded row " << r;
      for (int i = 0; i < d; ++i)
        if (!same_float(cpu_y[static_cast<size_t>(r) * d + i], shared_y[static_cast<size_t>(r) * d + i])) {
          ADD_FAILURE() << "decoded row " << r << " element " << i << ": cpu " << cpu_y[static_cast<size_t>(r) * d + i]
                        << " shared " << shared_y[static_cast<size_t>(r) * d + i];
          break;
        }
    }
  }
}

// A last-ulp difference in a block scale (an operation reordered, a multiply fused) shows in the
// stored f16 or e4m3 scale only when it crosses a rounding boundary, so the block formats get
// many random rows besides the probes.
TEST(GpuRows, ManyRandomRowsEncodeAsTheCpu) {
  constexpr int kRows = 1 << 14;
  for (FormatId f : kv_formats()) {
    if (is_tq(f) || is_kivi(f)) continue;
    SCOPED_TRACE(name_of(f));
    const int d = head_dim_for(f);
    FormatOptions options;
    options.scale = tensor_scale_for(f);
    const auto codec = make_codec(name_of(f), d, options);
    const size_t rb = row_bytes(f, d);
    const std::vector<float> x = probe_rows(d, kRows, 23);
    std::vector<uint8_t> cpu(rb), shared(rb);
    for (int r = 0; r < kRows; ++r) {
      codec->quantize_ref(x.data() + static_cast<size_t>(r) * d, cpu.data());
      encode_row(f, d, options.scale, x.data() + static_cast<size_t>(r) * d, shared.data());
      ASSERT_EQ(cpu, shared) << "row " << r;
    }
  }
}

// nvfp4 blocks whose largest magnitude puts amax / 6 / g within a few ulps of a midpoint between
// two e4m3 scale codes, where the scale's operation order decides the stored code.
TEST(GpuRows, Nvfp4ScalesAtE4m3RoundingBoundariesEncodeAsTheCpu) {
  constexpr int d = kNvfp4Block;
  for (float g : {0.3f, 1.0f, 0.007f}) {
    FormatOptions options;
    options.scale = g;
    const auto codec = make_codec("nvfp4", d, options);
    std::vector<uint8_t> cpu(row_bytes(FormatId::nvfp4, d)), shared(cpu.size());
    for (int code = 1; code < 0x7e; ++code) {
      const float mid = 0.5f * (fp8_to_f32(static_cast<uint8_t>(code), Fp8Kind::e4m3fn) +
                                fp8_to_f32(static_cast<uint8_t>(code + 1), Fp8Kind::e4m3fn));
      const float center = static_cast<float>(static_cast<double>(mid) * 6.0 * g);
      for (int ulps = -6; ulps <= 6; ++ulps) {
        float x[d];
        x[0] = f32_from_bits(static_cast<uint32_t>(static_cast<int64_t>(f32_bits(center)) + ulps));
        for (int j = 1; j < d; ++j) x[j] = x[0] * (static_cast<float>(j) / d - 0.5f);
        codec->quantize_ref(x, cpu.data());
        encode_row(FormatId::nvfp4, d, g, x, shared.data());
        ASSERT_EQ(cpu, shared) << "g " << g << " amax " << x[0];
      }
    }
  }
}

// Every code of the one-byte formats decodes as the CPU does (NaN codes, subnormals, -0).
TEST(GpuRows, EveryByteCodeDecodesAsTheCpu) {
  for (FormatId f : kv_formats()) {
    const bool row_scale = entry(f).family == "per-token-head";
    if (!row_scale && entry(f).family != "fp8") continue;  // the formats of one byte per element
    SCOPED_TRACE(name_of(f));
    const int d = f == FormatId::int4_pth ? 512 : 256;
    FormatOptions options;
    options.scale = tensor_scale_for(f);
    const auto codec = make_codec(name_of(f), d, options);
    std::vector<uint8_t> row(row_bytes(f, d));
    const size_t header = row_scale ? 4 : 0;
    if (header) store_f32(row.data(), 0.37f);
    for (size_t i = header; i < row.size(); ++i) row[i] = static_cast<uint8_t>(i - header);
    std::vector<float> cpu(d), shared(d);
    codec->dequantize_ref(row.data(), cpu.data());
    decode_row(f, d, options.scale, row.data(), shared.data());
    for (int i = 0; i < d; ++i) EXPECT_TRUE(same_float(cpu[i], shared[i])) << "element " << i;
  }
}

// nvfp4: every element byte under every block scale code (NaN and subnormal scales, -0
// elements), at the default and a rounding global scale.
TEST(GpuRows, EveryNvfp4ScaleAndElementCodeDecodesAsTheCpu) {
  constexpr int d = 256;  // 16 blocks of 8 element bytes: half of the 256 byte values per row
  for (float g : {1.0f, 0.3f}) {
    FormatOptions options;
    options.scale = g;
    const auto codec = make_codec("nvfp4", d, options);
    std::vector<uint8_t> row(row_bytes(FormatId::nvfp4, d));
    std::vector<float> cpu(d), shared(d);
    for (int scale_code = 0; scale_code < 256; ++scale_code)
      for (int half = 0; half < 2; ++half) {
        for (int b = 0; b < d / kNvfp4Block; ++b) {
          row[b * kNvfp4BlockBytes] = static_cast<uint8_t>(scale_code);
          for (int k = 0; k < 8; ++k) row[b * kNvfp4BlockBytes + 1 + k] = static_cast<uint8_t>(128 * half + 8 * b + k);
        }
        codec->dequantize_ref(row.data(), cpu.data());
        decode_row(FormatId::nvfp4, d, g, row.data(), shared.data());
        for (int i = 0; i < d; ++i)
          ASSERT_TRUE(same_float(cpu[i], shared[i]))
              << "g " << g << " scale code " << scale_code << " element " << i << ": cpu " << cpu[i] << " shared " << shared[i];
      }
  }
}

// Rows of arbitrary bytes decode as the CPU does, so codes and scales no encoder writes (NaN or
// infinite f16 scales, q5_1's codes past the range a block uses) are covered too.
TEST(GpuRows, ArbitraryBytesDecodeAsTheCpu) {
  constexpr int kRows = 64;
  Rng rng(17);
  for (FormatId f : kv_formats()) {
    if (is_tq(f) || is_kivi(f)) continue;  // decoded against codec constants and groups above
    SCOPED_TRACE(name_of(f));
    const int d = head_dim_for(f);
    FormatOptions options;
    options.scale = tensor_scale_for(f);
    const auto codec = make_codec(name_of(f), d, options);
    const size_t rb = row_bytes(f, d);
    std::vector<uint8_t> rows(rb * kRows);
    for (uint8_t& b : rows) b = static_cast<uint8_t>(rng.below(256));
    std::vector<float> cpu(d), shared(d);
    for (int r = 0; r < kRows; ++r) {
      codec->dequantize_ref(rows.data() + r * rb, cpu.data());
      decode_row(f, d, options.scale, rows.data() + r * rb, shared.data());
      for (int i = 0; i < d; ++i)
        ASSERT_TRUE(same_float(cpu[i], shared[i])) << "row " << r << " element " << i << ": cpu " << cpu[i] << " shared " << shared[i];
    }
  }
}

// The grids as kernels/ggml_blocks.h packs them into words equal the tables ggml-common.h lists.
TEST(GpuRows, PackedGridsEqualGgmls) {
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(ggml::iq4nl_value(i), static_cast<float>(ggml::kValuesIq4nl[i])) << "index " << i;
    EXPECT_EQ(ggml::fp4_value(i), static_cast<float>(ggml::kValuesFp4[i])) << "index " << i;
    EXPECT_EQ(ggml::fp4_value(i), (i & 8 ? -2.0f : 2.0f) * e2m1_value(i & 7)) << "index " << i;  // doubled E2M1
  }
}

// tqprod keys: bytes (codes, QJL signs, both norms) and stored-basis rows as the CPU codec's;
// the score from S q as its dot_ref, bit for bit; and the split the attention kernel sums
// (tqprod_spans against q and S q) equal to that score up to float rounding.
TEST(GpuRows, TqProdRowsAndScoresEqualTheCpuReference) {
  constexpr int kRows = 40;
  for (FormatId f : {FormatId::tqprod2, FormatId::tqprod3, FormatId::tqprod4})
    for (int d : {8, 64, 256})
      for (uint64_t seed : {FormatOptions{}.seed, uint64_t{12345}}) {
        SCOPED_TRACE(std::string(name_of(f)) + " d " + std::to_string(d) + " seed " + std::to_string(seed));
        FormatOptions options;
        options.seed = seed;
        const auto codec = make_codec(name_of(f), d, options);
        const std::optional<TqConstants> constants = make_tq_params(f, d, options);
        ASSERT_TRUE(constants.has_value());
        const TqParams& p = constants->params;
        const size_t rb = row_bytes(f, d, &p);
        ASSERT_EQ(codec->group_bytes(), rb);
        const std::vector<float> x = probe_rows(d, kRows, 37);
        std::vector<uint8_t> cpu(rb), shared(rb);
        std::vector<float> want(d), got(d), q(d), sq(d), mse(d), qjl(d);
        for (int r = 0; r < kRows; ++r) {
          codec->quantize_ref(x.data() + static_cast<size_t>(r) * d, cpu.data());
          encode_row(f, d, 1.0f, x.data() + static_cast<size_t>(r) * d, shared.data(), &p);
          ASSERT_EQ(cpu, shared) << "row " << r;
          codec->dequantize_stored_ref(cpu.data(), want.data());
          decode_row(f, d, 1.0f, cpu.data(), got.data(), &p);
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "row " << r << " element " << i;
          // Queries from the probe rows past the special ones (9..): Gaussian, at many magnitudes.
          for (int qi = 0; qi < 4; ++qi) {
            codec->prepare_query(x.data() + static_cast<size_t>((r + qi) % (kRows - 9) + 9) * d, q.data());
            tqprod_sketch_query(p, d, q.data(), sq.data());
            const float cpu_dot = codec->dot_ref(q.data(), cpu.data(), 0);
            const float shared_dot = tqprod_dot(p, d, q.data(), sq.data(), cpu.data());
            ASSERT_TRUE(same_float(cpu_dot, shared_dot)) << "row " << r << " query " << qi << ": cpu " << cpu_dot
                                                         << " shared " << shared_dot;
            double sum = 0.0, magnitude = 0.0;
            for (int i0 = 0; i0 < d; i0 += 4) {
              tqprod_spans<4>(p, d, cpu.data(), i0, d - i0 < 4 ? d - i0 : 4, mse.data() + i0, qjl.data() + i0);
            }
            for (int i = 0; i < d; ++i) {
              sum += static_cast<double>(q[i]) * mse[i] + static_cast<double>(sq[i]) * qjl[i];
              magnitude += std::fabs(static_cast<double>(q[i]) * mse[i]) + std::fabs(static_cast<double>(sq[i]) * qjl[i]);
            }
            // (Subnormal keys overflow 1/||k|| into NaN codes and scores; those are compared bit for bit above.)
            if (std::isfinite(cpu_dot)) {
              ASSERT_NEAR(sum, cpu_dot, 1e-5 * magnitude + 1e-30) << "row " << r << " query " << qi;
            }
          }
        }
      }
}

// rot=qr: keys rotated by the dense Q as OrthogonalRotation computes it, at head_dims the
// Walsh-Hadamard rotation cannot take, for every kind of TurboQuant row.
TEST(GpuRows, QrRotatedTurboQuantRowsEqualTheCpuReference) {
  constexpr int kRows = 40;
  for (FormatId f : {FormatId::tq1, FormatId::tq2_5, FormatId::tq3, FormatId::tq4, FormatId::tqprod2, FormatId::tqprod4})
    for (int d : {24, 80, 256})
      for (uint64_t seed : {FormatOptions{}.seed, uint64_t{99}}) {
        SCOPED_TRACE(std::string(name_of(f)) + " d " + std::to_string(d) + " seed " + std::to_string(seed));
        FormatOptions options;
        options.rotation = Rotation::qr;
        options.seed = seed;
        if (f == FormatId::tq4) {
          options.norm_correction = true;
          options.outlier_channels = 3;
        }
        const auto codec = make_codec(name_of(f), d, options);
        const std::optional<TqConstants> constants = make_tq_params(f, d, options);
        ASSERT_TRUE(constants.has_value());
        const TqParams& p = constants->params;
        ASSERT_NE(p.rotation_matrix, nullptr);
        const size_t rb = row_bytes(f, d, &p);
        ASSERT_EQ(codec->group_bytes(), rb);
        const std::vector<float> x = probe_rows(d, kRows, 41);
        std::vector<uint8_t> cpu(rb), shared(rb);
        std::vector<float> want(d), got(d), q(d), sq(d), unit(d);
        const OrthogonalRotation cpu_rotation(d, seed);
        for (int r = 0; r < kRows; ++r) {
          const float* row = x.data() + static_cast<size_t>(r) * d;
          // The rotation itself, bit for bit: a last-ulp difference rarely moves a code.
          const float inv = static_cast<float>(1.0 / (1.0 + r));
          for (int i = 0; i < d; ++i) unit[i] = row[i] * inv;
          cpu_rotation.forward(unit.data(), want.data());
          tq_rotate_unit(p, d, row, inv, got.data());
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "rotated row " << r << " element " << i;
          codec->quantize_ref(row, cpu.data());
          encode_row(f, d, 1.0f, row, shared.data(), &p);
          ASSERT_EQ(cpu, shared) << "row " << r;
          codec->dequantize_stored_ref(cpu.data(), want.data());
          decode_row(f, d, 1.0f, cpu.data(), got.data(), &p);
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "row " << r << " element " << i;
          if (is_tqprod(f)) {
            codec->prepare_query(x.data() + static_cast<size_t>((r + 1) % (kRows - 9) + 9) * d, q.data());
            tqprod_sketch_query(p, d, q.data(), sq.data());
            ASSERT_TRUE(same_float(codec->dot_ref(q.data(), cpu.data(), 0), tqprod_dot(p, d, q.data(), sq.data(), cpu.data())))
                << "row " << r;
          }
        }
      }
}

// ggml blocks with rot=hadamard: the rotation as HadamardRotation computes it, rows encoded in
// the rotated basis, and decoded rows rotated back to what the CPU's dequantize gives.
TEST(GpuRows, RotatedGgmlRowsEqualTheCpuReferenceBitForBit) {
  constexpr int kRows = 32;
  for (FormatId f : kv_formats()) {
    if (!entry(f).accepts(kOptionRotation)) continue;
    for (int d : {32, 128, 256})  // 1/sqrt(d) inexact for 32 and 128
      for (uint64_t seed : {FormatOptions{}.seed, uint64_t{12345}}) {
        SCOPED_TRACE(std::string(name_of(f)) + " d " + std::to_string(d) + " seed " + std::to_string(seed));
        FormatOptions options;
        options.rotation = Rotation::hadamard;
        options.seed = seed;
        const auto codec = make_codec(name_of(f), d, options);
        const std::optional<RotationParams> rot = make_rotation_params(d, options);
        ASSERT_TRUE(rot.has_value());
        const HadamardRotation cpu_rotation(d, seed);
        const size_t rb = row_bytes(f, d);
        const std::vector<float> x = probe_rows(d, kRows, 29);
        std::vector<uint8_t> cpu(rb), shared(rb);
        std::vector<float> want(d), got(d), rotated(d);
        for (int r = 0; r < kRows; ++r) {
          const float* row = x.data() + static_cast<size_t>(r) * d;
          cpu_rotation.forward(row, want.data());
          rotate_forward(*rot, d, row, got.data());
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "forward row " << r << " element " << i;
          cpu_rotation.inverse(row, want.data());
          rotate_inverse(*rot, d, row, got.data());
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "inverse row " << r << " element " << i;

          codec->quantize_ref(row, cpu.data());
          encode_row(f, d, 1.0f, row, shared.data(), nullptr, &*rot);
          ASSERT_EQ(cpu, shared) << "encoded row " << r;
          codec->dequantize_stored_ref(cpu.data(), want.data());
          decode_row(f, d, 1.0f, cpu.data(), rotated.data());
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], rotated[i])) << "stored row " << r << " element " << i;
          codec->dequantize_ref(cpu.data(), want.data());
          rotate_inverse(*rot, d, rotated.data(), got.data());
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "decoded row " << r << " element " << i;
        }
      }
  }
  FormatOptions options;
  options.rotation = Rotation::hadamard;
  EXPECT_FALSE(make_rotation_params(96, options).has_value());   // not a power of two
  EXPECT_FALSE(make_rotation_params(512, options).has_value());  // past the kernels' head_dim
  EXPECT_FALSE(make_rotation_params(64, FormatOptions{}).has_value());  // no rotation asked for
  options.scale = 0.5f;
  EXPECT_FALSE(make_rotation_params(64, options).has_value());
}

// ggml blocks with llama.cpp's rot=wht: blocks of 64 and 128 at head_dims whose key block is the
// largest power of two dividing them (128, 192, 256) and the value block of 64, each rotation as
// BlockWalshHadamard computes it and the rows byte for byte as the CPU codec stores them.
TEST(GpuRows, WhtRotatedGgmlRowsEqualTheCpuReferenceBitForBit) {
  constexpr int kRows = 32;
  for (FormatId f : kv_formats()) {
    if (!entry(f).accepts(kOptionRotation)) continue;
    for (int d : {128, 192, 256})
      for (int option_block : {0, 64}) {  // the key rule, the value block
        SCOPED_TRACE(std::string(name_of(f)) + " d " + std::to_string(d) + " option block " + std::to_string(option_block));
        FormatOptions options;
        options.rotation = Rotation::wht;
        options.rotation_block = option_block;
        const auto codec = make_codec(name_of(f), d, options);
        const std::optional<RotationParams> rot = make_rotation_params(d, options);
        ASSERT_TRUE(rot.has_value());
        const int block = option_block == 0 ? (d == 192 ? 64 : d) : 64;
        EXPECT_EQ(rot->block, block);
        const BlockWalshHadamard cpu_rotation(d, block);
        const size_t rb = row_bytes(f, d);
        const std::vector<float> x = probe_rows(d, kRows, 31);
        std::vector<uint8_t> cpu(rb), shared(rb);
        std::vector<float> want(d), got(d), stored(d);
        for (int r = 0; r < kRows; ++r) {
          const float* row = x.data() + static_cast<size_t>(r) * d;
          cpu_rotation.apply(row, want.data());
          rotate_forward(*rot, d, row, got.data());
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "forward row " << r << " element " << i;
          rotate_inverse(*rot, d, row, got.data());
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "inverse row " << r << " element " << i;

          codec->quantize_ref(row, cpu.data());
          encode_row(f, d, 1.0f, row, shared.data(), nullptr, &*rot);
          ASSERT_EQ(cpu, shared) << "encoded row " << r;
          decode_row(f, d, 1.0f, cpu.data(), stored.data());
          codec->dequantize_ref(cpu.data(), want.data());
          rotate_inverse(*rot, d, stored.data(), got.data());
          for (int i = 0; i < d; ++i) ASSERT_TRUE(same_float(want[i], got[i])) << "decoded row " << r << " element " << i;
        }
      }
  }
  FormatOptions wht;
  wht.rotation = Rotation::wht;
  EXPECT_FALSE(make_rotation_params(96, wht).has_value());  // llama.cpp does not rotate: stored plain
  EXPECT_FALSE(make_rotation_params(512, wht).has_value());  // past the kernels' head_dim
  wht.seed = 7;
  EXPECT_FALSE(make_rotation_params(128, wht).has_value());  // wht has no seed
}

// KIVI as the cache stores it: rows pass through the f16 window, keys are quantized a group
// at a time, values a row at a time, each from the window's f16 values.
TEST(GpuRows, KiviGroupsAndRowsEqualTheCpuReferenceBitForBit) {
  for (FormatId f : {FormatId::kivi2_k, FormatId::kivi4_k, FormatId::kivi2_v, FormatId::kivi4_v}) {
    for (int group : {32, 8}) {
      if (is_kivi_value(f) && group != 32) continue;
      SCOPED_TRACE(std::string(name_of(f)) + " group " + std::to_string(group));
      const int d = 64, rows = is_kivi_key(f) ? group : 1, units = 6;
      FormatOptions options;
      if (is_kivi_key(f)) options.token_group = group;
      const auto codec = make_codec(name_of(f), d, options);
      ASSERT_EQ(codec->group_bytes(), unit_bytes(f, d, is_kivi_key(f) ? group : 1));
      std::vector<float> x = probe_rows(d, units * rows, 9);
      std::vector<uint16_t> halves(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        halves[i] = f32_to_f16(x[i]);
        x[i] = f16_to_f32(halves[i]);  // what the window holds
      }
      const size_t ub = codec->group_bytes();
      for (int u = 0; u < units; ++u) {
        const size_t at = static_cast<size_t>(u) * rows * d;
        std::vector<uint8_t> cpu(ub, 0xa5), shared(ub, 0x5a);
        codec->quantize_ref(x.data() + at, cpu.data());
        if (is_kivi_key(f)) encode_kivi_key_group(kivi_bits(f), d, group, halves.data() + at, d, shared.data());
        else encode_kivi_value(kivi_bits(f), d, x.data() + at, shared.data());
        EXPECT_EQ(cpu, shared) << "unit " << u;
        std::vector<float> want(static_cast<size_t>(rows) * d);
        codec->dequantize_ref(cpu.data(), want.data());
        for (int t = 0; t < rows; ++t)
          for (int i = 0; i < d; ++i) {
            const float got = decode_element(f, cpu.data(), i, 1.0f, nullptr, t, d);
            ASSERT_TRUE(same_float(got, want[static_cast<size_t>(t) * d + i])) << "unit " << u << " token " << t << " element " << i;
          }
        float span[4];
        decode_span<4>(f, cpu.data(), 8, 4, 1.0f, span, nullptr, rows - 1, d);
        for (int k = 0; k < 4; ++k) EXPECT_TRUE(same_float(span[k], want[static_cast<size_t>(rows - 1) * d + 8 + k]));
      }
    }
  }
}

template <int N>
void expect_spans_equal_elements(FormatId f, int d, float scale, const std::vector<uint8_t>& rows, int n_rows,
                                 const TqParams* tq) {
  const size_t rb = row_bytes(f, d, tq);
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* row = rows.data() + r * rb;
    for (int i0 = 0; i0 < d; i0 += N) {
      float span[N];
      const int n = d - i0 < N ? d - i0 : N;
      decode_span<N>(f, row, i0, n, scale, span, tq);
      for (int k = 0; k < N; ++k) {
        const float want = k < n ? decode_element(f, row, i0 + k, scale, tq) : 0.0f;
        ASSERT_TRUE(same_float(span[k], want)) << "N " << N << " row " << r << " element " << i0 + k;
      }
    }
  }
}

// The attention kernels decode spans; each element must be what decode_element (and so the
// CPU codec) gives, including a ragged last span.
TEST(GpuRows, SpansDecodeExactlyAsElements) {
  constexpr int kRows = 16;
  for (const Variant& v : variants()) {
    SCOPED_TRACE(v.label);
    const FormatId f = v.format;
    const int d = v.head_dim;
    const float scale = v.options.scale;
    const size_t rb = row_bytes(f, d, v.tq_ptr());
    const std::vector<float> x = probe_rows(d, kRows, 8);
    std::vector<uint8_t> rows(rb * kRows);
    for (int r = 0; r < kRows; ++r) encode_row(f, d, scale, x.data() + r * d, rows.data() + r * rb, v.tq_ptr());
    expect_spans_equal_elements<1>(f, d, scale, rows, kRows, v.tq_ptr());
    expect_spans_equal_elements<2>(f, d, scale, rows, kRows, v.tq_ptr());
    expect_spans_equal_elements<4>(f, d, scale, rows, kRows, v.tq_ptr());
    expect_spans_equal_elements<8>(f, d, scale, rows, kRows, v.tq_ptr());
  }
}

}  // namespace
}  // namespace kvgate::kernels::gpu
