// v2 (sm_90a): v1 plus 128-byte swizzled operand tiles and a larger k-block (BK = 128).
//
// What changes from v1: TMA writes each operand tile as 128-byte rows XOR-swizzled in 1024-byte
// atoms (CU_TENSOR_MAP_SWIZZLE_128B), and the wgmma descriptors say so (make_desc_sw128). The
// swizzle lets one TMA box cover 64 elements of K per row with no bank conflicts on the wgmma
// side, so a k-block of 128 is two boxes per operand, and each k-block pays the load-wait-retire
// round trip once for twice the math of v1's BK = 64. Still one stage, still one tile per CTA.
//
// C = A * B^T with A (M, K), B (N, K) row-major bf16, C (M, N) bf16, fp32 accumulation.
// Shapes: any M, N >= 1 and K a multiple of 8 (TMA needs 16-byte row strides); partial tiles are
// zero-filled by TMA on loads and clipped on stores.
#include <cuda_bf16.h>

#include "gemmtrace/epilogue.cuh"
#include "gemmtrace/host.cuh"
#include "gemmtrace/mbarrier.cuh"
#include "gemmtrace/profiler.cuh"
#include "gemmtrace/tma.cuh"
#include "gemmtrace/wgmma.cuh"

namespace {

using namespace gemmtrace;

constexpr int BM = 128, BN = 128, BK = 128;
constexpr int kAtomK = 64;                  // elements of K in one 128-byte swizzle atom (one TMA box)
constexpr int kAtoms = BK / kAtomK;         // boxes per operand per k-block
constexpr int kThreads = 128;               // one warpgroup: two m64n128k16 per k16 step
constexpr int kAtomBytesA = BM * 128, kAtomBytesB = BN * 128;
constexpr int kTileBytesA = kAtoms * kAtomBytesA, kTileBytesB = kAtoms * kAtomBytesB;
constexpr int kSmemBytes = 1024 + kTileBytesA + kTileBytesB + 64;  // 1024: room to align the tiles
enum BarrierId : uint32_t { kFullBarrier = 0 };

template <bool kProfile>
__global__ void __launch_bounds__(kThreads) gemm_v2(const __grid_constant__ CUtensorMap tmap_a,
                                                    const __grid_constant__ CUtensorMap tmap_b, __nv_bfloat16* c,
                                                    int M, int N, int K, ProfileBuffer prof) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem_a = (smem_addr(smem_raw) + 1023) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t smem_b = smem_a + kTileBytesA;
  const uint32_t full = smem_b + kTileBytesB;
  const int tid = threadIdx.x, warp = tid / 32;
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
#pragma unroll
      for (int a = 0; a < kAtoms; ++a) {
        tma_load_2d(smem_a + a * kAtomBytesA, &tmap_a, full, kb * BK + a * kAtomK, m_block * BM);
        tma_load_2d(smem_b + a * kAtomBytesB, &tmap_b, full, kb * BK + a * kAtomK, n_block * BN);
      }
    }
    mbarrier_wait(full, kb & 1, WaitSite{uint32_t(Role::CONSUMER), kFullBarrier, tile, uint32_t(kb)});
    rec.record(Tag::WAIT_FULL, t, tile, kb);

    t = rec.now();
    wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < BK / 16; ++k16) {
      const uint32_t atom = k16 / (kAtomK / 16), k_in_atom_bytes = (k16 % (kAtomK / 16)) * 32;
      const uint64_t desc_b = make_desc_sw128(smem_b + atom * kAtomBytesB + k_in_atom_bytes);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const uint64_t desc_a = make_desc_sw128(smem_a + atom * kAtomBytesA + m * 64 * 128 + k_in_atom_bytes);
        wgmma_bf16<BN>(acc[m], desc_a, desc_b, (kb > 0 || k16 > 0) ? 1 : 0);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int m = 0; m < 2; ++m) fence_registers(acc[m]);
    rec.record(Tag::MMA, t, tile, kb);
    __syncthreads();  // every thread is done reading this stage before it is refilled
  }

  t = rec.now();
#pragma unroll
  for (int m = 0; m < 2; ++m) store_fragment_global<BN>(acc[m], c, M, N, m_block * BM + m * 64, n_block * BN);
  rec.record(Tag::EPILOGUE, t, tile);
  rec.finish();
}

int plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  // setup, (wait_full, mma) per k-block, epilogue
  return host::one_tile_per_cta_plan(args, BM, BN, BK, 1, kThreads, kSmemBytes, 1, 2, p, err,
                                     errlen);
}

}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) { return plan(args, p, err, errlen); }

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  GtPlan p;
  if (plan(args, &p, err, errlen)) return 1;
  CUtensorMap tmap_a, tmap_b;
  if (host::encode_rows_sw128(&tmap_a, args->a, args->m, args->k, BM, "A", err, errlen)) return 1;
  if (host::encode_rows_sw128(&tmap_b, args->b, args->n, args->k, BN, "B", err, errlen)) return 1;
  const dim3 grid(host::ceil_div(args->n, BN), host::ceil_div(args->m, BM));
  auto stream = static_cast<cudaStream_t>(args->stream);
  auto kernel = args->profile ? gemm_v2<true> : gemm_v2<false>;
  if (host::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes),
                       "cudaFuncSetAttribute", err, errlen))
    return 1;
  if (host::set_hang_report(args, stream, err, errlen)) return 1;
  kernel<<<grid, p.block_threads, p.smem_bytes, stream>>>(tmap_a, tmap_b, static_cast<__nv_bfloat16*>(args->c),
                                                          int(args->m), int(args->n), int(args->k),
                                                          host::profile_buffer(args, p));
  return host::check_cuda(cudaGetLastError(), "launching gemm_v2", err, errlen);
}
