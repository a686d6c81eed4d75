#pragma once
// toy_i16, a KV format that exists only in the tests (tests/kernels/toy_format.cc): a binary
// that links that file has it registered next to the built-in formats.
#include <string_view>

#include "kernels/kv_format.h"

namespace kvgate::kernels::testing {

inline constexpr std::string_view kToyFormatName = "toy_i16";
const FormatInfo& toy_format();

}  // namespace kvgate::kernels::testing
