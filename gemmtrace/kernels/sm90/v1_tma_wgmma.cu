// v1 (sm_90a): TMA loads into shared memory completing on an mbarrier, wgmma from shared memory,
// one 128x128 output tile per CTA, a plain epilogue from registers. No pipelining: each k-block is
// loaded, waited for, multiplied and retired before the next load is issued.
//
// C = A * B^T with A (M, K), B (N, K) row-major bf16 (both K-major), C (M, N) bf16, fp32 accumulation.
// Shapes: any M, N >= 1 and K a multiple of 8 (TMA needs 16-byte row strides). Partial tiles are
// handled by TMA zero-fill on loads and bounds checks on stores.
//
// Shared-memory layout (no swizzle): each operand tile is [BK/8][rows][8] bf16, i.e. a stack of
// core matrices (8 rows x 16 bytes). A 3-D tensor map {8, rows, K/8} loads that in one TMA.
#include <cuda_bf16.h>

#include "gemmtrace/host.cuh"
#include "gemmtrace/mbarrier.cuh"
#include "gemmtrace/profiler.cuh"
#include "gemmtrace/tma.cuh"
#include "gemmtrace/wgmma.cuh"

namespace {

using namespace gemmtrace;

constexpr int BM = 128, BN = 128, BK = 64;
constexpr int kThreads = 128;  // one warpgroup: two m64n128k16 per k16 step
constexpr int kTileBytesA = BM * BK * 2, kTileBytesB = BN * BK * 2;
constexpr int kSmemBytes = kTileBytesA + kTileBytesB + 64;
enum BarrierId : uint32_t { kFullBarrier = 0 };

template <bool kProfile>
__global__ void __launch_bounds__(kThreads) gemm_v1(const __grid_constant__ CUtensorMap tmap_a,
                                                    const __grid_constant__ CUtensorMap tmap_b, __nv_bfloat16* c,
                                                    int M, int N, int K, ProfileBuffer prof) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t smem_a = smem_addr(smem);
  const uint32_t smem_b = smem_a + kTileBytesA;
  const uint32_t full = smem_b + kTileBytesB;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n_block = blockIdx.x, m_block = blockIdx.y;
  const uint32_t tile = uint32_t(m_block) * gridDim.x + n_block;
  const int num_kb = (K + BK - 1) / BK;

  Recorder<kProfile> rec;
  if (warp == 0) rec.init(prof, 0, Role::CONSUMER);
  uint32_t t = rec.now();

  if (tid == 0) {
    tma_prefetch_descriptor(&tmap_a);
    tma_prefetch_descriptor(&tmap_b);
    mbarrier_init(full, 1);
    mbarrier_init_fence();
  }
  __syncthreads();
  rec.record(Tag::SETUP, t, tile);

  float acc[2][BN / 2];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[m][i] = 0.f;

  for (int kb = 0; kb < num_kb; ++kb) {
    t = rec.now();
    if (tid == 0 && !debug_drop_load(kb)) {
      mbarrier_arrive_expect_tx(full, kTileBytesA + kTileBytesB);
      tma_load_3d(smem_a, &tmap_a, full, 0, m_block * BM, kb * (BK / 8));
      tma_load_3d(smem_b, &tmap_b, full, 0, n_block * BN, kb * (BK / 8));
    }
    mbarrier_wait(full, kb & 1, WaitSite{uint32_t(Role::CONSUMER), kFullBarrier, tile, uint32_t(kb)});
    rec.record(Tag::WAIT_FULL, t, tile, kb);

    t = rec.now();
    wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < BK / 16; ++k16) {
      // A k16 step spans two core matrices along K: LBO apart. SBO steps 8 rows (128 bytes).
      const uint64_t desc_b = make_smem_desc(smem_b + k16 * 2 * (BN * 16), BN * 16, 128, Swizzle::NONE);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint64_t desc_a = make_smem_desc(smem_a + k16 * 2 * (BM * 16) + m * 64 * 16, BM * 16, 128, Swizzle::NONE);
        wgmma_bf16<BN>(acc[m], desc_a, desc_b, (kb > 0 || k16 > 0) ? 1 : 0);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < 2; ++m) fence_registers(acc[m]);
    rec.record(Tag::MMA, t, tile, kb);
    __syncthreads();  // every warpgroup thread is done reading this stage before it is refilled
  }

  // Epilogue: the m64nNk16 accumulator layout gives each thread pairs of adjacent columns in rows
  // lane/4 and lane/4 + 8 of its warp's 16-row slice.
  t = rec.now();
  const bool pair_ok = (N % 2) == 0;  // bf16x2 stores need 4-byte alignment
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = n_block * BN + j * 8 + (lane % 4) * 2;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m_block * BM + m * 64 + warp * 16 + lane / 4 + h * 8;
        if (row >= M) continue;
        const float v0 = acc[m][j * 4 + h * 2], v1 = acc[m][j * 4 + h * 2 + 1];
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
  rec.record(Tag::EPILOGUE, t, tile);
  rec.finish();
}

int plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  // setup, (wait_full, mma) per k-block, epilogue
  return host::one_tile_per_cta_plan(args, BM, BN, BK, 1, kThreads, kSmemBytes, 1, 2, p, err,
                                     errlen);
}

// The 3-D view {8, rows, K/8} of a (rows, K) row-major matrix lands in shared memory as
// [BK/8][box rows][8]: the no-swizzle core-matrix layout wgmma reads.
int encode_operand(CUtensorMap* map, const void* ptr, int64_t rows, int64_t k, uint32_t box_rows, const char* name,
                   char* err, int errlen) {
  const uint64_t dims[3] = {8, uint64_t(rows), uint64_t(k / 8)};
  const uint64_t strides[2] = {uint64_t(k) * 2, 16};
  const uint32_t box[3] = {8, box_rows, BK / 8};
  return host::encode_bf16_tmap(map, ptr, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE, name, err, errlen);
}

}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) { return plan(args, p, err, errlen); }

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  GtPlan p;
  if (plan(args, &p, err, errlen)) return 1;
  CUtensorMap tmap_a, tmap_b;
  if (encode_operand(&tmap_a, args->a, args->m, args->k, BM, "A", err, errlen)) return 1;
  if (encode_operand(&tmap_b, args->b, args->n, args->k, BN, "B", err, errlen)) return 1;
  const dim3 grid(host::ceil_div(args->n, BN), host::ceil_div(args->m, BM));
  auto stream = static_cast<cudaStream_t>(args->stream);
  auto kernel = args->profile ? gemm_v1<true> : gemm_v1<false>;
  if (host::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes),
                       "cudaFuncSetAttribute", err, errlen))
    return 1;
  if (host::set_hang_report(args, stream, err, errlen)) return 1;
  kernel<<<grid, p.block_threads, p.smem_bytes, stream>>>(tmap_a, tmap_b, static_cast<__nv_bfloat16*>(args->c),
                                                          int(args->m), int(args->n), int(args->k),
                                                          host::profile_buffer(args, p));
  return host::check_cuda(cudaGetLastError(), "launching gemm_v1", err, errlen);
}
