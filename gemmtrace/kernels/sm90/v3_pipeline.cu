// v3 (sm_90a): v2 plus a multi-stage shared-memory pipeline with a full and an empty mbarrier per
// stage, so TMA loads run kStages - 1 k-blocks ahead of the tensor cores.
//
// What changes from v2: the tile's k-blocks stream through kStages buffers. full[s] completes when
// TMA has landed stage s (transaction bytes); empty[s] completes when all four warps have retired
// the wgmmas that read it (one arrive per warp). wgmma is kept one k-block deep (wait_group 1), so
// the next k-block's MMAs are queued before the previous ones retire and the tensor cores never
// drain between k-blocks. There is still no warp specialization: thread 0 refills a stage as soon
// as its empty barrier completes, between its own MMAs. BK goes back to 64 (one swizzle atom) and
// three stages take 97 KB, so two CTAs still share an SM (v2 ran three): a first try with six
// stages (one CTA per SM) ran at 317 TFLOP/s against v2's 500, since one warpgroup alone cannot
// keep the tensor cores busy between its own waits.
//
// MMA spans: a k-block's span runs from its first wgmma's issue to the wait_group that retires it,
// clipped to start no earlier than the previous k-block's retirement, so one warp's MMA spans never
// overlap (their union, the tensor-core busy time, is unchanged by the clip). Since the next
// k-block is always issued before that wait returns, the clipped start is simply the previous
// k-block's retirement.
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

constexpr int BM = 128, BN = 128, BK = 64, kStages = 3;
constexpr int kThreads = 128;
constexpr int kTileBytesA = BM * BK * 2, kTileBytesB = BN * BK * 2;
constexpr int kStageBytes = kTileBytesA + kTileBytesB;
constexpr int kSmemBytes = 1024 + kStages * kStageBytes + 2 * kStages * 8;
enum BarrierId : uint32_t { kFullBarrier = 0, kEmptyBarrier = 1 };

template <bool kProfile>
__global__ void __launch_bounds__(kThreads) gemm_v3(const __grid_constant__ CUtensorMap tmap_a,
                                                    const __grid_constant__ CUtensorMap tmap_b, __nv_bfloat16* c,
                                                    int M, int N, int K, ProfileBuffer prof) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t stage0 = (smem_addr(smem_raw) + 1023) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t full0 = stage0 + kStages * kStageBytes, empty0 = full0 + kStages * 8;
  auto smem_a = [&](int s) { return stage0 + s * kStageBytes; };
  auto smem_b = [&](int s) { return stage0 + s * kStageBytes + kTileBytesA; };
  auto full = [&](int s) { return full0 + s * 8; };
  auto empty = [&](int s) { return empty0 + s * 8; };
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int n_block = blockIdx.x, m_block = blockIdx.y;
  const uint32_t tile = uint32_t(m_block) * gridDim.x + n_block;
  const int num_kb = (K + BK - 1) / BK;

  Recorder<kProfile> rec;
  if (warp == 0) rec.init(prof, 0, Role::CONSUMER);
  uint32_t t = rec.now();

  auto load = [&](int kb) {  // thread 0 only
    if (debug_drop_load(kb)) return;
    const int s = kb % kStages;
    mbarrier_arrive_expect_tx(full(s), kStageBytes);
    tma_load_2d(smem_a(s), &tmap_a, full(s), kb * BK, m_block * BM);
    tma_load_2d(smem_b(s), &tmap_b, full(s), kb * BK, n_block * BN);
  };

  if (tid == 0) {
    tma_prefetch_descriptor(&tmap_a);
    tma_prefetch_descriptor(&tmap_b);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), kThreads / 32);
    }
    mbarrier_init_fence();
    for (int kb = 0; kb < num_kb && kb < kStages; ++kb) load(kb);  // fill the pipeline
  }
  __syncthreads();
  rec.record(Tag::SETUP, t, tile);

  float acc[2][BN / 2];  // no zeroing: the first wgmma runs with scale-d = 0, and a non-wgmma write to
                        // the accumulators makes ptxas serialize the wgmma pipeline (C7515)

  // Recording costs one clock read and one store per k-block in steady state (v4 explains how):
  // an MMA span starts where the previous k-block retired, waits are recorded only when they block,
  // and thread 0 alone records the refills it makes.
  uint32_t mma_start = 0, pending_start = 0, pending_end = 0;  // MMA span of k-block kb - 1, not yet stored
  for (int kb = 0; kb < num_kb; ++kb) {
    const int s = kb % kStages;
    const uint32_t parity = (kb / kStages) & 1;
    if (!mbarrier_try_wait(full(s), parity)) {
      const uint32_t from = rec.now();
      mbarrier_wait(full(s), parity, WaitSite{uint32_t(Role::CONSUMER), kFullBarrier, tile, uint32_t(kb)});
      rec.record(Tag::WAIT_FULL, from, tile, kb);
    }
    if (kb == 0) mma_start = rec.now();
    wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < BK / 16; ++k16) {
      const uint64_t desc_b = make_desc_sw128(smem_b(s) + k16 * 32);
#pragma unroll
      for (int m = 0; m < 2; ++m)
        wgmma_bf16<BN>(acc[m], make_desc_sw128(smem_a(s) + m * 64 * 128 + k16 * 32), desc_b, (kb > 0 || k16 > 0) ? 1 : 0);
    }
    wgmma_commit();
    if (kb >= 2) rec.record_span(Tag::MMA, pending_start, pending_end, tile, kb - 2);
    wgmma_wait<1>();  // k-block kb - 1 has retired; kb stays queued on the tensor cores
    if (kb > 0) {
      pending_start = mma_start;
      pending_end = mma_start = rec.now();
      const int ps = (kb - 1) % kStages;
      if (lane == 0) mbarrier_arrive(empty(ps));
      if (tid == 0 && kb - 1 + kStages < num_kb) {  // refill the stage k-block kb - 1 used
        const uint32_t empty_parity = ((kb - 1) / kStages) & 1;
        uint32_t from = pending_end;
        if (!mbarrier_try_wait(empty(ps), empty_parity)) {
          mbarrier_wait(empty(ps), empty_parity, WaitSite{uint32_t(Role::CONSUMER), kEmptyBarrier, tile, uint32_t(kb - 1)});
          from = rec.record(Tag::WAIT_EMPTY, from, tile, kb - 1 + kStages);
        }
        load(kb - 1 + kStages);
        rec.record(Tag::TMA_ISSUE, from, tile, kb - 1 + kStages);
      }
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int m = 0; m < 2; ++m) fence_registers(acc[m]);
  t = rec.now();
  if (num_kb >= 2) rec.record_span(Tag::MMA, pending_start, pending_end, tile, num_kb - 2);
  rec.record_span(Tag::MMA, mma_start, t, tile, num_kb - 1);

#pragma unroll
  for (int m = 0; m < 2; ++m) store_fragment_global<BN>(acc[m], c, M, N, m_block * BM + m * 64, n_block * BN);
  rec.record(Tag::EPILOGUE, t, tile);
  rec.finish();
}

int plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  // setup, (wait_full, mma, wait_empty, tma_issue) per k-block, epilogue
  return host::one_tile_per_cta_plan(args, BM, BN, BK, kStages, kThreads, kSmemBytes, 1, 4, p, err,
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
  auto kernel = args->profile ? gemm_v3<true> : gemm_v3<false>;
  if (host::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes),
                       "cudaFuncSetAttribute", err, errlen))
    return 1;
  if (host::set_hang_report(args, stream, err, errlen)) return 1;
  kernel<<<grid, p.block_threads, p.smem_bytes, stream>>>(tmap_a, tmap_b, static_cast<__nv_bfloat16*>(args->c),
                                                          int(args->m), int(args->n), int(args->k),
                                                          host::profile_buffer(args, p));
  return host::check_cuda(cudaGetLastError(), "launching gemm_v3", err, errlen);
}
