// wgmma (warpgroup MMA) helpers: fences, commit/wait, shared-memory matrix descriptors.
// PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions".
#pragma once
#include <cstdint>

#include "wgmma_ops.cuh"

namespace gemmtrace {

// Shared-memory layouts a descriptor can describe (descriptor bits 62-63).
enum class Swizzle : uint32_t { NONE = 0, B128 = 1, B64 = 2, B32 = 3 };

// Matrix descriptor: start address, leading-dimension byte offset (LBO), stride-dimension byte
// offset (SBO), all in 16-byte units. For K-major operands:
//   no swizzle: core matrices of 8 rows x 16 bytes; LBO = distance between core matrices along K,
//               SBO = distance between core matrices along M/N (8-row groups).
//   128B swizzle: rows of 128 bytes; SBO = 1024 (8 rows), LBO unused (1).
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo, Swizzle swizzle) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(swizzle) << 62);
}

// Registers the warpgroup is about to hand to wgmma are ready (wgmma.fence).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// Wait until at most N committed wgmma groups are still pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keep the compiler from moving accumulator reads/writes across a wgmma wait.
template <int R>
__device__ __forceinline__ void fence_registers(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

}  // namespace gemmtrace
