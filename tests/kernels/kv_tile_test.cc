// The tile loaders and copy schedule of the GPU attention kernels (kernels/gpu/kv_tile.h),
// compiled for the host: every loader turns page bytes laid out as a tile in shared memory into
// exactly the CPU codec's decoded values, for every format of every kernel pair at every kernel
// head_dim and for every other format with GPU rows, at each run length the kernels decode; and the copy runs cover each row once, in
// whole 16-byte copies that never leave their page. tests/gpu repeats the values on a device,
// where the fp8 loader converts with the hardware.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/kv_tile.h"
#include "kernels/gpu/tq_params.h"
#include "kernels/kv_format.h"
#include "tests/kernels/gpu_row_cases.h"

namespace kvgate::kernels::gpu {
namespace {

using testing::probe_rows;
using testing::same_float;

// Rows of format F at head_dim d, quantized by the CPU codec and placed as the kernel places them
// in a tile (padded stride), decoded by KvTile at run length N; each value against the codec's
// (in the stored basis: TurboQuant keys stay rotated, as attention reads them).
template <FormatId F, int N>
void expect_tile_decodes_like_cpu(int d) {
  using Tile = KvTile<typename RowsFor<F>::type>;
  FormatOptions options;
  options.scale = testing::tensor_scale_for(F);
  const auto codec = make_codec(kv_format_name(F), d, options);
  const std::optional<TqConstants> tq = is_tq(F) ? make_tq_params(F, d, options) : std::nullopt;
  const int rows = 13;
  const int rb = static_cast<int>(codec->group_bytes());
  ASSERT_EQ(static_cast<size_t>(rb), row_bytes(F, d, tq ? &tq->params : nullptr));
  const int stride = tile_row_stride(rb);
  // 16-byte aligned, as shared memory is; poisoned between the rows.
  std::vector<uint8_t> storage(static_cast<size_t>(rows) * stride + 32, 0xA5);
  uint8_t* tile = storage.data() + (16 - reinterpret_cast<uintptr_t>(storage.data()) % 16) % 16;
  const std::vector<float> x = probe_rows(d, rows, 7 + d);
  std::vector<float> want(static_cast<size_t>(rows) * d);
  for (int r = 0; r < rows; ++r) {
    codec->quantize_ref(x.data() + static_cast<size_t>(r) * d, tile + r * stride);
    codec->dequantize_stored_ref(tile + r * stride, want.data() + static_cast<size_t>(r) * d);
  }
  const RowArgs args{d, options.scale, tq ? &tq->params : nullptr, nullptr, 0};
  for (int r = 0; r < rows; ++r)
    for (int i0 = 0; i0 < d; i0 += N) {
      float y[N];
      Tile::template decode<N>(args, tile + r * stride, i0, y);
      for (int k = 0; k < N; ++k)
        ASSERT_TRUE(same_float(y[k], want[static_cast<size_t>(r) * d + i0 + k]))
            << kv_format_name(F) << " head_dim " << d << " run " << N << " row " << r << " element " << i0 + k
            << ": got " << y[k] << " want " << want[static_cast<size_t>(r) * d + i0 + k];
    }
}

template <FormatId F>
void expect_format_tiles(int d) {
  expect_tile_decodes_like_cpu<F, 2>(d);
  expect_tile_decodes_like_cpu<F, 4>(d);
  expect_tile_decodes_like_cpu<F, 8>(d);
}

template <size_t... I>
void expect_every_pair(int d, std::index_sequence<I...>) {
  ((expect_format_tiles<kKernelPairs[I].key>(d), expect_format_tiles<kKernelPairs[I].value>(d)), ...);
}

TEST(KvTile, EveryKernelFormatDecodesPageBytesToTheCpuCodecValues) {
  for (const KernelHeadDim& hd : kKernelHeadDims) {
    SCOPED_TRACE("head_dim " + std::to_string(hd.head_dim));
    expect_every_pair(hd.head_dim, std::make_index_sequence<std::size(kKernelPairs)>{});
  }
}

// Every format with GPU rows, in the pair table or not (f32, u2, u3, u8, ...), at head_dim 64, 128
// and 256, so a pair added to the table meets a loader already held to the CPU codec; KIVI keys
// (a group per unit) and tqprod (a sketch beside the codes) have no tile loader.
#define KVGATE_TILE_TEST_FORMAT(id, ...) FormatId::id,
constexpr FormatId kGpuRowFormats[] = {KVGATE_GPU_ROWS(KVGATE_TILE_TEST_FORMAT)};
#undef KVGATE_TILE_TEST_FORMAT

template <size_t... I>
int expect_every_row_format(int d, std::index_sequence<I...>) {
  int tested = 0;
  auto one = [&](auto f) {
    constexpr FormatId F = decltype(f)::value;
    if (is_kivi(F) || is_tqprod(F)) return;
    expect_format_tiles<F>(d);
    ++tested;
  };
  (one(std::integral_constant<FormatId, kGpuRowFormats[I]>{}), ...);
  return tested;
}

TEST(KvTile, EveryGpuRowFormatDecodesPageBytesToTheCpuCodecValues) {
  for (int d : {64, 128, 256}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    const int tested = expect_every_row_format(d, std::make_index_sequence<std::size(kGpuRowFormats)>{});
    EXPECT_EQ(tested, static_cast<int>(std::size(kGpuRowFormats)) - 7);  // but kivi{2,4}_{k,v} and tqprod{2,3,4}
  }
}

TEST(KvTile, KernelPairsAreRegistryFormatsInTheirRoles) {
  for (const KvPair& p : kKernelPairs) {
    const FormatInfo* key = find_format(p.key);
    const FormatInfo* value = find_format(p.value);
    ASSERT_NE(key, nullptr);
    ASSERT_NE(value, nullptr);
    EXPECT_TRUE(key->for_keys) << key->name;
    EXPECT_TRUE(value->for_values) << value->name;
    // Formats stored through a window or scored against a sketch have no tile loader.
    EXPECT_EQ(key->gpu == GpuStorage::rows || key->gpu == GpuStorage::turboquant, true) << key->name;
    EXPECT_FALSE(is_tqprod(p.key) || is_kivi(p.key) || is_kivi(p.value)) << key->name;
    EXPECT_TRUE(p.kinds != 0 && (p.kinds & ~kBothKernels) == 0) << key->name;
    EXPECT_TRUE(has_kernel(kPrefillKernel, p.key, p.value, 128) || has_kernel(kDecodeKernel, p.key, p.value, 128));
  }
  EXPECT_FALSE(has_kernel(kDecodeKernel, FormatId::q4_1, FormatId::f16, 128));
  EXPECT_FALSE(has_kernel(kDecodeKernel, FormatId::f16, FormatId::f16, 96));
  // The pairs whose decode kernel spills have the prefill kernel only.
  EXPECT_FALSE(has_kernel(kDecodeKernel, FormatId::q4_0, FormatId::q4_0, 128));
  EXPECT_TRUE(has_kernel(kPrefillKernel, FormatId::q4_0, FormatId::q4_0, 128));
  EXPECT_TRUE(has_kernel(kPrefillKernel, FormatId::f16, FormatId::f16, 64));
  EXPECT_FALSE(has_kernel(kDecodeKernel, FormatId::f16, FormatId::f16, 64));
}

// Copy runs of a tile: each row asked for lies in exactly one run, runs are whole 16-byte copies
// from 16-byte aligned pool offsets into 16-byte aligned tile offsets, and no run leaves its page.
TEST(KvTile, CopyRunsCoverEachRowOnceInAlignedCopiesInsideTheirPage) {
  for (int row_bytes : {10, 66, 72, 132, 136, 256, 512}) {
    for (int page_tokens : {16, 32, 48}) {
      const int heads = 3, tokens = 150;
      const int pages = (tokens + page_tokens - 1) / page_tokens;
      std::vector<int32_t> order(pages);  // the pool pages in reverse
      for (int i = 0; i < pages; ++i) order[i] = pages - 1 - i;
      const size_t page_bytes = static_cast<size_t>(page_tokens) * row_bytes;
      for (int h = 0; h < heads; ++h)
        for (int t0 = 0; t0 < tokens; t0 += kTileTokens) {
          const int t_end = std::min(tokens, t0 + kTileTokens);
          std::vector<int> seen(t_end - t0, 0);
          tile_runs(order.data(), heads, page_tokens, row_bytes, h, t0, t_end, [&](const TileRun& run) {
            EXPECT_EQ(run.src % kCopyBytes, 0u);
            EXPECT_EQ(run.dst % kCopyBytes, 0);
            EXPECT_EQ(run.bytes % kCopyBytes, 0);
            EXPECT_GE(run.bytes, run.rows * row_bytes);
            const size_t page_start = (run.src / page_bytes) * page_bytes;
            EXPECT_LE(run.src + run.bytes, page_start + page_bytes) << "a run left its page";
            const size_t page = run.src / (page_bytes * heads);
            EXPECT_EQ(static_cast<int32_t>(page), order[run.first / page_tokens]);
            for (int r = 0; r < run.rows; ++r) ++seen[run.first - t0 + r];
            // The copy destinations of the run land on its rows' places in the tile.
            for (int c = 0; c < run.bytes / kCopyBytes; ++c) {
              const int dst = tile_copy_dst(run, row_bytes, c);
              EXPECT_EQ(dst % kCopyBytes, 0);
              EXPECT_LE(dst + kCopyBytes, tile_bytes(row_bytes));
            }
          });
          for (int count : seen) EXPECT_EQ(count, 1) << "row_bytes " << row_bytes << " page " << page_tokens;
        }
    }
  }
}

}  // namespace
}  // namespace kvgate::kernels::gpu
