#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/kv_format.h"

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
