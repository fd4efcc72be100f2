// A warp-specialized tensor-core GEMM that runs on sm_80, sm_90 and sm_100: C = A·Bᵀ with A (M, K),
// B (N, K) and C (M, N) bf16 row-major, fp32 accumulation. Any M, N >= 1; K a multiple of 8.
//
// One 128x96 output tile per CTA, five warps, two CTAs per SM:
// - warp 0, the loader, copies k-blocks of 32 columns of A and B into a ring of 5 shared-memory
//   stages with cp.async (16 bytes per lane per copy, zero-filled past the edges of A and B);
// - warps 1-4, the math warps, each multiply a 64x48 block of the tile with mma.sync m16n8k16,
//   reading their fragments from shared memory with ldmatrix.
// Why 64x48: two CTAs of five warps put three warps on some SM sub-partition, which caps a thread
// at 168 registers; 96 accumulators leave room for fragments, addresses and the profiler's five
// registers without spilling (a 64x64 block, 128 accumulators, spills in the profiled build).
// Loader and math warps meet at named barriers (bar.sync / bar.arrive), two per stage: FULL (the
// stage's data has landed) and EMPTY (the math warps are done reading it). cp.async completion is
// visible only to the lane that issued the copy, so each loader lane waits for its own copies
// (cp.async.wait_group) and then arrives on FULL; the barrier orders those writes before the math
// warps' reads, as __syncthreads does in a kernel without warp roles.
//
// Profiling (gemmtrace's direct recorder, which works from sm_80 on): the loader records waiting for
// a free stage, issuing its copies and waiting for them to land; the first math warp records waiting
// for data, its MMAs per k-block, and the store of the tile. wsmma<false> compiles without any of it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "gemmtrace/profiler.cuh"
#include "wsmma_gemm.h"
#include "wsmma_gemm_tags.h"

namespace wsmma {

GEMMTRACE_DEFINE_VOCABULARY(WSMMA_ROLES, WSMMA_TAGS);  // wsmma::Role, wsmma::Tag

namespace {

constexpr int BM = kTileM, BN = kTileN, BK = kTileK;
constexpr int kTileBytesA = BM * BK * 2, kTileBytesB = BN * BK * 2;  // rows of 64 bytes
constexpr int kStageBytes = kTileBytesA + kTileBytesB;
static_assert(kStages * kStageBytes == kSmemBytes, "wsmma_gemm.h and the stage layout disagree");
static_assert(BM == 2 * 64 && BN == 2 * 48 && BK == 32 && kConsumerWarps == 4,
              "the loader's and the math warps' mappings below: 2x2 math warps of 64x48, two k16 steps");
// The loader signals a k-block's data kLag k-blocks after issuing it: late enough that the copies
// have usually landed (it never waits long), early enough that the math warps, which are at most
// kStages - 1 k-blocks behind the loader, never wait for the loader to come round (kLag <= kStages - 2).
constexpr int kLag = kStages - 2;
constexpr int kGroupM = 8;  // tile order: 8 row blocks walk across N together, so B stays in L2

// Named barriers (0 is __syncthreads'; 16 per CTA): FULL of stage s is 1 + s, EMPTY is
// 1 + kStages + s. Every one counts all kThreads threads: the loader warp's 32 and the math warps' 128.
// The id is an immediate, chosen by a (warp-uniform) branch on the stage: with an id in a register,
// ptxas must assume the kernel uses all 16 barriers, which can cost CTAs per SM.
constexpr int kFullBarrier = 1, kEmptyBarrier = 1 + kStages;
static_assert(kEmptyBarrier + kStages <= 16, "a CTA has 16 named barriers");

template <bool kArrive, int kId>
__device__ __forceinline__ void named_barrier() {
  if constexpr (kArrive)
    asm volatile("bar.arrive %0, %1;" ::"n"(kId), "n"(kThreads) : "memory");
  else
    asm volatile("bar.sync %0, %1;" ::"n"(kId), "n"(kThreads) : "memory");
}
// bar.sync (kArrive false) or bar.arrive (true) on barrier kBase + s.
template <bool kArrive, int kBase, int kS = 0>
__device__ __forceinline__ void stage_barrier(int s) {
  if constexpr (kS < kStages) {
    if (s == kS)
      named_barrier<kArrive, kBase + kS>();
    else
      stage_barrier<kArrive, kBase, kS + 1>(s);
  }
}

// 16 bytes global -> shared, bypassing L1; with `valid` false nothing is read and the 16 bytes are
// zeros (src-size 0), which is how the tile's rows past M or N and columns past K become zeros.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// The same with a run-time count (the wait takes an immediate): at most `pending` of this lane's
// groups may still be in flight.
__device__ __forceinline__ void cp_async_wait_at_most(int pending) {
  static_assert(kLag <= 3, "extend the cases below");
  if (pending >= 3)
    cp_async_wait<3>();
  else if (pending == 2)
    cp_async_wait<2>();
  else if (pending == 1)
    cp_async_wait<1>();
  else
    cp_async_wait<0>();
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// D (16x8, fp32) += A (16x16, bf16, row-major) * B (16x8, bf16, "col": stored as [n][k]).
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared-memory layout of one operand's k-block: row r holds 32 bf16 = four 16-byte chunks;
// chunk c is stored at chunk c ^ ((r / 2) % 4). ldmatrix reads 8 consecutive rows at one chunk: the
// XOR puts them in 8 different 16-byte bank groups (two rows share 128 bytes), so neither ldmatrix
// nor the loader's stores conflict.
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) { return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4); }

template <bool kProfile>
__global__ void __launch_bounds__(kThreads, 2) wsmma(const __nv_bfloat16* __restrict__ A,
                                                      const __nv_bfloat16* __restrict__ B, __nv_bfloat16* __restrict__ C,
                                                      int M, int N, int K, gemmtrace::ProfileBuffer prof) {
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem0 = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
  const int group_size = kGroupM * grid_n, group = blockIdx.x / group_size;
  const int first_m = group * kGroupM, rows_in_group = min(grid_m - first_m, kGroupM);
  const int m_block = first_m + int(blockIdx.x % group_size) % rows_in_group;
  const int n_block = int(blockIdx.x % group_size) / rows_in_group;
  const uint32_t tile = uint32_t(m_block) * grid_n + n_block;  // the output tile's index, row-major
  const int num_kb = (K + BK - 1) / BK;

  gemmtrace::Recorder<kProfile> rec;
  if (warp == 0) rec.init(prof, /*slot=*/0, Role::LOADER);
  if (warp == 1) rec.init(prof, /*slot=*/1, Role::MATH);

  if (warp == 0) {  // ---------------- loader ----------------
    // Lane l copies chunk l % 4 of rows l / 4 + 8 i of both operands (i < 16 for A, i < 12 for B):
    // 28 copies a k-block. Those rows share (row / 2) % 4, so each lane's swizzled offset is one base
    // plus i * 512.
    const int chunk = lane % 4, row0 = lane / 4;
    const uint32_t dst0 = swizzle(row0, chunk);
    const __nv_bfloat16* a_src = A + (size_t(m_block) * BM + row0) * K + chunk * 8;
    const __nv_bfloat16* b_src = B + (size_t(n_block) * BN + row0) * K + chunk * 8;
    uint32_t a_rows = 0, b_rows = 0;  // bit i: row row0 + 8 i lies inside A (or B)
#pragma unroll
    for (int i = 0; i < BM / 8; ++i) a_rows |= uint32_t(m_block * BM + row0 + 8 * i < M) << i;
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) b_rows |= uint32_t(n_block * BN + row0 + 8 * i < N) << i;
    const size_t step = size_t(8) * K;  // elements between a lane's consecutive rows
    for (int kb = 0; kb < num_kb; ++kb) {
      const int s = kb % kStages;
      uint32_t t0 = rec.now();
      if (kb >= kStages) {  // the stage still holds k-block kb - kStages until the math warps let go
        stage_barrier<false, kEmptyBarrier>(s);  // bar.sync EMPTY[s]
        const uint32_t t1 = rec.now();
        rec.record_span(Tag::WAIT_FREE, t0, t1, tile, kb);
        t0 = t1;
      }
      const int k0 = kb * BK;
      const bool k_ok = k0 + chunk * 8 < K;  // K % 8 == 0: a chunk lies wholly inside K or outside it
      const uint32_t dst_a = smem0 + s * kStageBytes + dst0, dst_b = dst_a + kTileBytesA;
#pragma unroll
      for (int i = 0; i < BM / 8; ++i) {
        const bool ok = k_ok && ((a_rows >> i) & 1);
        cp_async_16(dst_a + i * 512, ok ? a_src + k0 + i * step : A, ok);  // a valid address even when unread
      }
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) {
        const bool ok = k_ok && ((b_rows >> i) & 1);
        cp_async_16(dst_b + i * 512, ok ? b_src + k0 + i * step : B, ok);
      }
      cp_async_commit();
      const uint32_t t1 = rec.now();
      rec.record_span(Tag::LOAD, t0, t1, tile, kb);
      if (kb >= kLag) {  // hand k-block kb - kLag over once this lane's copies of it have landed
        cp_async_wait<kLag>();
        stage_barrier<true, kFullBarrier>((kb - kLag) % kStages);
        rec.record(Tag::WAIT_LANDED, t1, tile, kb - kLag);
      }
    }
    for (int kb = num_kb > kLag ? num_kb - kLag : 0; kb < num_kb; ++kb) {  // the last k-blocks
      const uint32_t t0 = rec.now();
      cp_async_wait_at_most(num_kb - 1 - kb);
      stage_barrier<true, kFullBarrier>(kb % kStages);
      rec.record(Tag::WAIT_LANDED, t0, tile, kb);
    }
  } else {  // ---------------- math warps ----------------
    const int cw = warp - 1, wm = cw / 2, wn = cw % 2;  // this warp's 64x48 block: rows 64 wm, cols 48 wn
    // ldmatrix.x4 addresses. A (16x16 per m-tile): lane l gives row l % 16, chunk l / 16, so the four
    // matrices are mma's a0..a3. B (two 8-column n-tiles, stored [n][k]): lane l gives n-row
    // (l / 16) * 8 + l % 8, chunk (l / 8) % 2, so the matrices are b0, b1 of n-tile 2j and of 2j + 1.
    // All these rows have (row / 2) % 4 == (l / 2) % 4, so the swizzle is a per-lane XOR on the chunk.
    const uint32_t x = (lane >> 1) & 3;
    const uint32_t a_off = (wm * 64 + lane % 16) * 64, b_off = (wn * 48 + (lane / 16) * 8 + lane % 8) * 64;
    const uint32_t a_chunk[2] = {((0 + lane / 16) ^ x) << 4, ((2 + lane / 16) ^ x) << 4};
    const uint32_t b_chunk[2] = {((0 + (lane / 8) % 2) ^ x) << 4, ((2 + (lane / 8) % 2) ^ x) << 4};

    float acc[4][6][4];  // [m-tile of 16 rows][n-tile of 8 columns][fragment]
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 6; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

    uint32_t t0 = rec.now();  // one clock read per boundary: each span starts where the last ended
    for (int kb = 0; kb < num_kb; ++kb) {
      const int s = kb % kStages;
      stage_barrier<false, kFullBarrier>(s);  // bar.sync FULL[s]
      const uint32_t t1 = rec.now();
      rec.record_span(Tag::WAIT_DATA, t0, t1, tile, kb);
      const uint32_t sa = smem0 + s * kStageBytes, sb = sa + kTileBytesA;
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        uint32_t a[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) ldmatrix_x4(a[i], sa + a_off + i * 16 * 64 + a_chunk[kk]);
#pragma unroll
        for (int j = 0; j < 3; ++j) {
          uint32_t b[4];
          ldmatrix_x4(b, sb + b_off + j * 16 * 64 + b_chunk[kk]);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            mma_16816(acc[i][2 * j], a[i], b[0], b[1]);
            mma_16816(acc[i][2 * j + 1], a[i], b[2], b[3]);
          }
        }
      }
      // Every ldmatrix of the stage has returned its registers: the loader may refill it. (No
      // arrival for the last kStages k-blocks: the loader waits for no stage after its last copy.)
      if (kb + kStages < num_kb) stage_barrier<true, kEmptyBarrier>(s);
      t0 = rec.now();
      rec.record_span(Tag::MMA, t1, t0, tile, kb);
    }

    // Epilogue: fragments straight to global memory, rows >= M and columns >= N skipped. Lane l
    // holds, in each 16x8 fragment, columns 2 (l % 4) and +1 of rows l / 4 and l / 4 + 8.
    const int row_base = m_block * BM + wm * 64 + lane / 4, col_base = n_block * BN + wn * 48 + (lane % 4) * 2;
    const bool pairs = (N % 2) == 0;  // bf16x2 stores need 4-byte alignment
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row_base + i * 16 + h * 8;
        if (row >= M) continue;
        __nv_bfloat16* c_row = C + size_t(row) * N;
#pragma unroll
        for (int j = 0; j < 6; ++j) {
          const int col = col_base + j * 8;
          const float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
          if (pairs && col < N) {
            *reinterpret_cast<__nv_bfloat162*>(c_row + col) = __floats2bfloat162_rn(v0, v1);
          } else {
            if (col < N) c_row[col] = __float2bfloat16_rn(v0);
            if (col + 1 < N) c_row[col + 1] = __float2bfloat16_rn(v1);
          }
        }
      }
    rec.record(Tag::STORE, t0, tile);
  }
  rec.finish();
}

int fail(char* err, int errlen, const char* msg) {
  if (err && errlen > 0) std::snprintf(err, size_t(errlen), "%s", msg);
  return 1;
}

}  // namespace

int plan(int64_t m, int64_t n, int64_t k, Plan* p, char* err, int errlen) {
  if (m < 1 || n < 1 || k < 1) return fail(err, errlen, "M, N and K must be positive.");
  if (k % 8 != 0) return fail(err, errlen, "K must be a multiple of 8 (16-byte rows for cp.async).");
  // 2^30 keeps every row and column index of the kernel (int) clear of overflow.
  if (m > (1 << 30) || n > (1 << 30) || k > (1 << 30)) return fail(err, errlen, "M, N and K must each be at most 2^30.");
  const int64_t ctas = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
  if (ctas > INT32_MAX) return fail(err, errlen, "the shape needs more than 2^31 - 1 CTAs.");
  const int64_t num_kb = (k + BK - 1) / BK;
  // The loader records up to three spans per k-block; the math warp two, plus the store.
  if (3 * num_kb + 4 > INT32_MAX) return fail(err, errlen, "K is too large to trace.");
  *p = Plan{ctas, kRegionsPerCta, int32_t(3 * num_kb + 4)};
  return 0;
}

int launch(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k, bool profile, uint32_t* prof_data,
           uint32_t prof_capacity, uint32_t prof_regions_per_cta, void* stream, char* err, int errlen) {
  Plan p;
  if (plan(m, n, k, &p, err, errlen)) return 1;
  if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(c)) % 16 != 0)
    return fail(err, errlen, "A, B and C must start at 16-byte aligned addresses.");
  if (profile && (prof_data == nullptr || prof_regions_per_cta < kRegionsPerCta))
    return fail(err, errlen, "the profiled build needs a profiler buffer with 2 regions per CTA.");
  auto kernel = profile ? wsmma<true> : wsmma<false>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  // Two CTAs per SM need 140 KiB of shared memory: ask for the largest carveout.
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (e == cudaSuccess) {
    kernel<<<unsigned(p.ctas), kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
        static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b), static_cast<__nv_bfloat16*>(c),
        int(m), int(n), int(k), gemmtrace::ProfileBuffer{prof_data, prof_capacity, prof_regions_per_cta});
    e = cudaGetLastError();
  }
  if (e != cudaSuccess) {
    if (err && errlen > 0) std::snprintf(err, size_t(errlen), "launching wsmma failed: %s.", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}

}  // namespace wsmma
