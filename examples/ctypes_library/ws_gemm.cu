// A warp-specialized Hopper GEMM (sm_90a) in a plain shared library, for ctypes or any C caller:
// C = A·Bᵀ with A (M, K), B (N, K) and C (M, N) bf16 row-major, fp32 accumulation. Any M, N >= 1;
// K a multiple of 8 (TMA needs 16-byte row strides).
//
// One 128x128 output tile per CTA, two warpgroups:
// - warpgroup 0, the producer: one elected lane waits for a free stage and loads the stage's
//   128x64 k-blocks of A and B with TMA (the tensor maps use the 128-byte swizzle that wgmma reads;
//   TMA zero-fills what lies past M, N or K), running up to 4 stages ahead;
// - warpgroup 1, the math warpgroup: per k-block, eight wgmma m64n128k16 (rows 0-63 and 64-127 of
//   the tile, four k16 steps), operands from shared memory, accumulators in registers; then the
//   epilogue stores the tile straight from registers, clipped to M and N.
// The two meet only at mbarriers: FULL[s] (one producer arrival + the TMA bytes of stage s) and
// EMPTY[s] (one arrival per math warp once its wgmmas that read stage s have retired).
//
// Profiling (gemmtrace's direct recorder): the producer lane records waiting for a free stage and
// issuing its loads; the first math warp records waiting for a full stage, its MMAs per k-block and
// the store. ws_gemm_kernel<false> compiles without any of it.
#include <cuda.h>  // CUtensorMap and the driver API's types; the encoder comes through the runtime (no -lcuda)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "gemmtrace/mbarrier.cuh"
#include "gemmtrace/profiler.cuh"
#include "gemmtrace/tma.cuh"
#include "gemmtrace/wgmma.cuh"
#include "ws_gemm_tags.h"

namespace ws_gemm {

GEMMTRACE_DEFINE_VOCABULARY(WS_GEMM_ROLES, WS_GEMM_TAGS);  // ws_gemm::Role, ws_gemm::Tag

namespace {

constexpr int BM = 128, BN = 128, BK = 64, kStages = 4;
constexpr int kThreads = 256;  // the producer warpgroup and the math warpgroup
constexpr int kTileBytesA = BM * BK * 2, kTileBytesB = BN * BK * 2;  // rows of 128 bytes: one swizzle atom wide
static_assert(BM == BN && BK * 2 == 128, "one tensor-map box ({BK, BM}) serves both operands");
constexpr int kStageBytes = kTileBytesA + kTileBytesB;
constexpr int kSmemBytes = 1024 + kStages * kStageBytes + 2 * kStages * 8;  // 1 KiB for alignment, barriers last
constexpr int kRegionsPerCta = 2;  // recording warps: the producer and one math warp
constexpr int kGroupM = 8;         // tile order: 8 row blocks walk across N together, so B stays in L2
enum BarrierId : uint32_t { kFullBarrier = 0, kEmptyBarrier = 1 };  // for debug builds' hang reports

template <bool kProfile>
__global__ void __launch_bounds__(kThreads, 1) ws_gemm_kernel(const __grid_constant__ CUtensorMap tmap_a,
                                                              const __grid_constant__ CUtensorMap tmap_b,
                                                              __nv_bfloat16* __restrict__ C, int M, int N, int K,
                                                              gemmtrace::ProfileBuffer prof) {
  extern __shared__ uint8_t smem_raw[];
  // The 128-byte swizzle repeats every 1024 bytes, and TMA and wgmma agree on it only from a
  // 1024-byte aligned base.
  const uint32_t stage0 = (gemmtrace::smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t full0 = stage0 + kStages * kStageBytes, empty0 = full0 + kStages * 8;
  auto smem_a = [&](int s) { return stage0 + s * kStageBytes; };
  auto smem_b = [&](int s) { return stage0 + s * kStageBytes + kTileBytesA; };
  auto full = [&](int s) { return full0 + s * 8; };
  auto empty = [&](int s) { return empty0 + s * 8; };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const int grid_m = (M + BM - 1) / BM, grid_n = (N + BN - 1) / BN;
  const int group_size = kGroupM * grid_n, group = blockIdx.x / group_size;
  const int first_m = group * kGroupM, rows_in_group = min(grid_m - first_m, kGroupM);
  const int m_block = first_m + int(blockIdx.x % group_size) % rows_in_group;
  const int n_block = int(blockIdx.x % group_size) / rows_in_group;
  const uint32_t tile = uint32_t(m_block) * grid_n + n_block;  // the output tile's index, row-major
  const int num_kb = (K + BK - 1) / BK;

  gemmtrace::Recorder<kProfile> rec;
  if (warp == 0) rec.init(prof, /*slot=*/0, Role::TMA);
  if (warp == 4) rec.init(prof, /*slot=*/1, Role::MATH);
  uint32_t t = rec.now();
  if (threadIdx.x == 0) {
    gemmtrace::tma_prefetch_descriptor(&tmap_a);
    gemmtrace::tma_prefetch_descriptor(&tmap_b);
    for (int s = 0; s < kStages; ++s) {
      gemmtrace::mbarrier_init(full(s), 1);  // the producer's arrive.expect_tx
      gemmtrace::mbarrier_init(empty(s), 4);  // one arrival per math warp
    }
    gemmtrace::mbarrier_init_fence();  // the barriers are initialized before TMA (the async proxy) sees them
  }
  __syncthreads();
  t = rec.record(Tag::SETUP, t, tile);

  if (warp < 4) {  // ---------------- producer ----------------
    // One lane runs the whole loop: no warp-wide convergence per k-block, and so no cost to recording
    // from it (the other 127 threads go straight to finish()).
    if (warp == 0 && lane == 0) {
      for (int kb = 0; kb < num_kb; ++kb) {
        const int s = kb % kStages;
        // Pass p over the ring waits for phase p - 1 of EMPTY[s]; on pass 0 the parity trick makes
        // the wait on the "previous" phase of a fresh barrier succeed at once.
        const uint32_t parity = ((kb / kStages) & 1) ^ 1;
        if (!gemmtrace::mbarrier_try_wait(empty(s), parity)) {  // record a wait only when there is one
          const uint32_t from = rec.now();
          gemmtrace::mbarrier_wait(empty(s), parity,
                                   gemmtrace::WaitSite{uint32_t(Role::TMA), kEmptyBarrier, tile, uint32_t(kb)});
          t = rec.record(Tag::WAIT_SLOT, from, tile, kb);
        }
        gemmtrace::mbarrier_arrive_expect_tx(full(s), kStageBytes);  // zero-filled bytes count too
        gemmtrace::tma_load_2d(smem_a(s), &tmap_a, full(s), kb * BK, m_block * BM);
        gemmtrace::tma_load_2d(smem_b(s), &tmap_b, full(s), kb * BK, n_block * BN);
        t = rec.record(Tag::LOAD, t, tile, kb);  // from the stage being free to its loads issued
      }
    }
  } else {  // ---------------- math warpgroup ----------------
    float acc[2][BN / 2];  // m64n128 accumulators of rows 0-63 and 64-127 of the tile
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[h][i] = 0.f;

    // k-block kb's wgmmas are issued, then the wait retires kb - 1's (kb stays queued, so the tensor
    // cores never drain between k-blocks), and kb - 1's stage goes back to the producer. A k-block's
    // MMA span runs from the retirement of the one before to its own; it is stored one k-block late,
    // after the next wgmmas are issued, so no clock read holds up an issue.
    uint32_t mma_from = 0, done_from = 0, done_to = 0;  // done_*: k-block kb - 1's span, not yet stored
    for (int kb = 0; kb < num_kb; ++kb) {
      const int s = kb % kStages;
      const uint32_t parity = (kb / kStages) & 1;
      if (!gemmtrace::mbarrier_try_wait(full(s), parity)) {  // the tensor cores may starve here: record it
        const uint32_t from = rec.now();
        gemmtrace::mbarrier_wait(full(s), parity,
                                 gemmtrace::WaitSite{uint32_t(Role::MATH), kFullBarrier, tile, uint32_t(kb)});
        rec.record(Tag::WAIT_STAGE, from, tile, kb);
      }
      if (kb == 0) mma_from = rec.now();
      gemmtrace::wgmma_fence();
#pragma unroll
      for (int k16 = 0; k16 < BK / 16; ++k16)
#pragma unroll
        for (int h = 0; h < 2; ++h)  // 32 bytes per k16 step inside the 128-byte swizzled rows
          gemmtrace::wgmma_bf16<BN>(acc[h], gemmtrace::make_desc_sw128(smem_a(s) + h * 64 * 128 + k16 * 32),
                                    gemmtrace::make_desc_sw128(smem_b(s) + k16 * 32), (kb > 0 || k16 > 0) ? 1 : 0);
      gemmtrace::wgmma_commit();
      if (kb >= 2) rec.record_span(Tag::MMA, done_from, done_to, tile, kb - 2);
      gemmtrace::wgmma_wait<1>();  // k-block kb - 1 has retired: its stage is no longer read
      if (kb > 0) {
        done_from = mma_from;
        done_to = mma_from = rec.now();
        if (lane == 0) gemmtrace::mbarrier_arrive(empty((kb - 1) % kStages));
      }
    }
    gemmtrace::wgmma_wait<0>();
    gemmtrace::fence_registers(acc[0]);  // no accumulator read may move above the wait
    gemmtrace::fence_registers(acc[1]);
    t = rec.now();  // the last k-block retired; the epilogue starts here
    if (num_kb >= 2) rec.record_span(Tag::MMA, done_from, done_to, tile, num_kb - 2);
    rec.record_span(Tag::MMA, mma_from, t, tile, num_kb - 1);

    // Epilogue: the accumulator layout of wgmma m64nNk16 gives warp w of the warpgroup rows
    // 16 w .. 16 w + 15 of each half; lane l holds, per 8-column group j, columns 8 j + 2 (l % 4)
    // and +1 of rows l / 4 (registers 4 j, 4 j + 1) and l / 4 + 8 (4 j + 2, 4 j + 3).
    const int row_base = m_block * BM + (warp % 4) * 16 + lane / 4, col_base = n_block * BN + (lane % 4) * 2;
    const bool pairs = (N % 2) == 0;  // bf16x2 stores need 4-byte alignment
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row_base + h * 64 + r * 8;
        if (row >= M) continue;
        __nv_bfloat16* c_row = C + size_t(row) * N;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          const int col = col_base + j * 8;
          const float v0 = acc[h][4 * j + 2 * r], v1 = acc[h][4 * j + 2 * r + 1];
          if (pairs && col < N) {
            *reinterpret_cast<__nv_bfloat162*>(c_row + col) = __floats2bfloat162_rn(v0, v1);
          } else {
            if (col < N) c_row[col] = __float2bfloat16_rn(v0);
            if (col + 1 < N) c_row[col + 1] = __float2bfloat16_rn(v1);
          }
        }
      }
    rec.record(Tag::STORE, t, tile);
  }
  rec.finish();
}

int fail(char* err, int errlen, const char* msg) {
  if (err && errlen > 0) std::snprintf(err, size_t(errlen), "%s", msg);
  return 1;
}

// cuTensorMapEncodeTiled, from the driver through the runtime: the library links only cudart.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encoder() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// A (rows, K) row-major bf16 operand as a 2-D tensor map whose box is a 128-row k-block, 64 columns
// (128 bytes, one swizzle atom) wide. Elements past the matrix read as zeros.
int encode_operand(CUtensorMap* map, const void* ptr, int64_t rows, int64_t k, const char* name, char* err, int errlen) {
  const EncodeTiled encode = encoder();
  if (!encode) return fail(err, errlen, "the CUDA driver does not provide cuTensorMapEncodeTiled (TMA needs driver 12.0 or newer).");
  const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(rows)};  // innermost first
  const cuuint64_t strides[1] = {cuuint64_t(k) * 2};              // bytes between rows
  const cuuint32_t box[2] = {BK, BM};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(ptr), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    if (err && errlen > 0) std::snprintf(err, size_t(errlen), "encoding the tensor map of %s failed (CUresult %d).", name, int(r));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace ws_gemm

// Check the shape and size the launch: CTAs, the profiler's regions per CTA and records per region.
// Returns 0, or 1 with a one-sentence message in `err`.
extern "C" int ws_gemm_plan(int64_t m, int64_t n, int64_t k, int64_t* ctas, int32_t* regions_per_cta,
                            int32_t* capacity, char* err, int errlen) {
  using namespace ws_gemm;
  if (m < 1 || n < 1 || k < 1) return fail(err, errlen, "M, N and K must be positive.");
  if (k % 8 != 0) return fail(err, errlen, "K must be a multiple of 8 (TMA needs 16-byte row strides).");
  // 2^30 keeps every row and column index of the kernel (int) clear of overflow.
  if (m > (1 << 30) || n > (1 << 30) || k > (1 << 30)) return fail(err, errlen, "M, N and K must each be at most 2^30.");
  const int64_t count = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
  if (count > INT32_MAX) return fail(err, errlen, "the shape needs more than 2^31 - 1 CTAs.");
  *ctas = count;
  *regions_per_cta = kRegionsPerCta;
  *capacity = int32_t(2 * ((k + BK - 1) / BK) + 4);  // two spans per k-block, setup and store
  return 0;
}

// C = A·Bᵀ on `stream` (a cudaStream_t; null: the default stream). prof_data null launches the plain
// build; otherwise the profiled build records into the buffer (gemmtrace::ProfileBuffer's fields).
// Returns 0, or 1 with a one-sentence message in `err`.
extern "C" int ws_gemm_launch(const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k, void* stream,
                              uint32_t* prof_data, uint32_t prof_capacity, uint32_t prof_regions_per_cta, char* err,
                              int errlen) {
  using namespace ws_gemm;
  int64_t ctas;
  int32_t regions, capacity;
  if (ws_gemm_plan(m, n, k, &ctas, &regions, &capacity, err, errlen)) return 1;
  if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(c)) % 16 != 0)
    return fail(err, errlen, "A, B and C must start at 16-byte aligned addresses.");
  if (prof_data != nullptr && prof_regions_per_cta < uint32_t(kRegionsPerCta))
    return fail(err, errlen, "the profiled build needs a profiler buffer with 2 regions per CTA.");
  CUtensorMap tmap_a, tmap_b;
  if (encode_operand(&tmap_a, a, m, k, "A", err, errlen) || encode_operand(&tmap_b, b, n, k, "B", err, errlen)) return 1;
  auto kernel = prof_data != nullptr ? ws_gemm_kernel<true> : ws_gemm_kernel<false>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e == cudaSuccess) {
    kernel<<<unsigned(ctas), kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
        tmap_a, tmap_b, static_cast<__nv_bfloat16*>(c), int(m), int(n), int(k),
        gemmtrace::ProfileBuffer{prof_data, prof_capacity, prof_regions_per_cta});
    e = cudaGetLastError();
  }
  if (e != cudaSuccess) {
    if (err && errlen > 0) std::snprintf(err, size_t(errlen), "launching ws_gemm failed: %s.", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
