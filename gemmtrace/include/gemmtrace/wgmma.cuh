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

// A K-major tile in the 128-byte swizzle (what a SWIZZLE_128B tensor map with a 64-element box
// writes): rows of 128 bytes, 8-row groups 1024 bytes apart (SBO); LBO is unused for this layout.
// Stepping k16 within the 64-wide atom adds 32 bytes to `addr`: the hardware swizzles the address
// it computes, so the tile base must be 1024-byte aligned.
__device__ __forceinline__ uint64_t make_desc_sw128(uint32_t addr) { return make_smem_desc(addr, 16, 1024, Swizzle::B128); }

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

// Warp specialization (PTX ISA "setmaxnreg"): hand registers from the producer warpgroup to the
// consumers. Takes effect only with a register cap at kernel entry (__launch_bounds__(threads, 1)).
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}

}  // namespace gemmtrace
