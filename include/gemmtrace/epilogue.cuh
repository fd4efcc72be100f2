// Epilogue helpers: moving a warpgroup's wgmma accumulator fragment (fp32, registers) out as bf16.
//
// The m64nNk16 accumulator layout (PTX ISA "wgmma 64N16 D matrix fragment"): warp w of the
// warpgroup owns rows 16w..16w+15; lane l holds, for each 8-column group j, the column pair
// (j*8 + (l%4)*2, +1) in row l/4 (registers 4j, 4j+1) and in row l/4 + 8 (registers 4j+2, 4j+3).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace gemmtrace {

// Plain epilogue: store a 64 x BN fragment straight to global memory (row-major C, ldc = N),
// clipping rows >= M and columns >= N. `row0`, `col0`: the fragment's first row and column.
template <int BN>
__device__ __forceinline__ void store_fragment_global(const float (&acc)[BN / 2], __nv_bfloat16* c, int M, int N,
                                                      int row0, int col0) {
  const int lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x / 32) % 4;
  const bool pair_ok = (N % 2) == 0;  // bf16x2 stores need 4-byte alignment
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = col0 + j * 8 + (lane % 4) * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + warp_in_wg * 16 + lane / 4 + h * 8;
      if (row >= M) continue;
      const float v0 = acc[j * 4 + h * 2], v1 = acc[j * 4 + h * 2 + 1];
      __nv_bfloat16* dst = c + size_t(row) * N + col;
      if (pair_ok && col + 1 < N) {
        *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(v0, v1);
      } else {
        if (col < N) dst[0] = __float2bfloat16_rn(v0);
        if (col + 1 < N) dst[1] = __float2bfloat16_rn(v1);
      }
    }
  }
}

// TMA-store epilogue: write columns [64p, 64p + 64) of a 64 x BN fragment as bf16 into one panel
// of shared memory, [64 rows][128 bytes] in the 128-byte swizzle (16-byte chunk index XOR row % 8),
// which is what a SWIZZLE_128B tensor map with box {64, 64} stores from. The XOR also spreads a
// warp's 8 rows over all 32 banks, so these 4-byte writes are conflict-free.
template <int BN>
__device__ __forceinline__ void write_panel_smem_sw128(const float (&acc)[BN / 2], int p, uint8_t* panel) {
  const int lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x / 32) % 4;
#pragma unroll
  for (int chunk = 0; chunk < 8; ++chunk) {
    const int j = p * 8 + chunk;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_in_wg * 16 + lane / 4 + h * 8;
      const __nv_bfloat162 v = __floats2bfloat162_rn(acc[j * 4 + h * 2], acc[j * 4 + h * 2 + 1]);
      *reinterpret_cast<__nv_bfloat162*>(panel + row * 128 + ((chunk ^ (row % 8)) * 16) + (lane % 4) * 4) = v;
    }
  }
}

}  // namespace gemmtrace
