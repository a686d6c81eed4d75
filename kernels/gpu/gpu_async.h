#pragma once
// The thin per-vendor layer under the tile kernels: a 16-byte global-to-shared copy and the wait
// for the copies issued so far. CUDA (sm_80 and later) copies asynchronously with cp.async, so
// a tile's bytes move while the previous tile is computed; HIP has no such copy on the targets
// kvgate builds for, so there it is a plain 16-byte load and store, complete when issued (and
// the kernels keep one buffer: attention_plan.h kTileStages). Device code only.
#include <cstdint>

#include "kernels/gpu/vendor.h"

namespace kvgate::kernels::gpu {

// dst and src 16-byte aligned; dst in shared memory.
__device__ __forceinline__ void copy16_async(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned smem = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  // .cg: cache in L2 only; each K/V byte is read once per step, so L1 would only be evicted.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(src) : "memory");
#else
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
#endif
}

// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void copy_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `pending` committed groups are still in flight (this thread's copies;
// a barrier then makes every thread's visible to the block).
template <int pending>
__device__ __forceinline__ void copy_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
#endif
}

}  // namespace kvgate::kernels::gpu
