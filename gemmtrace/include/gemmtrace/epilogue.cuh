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

// TMA-store epilogue: write one panel of a 64 x BN fragment (64 rows, kRowBytes / 2 columns) as
// bf16 into shared memory, [64 rows][kRowBytes] in the matching swizzle, which is what a tensor map
// with that swizzle and box {kRowBytes / 2, 64} stores from:
// - kRowBytes = 128: columns [64p, 64p + 64), 16-byte chunk index XOR row % 8 (SWIZZLE_128B);
// - kRowBytes = 64: columns [32p, 32p + 32), chunk index XOR (row / 2) % 4 (SWIZZLE_64B), for
//   consumer parts an odd number of 32-column halves wide (96).
// Either XOR spreads the eight rows of each 8x8 matrix over all 32 banks, so the stores are
// conflict-free. `panel` is aligned to the swizzle's repeat (1024 or 512 bytes).
// Written with stmatrix (PTX ISA "stmatrix"): each instruction stores four 8x8 bf16 matrices, 16
// bytes per row, a quarter of the instructions of 4-byte stores. The wgmma accumulator fragment of
// an 8-column group is exactly one 8x8 matrix for rows 0-7 (registers 4j, 4j+1) and one for rows
// 8-15 (4j+2, 4j+3), so x4 takes two groups; lane l gives the address of row l % 8 of matrix l / 8.
// One stmatrix.x4 into `panel`: four 8x8 matrices, the panel's column groups 2 * pair and 2 * pair + 1.
template <int kRowBytes>
__device__ __forceinline__ void stmatrix_x4_swizzled(uint32_t panel, int pair, const uint32_t (&r)[4]) {
  static_assert(kRowBytes == 128 || kRowBytes == 64, "the 128- and 64-byte swizzles");
  const int lane = threadIdx.x % 32, warp_in_wg = (threadIdx.x / 32) % 4;
  const int matrix = lane / 8, row = warp_in_wg * 16 + (matrix % 2) * 8 + lane % 8;
  const int chunk = 2 * pair + matrix / 2;
  const uint32_t addr = panel + row * kRowBytes + ((chunk ^ (kRowBytes == 128 ? row % 8 : (row / 2) % 4)) * 16);
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Panel p of the fragment, where bf16_pair(k) gives accumulators 2k and 2k+1 as one bf16 pair
// (register 4j + 2h holds group j's row-half h, so matrix m of an x4 is pair (j0 + m / 2) * 2 + m % 2).
template <int kRowBytes, int BN, class Bf16Pair>
__device__ __forceinline__ void stmatrix_panel_pairs(Bf16Pair bf16_pair, int p, uint32_t panel) {
  constexpr int kGroups = kRowBytes / 16;  // 8-column groups a panel
#pragma unroll
  for (int pair = 0; pair < kGroups / 2; ++pair) {  // column groups 2*pair and 2*pair + 1 of the panel
    const int j0 = p * kGroups + 2 * pair;
    uint32_t r[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) r[m] = bf16_pair((j0 + m / 2) * 2 + m % 2);
    stmatrix_x4_swizzled<kRowBytes>(panel, pair, r);
  }
}

// Straight from the fp32 accumulators, 64-column panels (v5).
template <int BN>
__device__ __forceinline__ void stmatrix_panel_sw128(const float (&acc)[BN / 2], int p, uint32_t panel) {
  stmatrix_panel_pairs<128, BN>([&](int k) { return pack_bf16x2(acc[2 * k], acc[2 * k + 1]); }, p, panel);
}

// The same fragment converted to bf16 pairs first (register k holds accumulators 2k and 2k+1), so
// that the accumulators are free for the next tile's wgmma while the panels are still being stored.
template <int BN>
__device__ __forceinline__ void pack_fragment_bf16(const float (&acc)[BN / 2], uint32_t (&packed)[BN / 4]) {
#pragma unroll
  for (int k = 0; k < BN / 4; ++k) packed[k] = pack_bf16x2(acc[2 * k], acc[2 * k + 1]);
}

// Panel p of a packed fragment, kPanelCols (64 or 32) columns wide.
template <int kPanelCols, int BN>
__device__ __forceinline__ void stmatrix_panel(const uint32_t (&packed)[BN / 4], int p, uint32_t panel) {
  stmatrix_panel_pairs<2 * kPanelCols, BN>([&](int k) { return packed[k]; }, p, panel);
}

}  // namespace gemmtrace
