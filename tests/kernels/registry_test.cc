#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/kv_config.h"
#include "kernels/kv_format.h"
#include "tests/kernels/toy_format.h"

namespace kvgate::kernels {
namespace {

TEST(Registry, NamesAreUniqueAndFindable) {
  std::set<std::string> names;
  for (const FormatInfo* f : all_formats()) {
    EXPECT_TRUE(names.insert(std::string(f->name)).second) << f->name;
    EXPECT_EQ(find_format(f->name), f);
    EXPECT_TRUE(f->for_keys || f->for_values) << f->name;
  }
  EXPECT_EQ(find_format("no_such_format"), nullptr);
}

// Every built-in format has its own id, and the id finds its entry (what the SIMD and GPU
// dispatch switch on).
TEST(Registry, BuiltInIdsAreUniqueAndFindTheirEntries) {
  std::set<FormatId> ids;
  for (const FormatInfo* f : all_formats()) {
    if (f->id == FormatId::external) continue;
    EXPECT_TRUE(ids.insert(f->id).second) << f->name;
    EXPECT_EQ(find_format(f->id), f) << f->name;
  }
  EXPECT_EQ(ids.size(), static_cast<size_t>(FormatId::external));  // every enumerator has an entry
  EXPECT_EQ(find_format(FormatId::external), nullptr);
}

// A format registered at run time (tests/kernels/toy_format.cc, its only mention) is wherever the
// registry is read: found by name, listed after the built-in ones by `kvgate kv list`'s rows, in
// the benchmark's default format list, accepted by the spec parser, CPU only.
TEST(Registry, ARegisteredFormatIsFoundListedBenchmarkedAndParsed) {
  const FormatInfo& toy = testing::toy_format();
  EXPECT_EQ(find_format(testing::kToyFormatName), &toy);
  EXPECT_EQ(all_formats().back(), &toy);

  bool listed = false;
  for (const FormatListing& row : format_listing()) {
    if (row.info != &toy) continue;
    listed = true;
    EXPECT_EQ(row.roles, "k,v");
    EXPECT_EQ(row.bits_per_element_128, 8.0 * (4 + 2 * 128) / 128);
    EXPECT_EQ(row.bytes_per_token_128, 4.0 + 2 * 128);
    EXPECT_EQ(row.token_group, 1);
  }
  EXPECT_TRUE(listed);

  const std::vector<const FormatInfo*> all = formats_named({}, "bench kernels");
  EXPECT_NE(std::find(all.begin(), all.end(), &toy), all.end());
  const std::vector<std::string> names = {"q8_0", std::string(testing::kToyFormatName)};
  EXPECT_EQ(formats_named(names, "bench kernels"), (std::vector<const FormatInfo*>{find_format("q8_0"), &toy}));
  try {
    formats_named(std::vector<std::string>{"no_such_format"}, "bench kernels");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("bench kernels: unknown format 'no_such_format'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(testing::kToyFormatName), std::string::npos);
  }

  const KvConfig config = parse_kv_config("toy_i16/f16");
  EXPECT_EQ(config.key.format, &toy);
  EXPECT_EQ(config.canonical(), "toy_i16/f16");
  EXPECT_THROW(parse_kv_config("toy_i16:scale=2"), Error);  // the entry takes no options

  EXPECT_EQ(toy.backends(), kBackendCpu);
  EXPECT_FALSE(gpu::kv_format_named(testing::kToyFormatName).has_value());
  const std::vector<FormatId> gpu_formats = gpu::kv_formats();
  EXPECT_EQ(std::find(gpu_formats.begin(), gpu_formats.end(), FormatId::external), gpu_formats.end());
}

// The registry refuses an entry that would make a lookup ambiguous or claim kernels it lacks.
TEST(Registry, RegistrationRejectsClashes) {
  const size_t before = all_formats().size();
  auto expect_internal_error = [](const FormatInfo& f) {
    try {
      register_format(f);
      ADD_FAILURE() << "registered " << f.name;
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 3) << e.what();
    }
  };
  static FormatInfo same_name = testing::toy_format();
  expect_internal_error(same_name);
  static FormatInfo builtin_id = testing::toy_format();
  builtin_id.name = "toy_builtin_id";
  builtin_id.id = FormatId::q8_0;
  expect_internal_error(builtin_id);
  static FormatInfo gpu_claim = testing::toy_format();
  gpu_claim.name = "toy_gpu";
  gpu_claim.gpu = GpuStorage::rows;
  expect_internal_error(gpu_claim);
  EXPECT_EQ(all_formats().size(), before);
}

TEST(Registry, UnknownNameIsAUsageErrorListingValidNames) {
  try {
    make_codec("no_such_format", 64);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("f16"), std::string::npos);
  }
}

}  // namespace
}  // namespace kvgate::kernels
