// v4 (sm_90a): v3 plus warp specialization: a producer warp issues TMA, two consumer warpgroups
// issue wgmma on a 128x256 tile, and setmaxnreg moves registers from the producer to the consumers.
//
// What changes from v3: the CTA is three warpgroups. Warpgroup 0 is the producer: its first warp
// (one elected lane) waits for a free stage and issues the stage's TMA loads, running up to
// kStages k-blocks ahead; it gives its registers back (setmaxnreg.dec to 40). Warpgroups 1 and 2
// are consumers (setmaxnreg.inc to 232): each owns 64 rows of the 128x256 tile, i.e. one
// m64n256k16 accumulator of 128 fp32 registers per thread, and reads the same B stage. Producer
// and consumers meet only at the full/empty mbarriers, so loads never wait for MMAs to be issued.
// The larger tile doubles the math per byte loaded from L2 compared with v3's 128x128.
//
// Shapes: any M, N >= 1 and K a multiple of 8.
#include <cuda_bf16.h>

#include "gemmtrace/epilogue.cuh"
#include "gemmtrace/host.cuh"
#include "gemmtrace/mbarrier.cuh"
#include "gemmtrace/profiler.cuh"
#include "gemmtrace/tma.cuh"
#include "gemmtrace/wgmma.cuh"

namespace {

using namespace gemmtrace;

constexpr int BM = 128, BN = 256, BK = 64, kStages = 4;
constexpr int kConsumers = 2;                        // consumer warpgroups, 64 rows each
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kTileBytesA = BM * BK * 2, kTileBytesB = BN * BK * 2;
constexpr int kStageBytes = kTileBytesA + kTileBytesB;
constexpr int kSmemBytes = 1024 + kStages * kStageBytes + 2 * kStages * 8;
enum BarrierId : uint32_t { kFullBarrier = 0, kEmptyBarrier = 1 };

template <bool kProfile>
__global__ void __launch_bounds__(kThreads, 1) gemm_v4(const __grid_constant__ CUtensorMap tmap_a,
                                                       const __grid_constant__ CUtensorMap tmap_b, __nv_bfloat16* c,
                                                       int M, int N, int K, ProfileBuffer prof) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t stage0 = (smem_addr(smem_raw) + 1023) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t full0 = stage0 + kStages * kStageBytes, empty0 = full0 + kStages * 8;
  auto smem_a = [&](int s) { return stage0 + s * kStageBytes; };
  auto smem_b = [&](int s) { return stage0 + s * kStageBytes + kTileBytesA; };
  auto full = [&](int s) { return full0 + s * 8; };
  auto empty = [&](int s) { return empty0 + s * 8; };
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  const int n_block = blockIdx.x, m_block = blockIdx.y;
  const uint32_t tile = uint32_t(m_block) * gridDim.x + n_block;
  const int num_kb = (K + BK - 1) / BK;

  Recorder<kProfile> rec;
  // Recording warps: the producer (warp 0) and warps 5 and 10, one per SM sub-partition (warp % 4),
  // so no scheduler issues for all three.
  if (warp % 4 == wg) rec.init(prof, wg, wg == 0 ? Role::PRODUCER : Role::CONSUMER);
  uint32_t t = rec.now();
  if (tid == 0) {
    tma_prefetch_descriptor(&tmap_a);
    tma_prefetch_descriptor(&tmap_b);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), kConsumers * 4);  // one arrive per consumer warp
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  t = rec.record(Tag::SETUP, t, tile);

  if (wg == 0) {  // ---------------- producer ----------------
    setmaxnreg_dec<40>();
    // One elected lane runs the whole load loop: waiting, issuing and recording with no warp-wide
    // reconvergence per k-block (recording from the full warp here cost v4 14.5% at 4096^3).
    if (warp == 0 && lane == 0) {
      for (int kb = 0; kb < num_kb; ++kb) {
        const int s = kb % kStages;
        const uint32_t parity = ((kb / kStages) & 1) ^ 1;
        // A wait for a free stage is recorded only when the stage was not already free.
        const bool was_free = mbarrier_try_wait(empty(s), parity);
        uint32_t wait_from = 0, wait_to = t;
        if (!was_free) {
          wait_from = rec.now();
          mbarrier_wait(empty(s), parity, WaitSite{uint32_t(Role::PRODUCER), kEmptyBarrier, tile, uint32_t(kb)});
          wait_to = rec.now();
        }
        if (!debug_drop_load(kb)) {
          mbarrier_arrive_expect_tx(full(s), kStageBytes);
          tma_load_2d(smem_a(s), &tmap_a, full(s), kb * BK, m_block * BM);
          tma_load_2d(smem_b(s), &tmap_b, full(s), kb * BK, n_block * BN);
        }
        if (!was_free) rec.record_span(Tag::WAIT_EMPTY, wait_from, wait_to, tile, kb);
        t = rec.record(Tag::TMA_ISSUE, wait_to, tile, kb);  // from the stage being free to the loads issued
      }
    }
  } else {  // ---------------- consumers ----------------
    setmaxnreg_inc<232>();
    const int cw = wg - 1;  // this consumer's 64-row slice of the tile
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

    // One clock read and one store per k-block in steady state. A k-block's MMA span starts where
    // the previous k-block retired: its wgmmas were issued before the wait that retired the previous
    // one returned, so the clip to the previous retirement always applies. A wait for a full stage is
    // recorded only when the stage was not already full. MMA spans are stored one k-block late,
    // after the next wgmmas are issued, so no clock read's latency holds up an issue.
    uint32_t mma_start = 0, pending_start = 0, pending_end = 0;  // MMA span of k-block kb - 1, not yet stored
    for (int kb = 0; kb < num_kb; ++kb) {
      const int s = kb % kStages;
      const uint32_t parity = (kb / kStages) & 1;
      if (!mbarrier_try_wait(full(s), parity)) {  // the tensor cores may starve here: record it
        const uint32_t from = rec.now();
        mbarrier_wait(full(s), parity, WaitSite{uint32_t(Role::CONSUMER), kFullBarrier, tile, uint32_t(kb)});
        rec.record(Tag::WAIT_FULL, from, tile, kb);
      }
      if (kb == 0) mma_start = rec.now();
      wgmma_fence();
#pragma unroll
      for (int k16 = 0; k16 < BK / 16; ++k16)
        wgmma_bf16<BN>(acc, make_desc_sw128(smem_a(s) + cw * 64 * 128 + k16 * 32), make_desc_sw128(smem_b(s) + k16 * 32),
                       (kb > 0 || k16 > 0) ? 1 : 0);
      wgmma_commit();
      if (kb >= 2) rec.record_span(Tag::MMA, pending_start, pending_end, tile, kb - 2);
      wgmma_wait<1>();  // k-block kb - 1 has retired; kb stays queued
      if (kb > 0) {
        pending_start = mma_start;
        pending_end = mma_start = rec.now();
        if (lane == 0) mbarrier_arrive(empty((kb - 1) % kStages));
      }
    }
    wgmma_wait<0>();
    fence_registers(acc);
    t = rec.now();  // the last k-block retired; the epilogue starts here
    if (num_kb >= 2) rec.record_span(Tag::MMA, pending_start, pending_end, tile, num_kb - 2);
    rec.record_span(Tag::MMA, mma_start, t, tile, num_kb - 1);

    store_fragment_global<BN>(acc, c, M, N, m_block * BM + cw * 64, n_block * BN);
    rec.record(Tag::EPILOGUE, t, tile);
  }
  rec.finish();
}

int plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  // the producer and one warp per consumer warpgroup; two spans per k-block
  return host::one_tile_per_cta_plan(args, BM, BN, BK, kStages, kThreads, kSmemBytes, 1 + kConsumers, 2, p, err,
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
  auto kernel = args->profile ? gemm_v4<true> : gemm_v4<false>;
  if (host::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes),
                       "cudaFuncSetAttribute", err, errlen))
    return 1;
  if (host::set_hang_report(args, stream, err, errlen)) return 1;
  kernel<<<grid, p.block_threads, p.smem_bytes, stream>>>(tmap_a, tmap_b, static_cast<__nv_bfloat16*>(args->c),
                                                          int(args->m), int(args->n), int(args->k),
                                                          host::profile_buffer(args, p));
  return host::check_cuda(cudaGetLastError(), "launching gemm_v4", err, errlen);
}
