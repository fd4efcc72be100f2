// v5 (sm_90a): v4 plus 2-CTA clusters that share the B tile by TMA multicast (Hopper's form of
// Blackwell's 2-SM MMA) and a TMA-store epilogue through swizzled shared memory.
//
// What changes from v4:
// - Clusters of two CTAs on vertically adjacent tiles (same n block, m blocks 2i and 2i+1). Both
//   need the same 256x64 B stage, so each CTA's producer loads one 128-row half of it and multicasts
//   it into both CTAs' shared memory: B traffic from L2 halves. A stage is free only when the
//   consumers of both CTAs are done with it, so every consumer warp arrives on the empty barrier of
//   both CTAs (16 arrivals), the peer's through the cluster's shared memory window.
// - Epilogue: each consumer warpgroup writes its 64x256 fragment as four swizzled 64x64 bf16
//   panels (stmatrix, 16 bytes a row) through a double buffer in shared memory and one thread
//   stores each panel with a TMA bulk tensor store, which clips the tile at the matrix edge and
//   writes whole 128-byte lines.
//
// Shapes: any M, N >= 1 with N a multiple of 8 (TMA stores need 16-byte row strides) and K a
// multiple of 8. An odd number of row blocks pads the grid to whole clusters; the padding CTA
// loads zeros (TMA fills out-of-bounds rows) and its stores are clipped away.
#include <cuda_bf16.h>

#include "gemmtrace/cluster.cuh"
#include "gemmtrace/epilogue.cuh"
#include "gemmtrace/host.cuh"
#include "gemmtrace/mbarrier.cuh"
#include "gemmtrace/profiler.cuh"
#include "gemmtrace/tma.cuh"
#include "gemmtrace/wgmma.cuh"

namespace {

using namespace gemmtrace;

constexpr int BM = 128, BN = 256, BK = 64, kStages = 4;
constexpr int kConsumers = 2;  // consumer warpgroups, 64 rows each
constexpr int kCluster = 2;    // CTAs per cluster, along M
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kTileBytesA = BM * BK * 2, kTileBytesB = BN * BK * 2;
constexpr int kHalfBytesB = kTileBytesB / kCluster;  // the part of B one CTA loads and multicasts
constexpr int kStageBytes = kTileBytesA + kTileBytesB;
constexpr int kPanelBytes = 64 * 128;                // one 64x64 bf16 panel of C
constexpr int kEpilogueBytes = kConsumers * 2 * kPanelBytes;  // a double buffer per consumer
constexpr int kRecordRing = 32;  // records each recording warp stages in shared memory (profiler.cuh)
constexpr int kRecorderBytes = (1 + kConsumers) * Recorder<true, kRecordRing>::kSmemBytes;
constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kEpilogueBytes + 2 * kStages * 8 + kRecorderBytes;
static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an H100 CTA may have");
enum BarrierId : uint32_t { kFullBarrier = 0, kEmptyBarrier = 1 };

template <bool kProfile>
__global__ void __launch_bounds__(kThreads, 1) gemm_v5(const __grid_constant__ CUtensorMap tmap_a,
                                                       const __grid_constant__ CUtensorMap tmap_b,
                                                       const __grid_constant__ CUtensorMap tmap_c, int K,
                                                       ProfileBuffer prof) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t stage0 = (smem_addr(smem_raw) + 1023) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t epi0 = stage0 + kStages * kStageBytes;
  const uint32_t full0 = epi0 + kEpilogueBytes, empty0 = full0 + kStages * 8;
  auto smem_a = [&](int s) { return stage0 + s * kStageBytes; };
  auto smem_b = [&](int s) { return stage0 + s * kStageBytes + kTileBytesA; };
  auto full = [&](int s) { return full0 + s * 8; };
  auto empty = [&](int s) { return empty0 + s * 8; };
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  const uint32_t rank = cluster_ctarank(), peer = rank ^ 1;
  const int n_block = blockIdx.x, m_block = blockIdx.y;  // cluster (1, 2): rank == m_block % 2
  const uint32_t tile = uint32_t(m_block) * gridDim.x + n_block;
  const int num_kb = (K + BK - 1) / BK;

  Recorder<kProfile, kRecordRing> rec;
  // Recording warps: the producer (warp 0) and warps 5 and 10, one per SM sub-partition (warp % 4),
  // so no scheduler issues for all three.
  if (warp % 4 == wg)  // the rings follow the barriers
    rec.init(prof, wg, wg == 0 ? Role::PRODUCER : Role::CONSUMER,
             empty0 + kStages * 8 + wg * Recorder<true, kRecordRing>::kSmemBytes);
  uint32_t t = rec.now();
  if (tid == 0) {
    tma_prefetch_descriptor(&tmap_a);
    tma_prefetch_descriptor(&tmap_b);
    tma_prefetch_descriptor(&tmap_c);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), kCluster * kConsumers * 4);  // every consumer warp of both CTAs
    }
    mbarrier_init_fence();
  }
  cluster_sync();  // the peer's barriers are initialised before anyone multicasts or arrives on them
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
          // This CTA's full barrier counts its own A, its own B half and the peer's B half.
          mbarrier_arrive_expect_tx(full(s), kStageBytes);
          tma_load_2d(smem_a(s), &tmap_a, full(s), kb * BK, m_block * BM);
          tma_load_2d_multicast(smem_b(s) + rank * kHalfBytesB, &tmap_b, full(s), kb * BK,
                                n_block * BN + rank * (BN / kCluster), uint16_t((1u << kCluster) - 1));
        }
        if (!was_free) rec.record_span(Tag::WAIT_EMPTY, wait_from, wait_to, tile, kb);
        t = rec.record(Tag::TMA_ISSUE, wait_to, tile, kb);  // from the stage being free to the loads issued
        rec.poll();
      }
    }
  } else {  // ---------------- consumers ----------------
    setmaxnreg_inc<232>();
    const int cw = wg - 1;  // this consumer's 64-row slice of the tile
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

    // One clock read and one store per k-block in steady state (v4 explains how).
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
      rec.poll();  // the staged recorder copies full halves of its ring out while the tensor cores work
      wgmma_wait<1>();  // k-block kb - 1 has retired; kb stays queued
      if (kb > 0) {
        pending_start = mma_start;
        pending_end = mma_start = rec.now();
        // Release the stage to both producers. The last kStages k-blocks need no release (no load
        // waits for them), so no arrive reaches a peer that may already have exited.
        if (lane == 0 && kb - 1 + kStages < num_kb) {
          const uint32_t ps = (kb - 1) % kStages;
          mbarrier_arrive(empty(ps));
          mbarrier_arrive_cluster(empty(ps), peer);
        }
      }
    }
    wgmma_wait<0>();
    fence_registers(acc);
    t = rec.now();  // the last k-block retired; the epilogue starts here
    if (num_kb >= 2) rec.record_span(Tag::MMA, pending_start, pending_end, tile, num_kb - 2);
    rec.record_span(Tag::MMA, mma_start, t, tile, num_kb - 1);

    // Epilogue: four 64x64 panels through a double buffer, each stored by one TMA store.
    const bool issuer = (tid % 128) == 0;
    uint8_t* buf = smem_raw + (epi0 - smem_addr(smem_raw)) + cw * 2 * kPanelBytes;
#pragma unroll
    for (int p = 0; p < BN / 64; ++p) {
      uint8_t* panel = buf + (p % 2) * kPanelBytes;
      if (p >= 2) {  // the store that read this buffer two panels ago must be done reading it
        if (issuer) tma_store_wait_read<1>();
        named_barrier_sync(1 + cw, 128);
      }
      stmatrix_panel_sw128<BN>(acc, p, smem_addr(panel));
      fence_async_shared();  // make the generic-proxy writes visible to the TMA engine
      named_barrier_sync(1 + cw, 128);
      if (issuer) {
        tma_store_2d(&tmap_c, smem_addr(panel), n_block * BN + p * 64, m_block * BM + cw * 64);
        tma_store_commit();
      }
    }
    if (issuer) tma_store_wait_read<0>();  // shared memory must outlive the stores' reads, not their writes
    rec.record(Tag::EPILOGUE, t, tile);
  }
  rec.finish();
  // No cluster barrier on the way out: every multicast into this CTA landed before its consumers
  // passed the matching full barrier, and every remote arrive went to a peer whose producer was
  // still waiting for it.
}

int plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  if (host::check_bf16_gemm_shape(args, 8, err, errlen)) return 1;
  if (args->n % 8 != 0)
    return host::fail(err, errlen, "N must be a multiple of 8 (TMA stores of C need 16-byte row strides); got N=%lld",
                      (long long)args->n);
  const int grid_m = host::ceil_div(host::ceil_div(args->m, BM), kCluster) * kCluster;
  const int grid_n = host::ceil_div(args->n, BN);
  if (grid_m > 65535) return host::fail(err, errlen, "M=%lld needs more than 65535 row blocks", (long long)args->m);
  const int num_kb = host::ceil_div(args->k, BK);
  *p = GtPlan{};
  p->grid_ctas = grid_m * grid_n;
  p->regions_per_cta = 1 + kConsumers;
  p->records_per_region = 2 * num_kb + 2;
  p->block_threads = kThreads;
  p->smem_bytes = kSmemBytes;
  p->tile_m = BM, p->tile_n = BN, p->tile_k = BK;
  p->stages = kStages;
  p->cluster = kCluster;
  p->tiles = grid_m * grid_n;
  return 0;
}

}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) { return plan(args, p, err, errlen); }

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  GtPlan p;
  if (plan(args, &p, err, errlen)) return 1;
  CUtensorMap tmap_a, tmap_b, tmap_c;
  if (host::encode_rows_sw128(&tmap_a, args->a, args->m, args->k, BM, "A", err, errlen)) return 1;
  if (host::encode_rows_sw128(&tmap_b, args->b, args->n, args->k, BN / kCluster, "B", err, errlen)) return 1;
  if (host::encode_rows_sw128(&tmap_c, args->c, args->m, args->n, 64, "C", err, errlen)) return 1;
  auto stream = static_cast<cudaStream_t>(args->stream);
  auto kernel = args->profile ? gemm_v5<true> : gemm_v5<false>;
  if (host::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes),
                       "cudaFuncSetAttribute", err, errlen))
    return 1;
  if (host::set_hang_report(args, stream, err, errlen)) return 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(host::ceil_div(args->n, BN), p.grid_ctas / host::ceil_div(args->n, BN));
  cfg.blockDim = dim3(p.block_threads);
  cfg.dynamicSmemBytes = p.smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim = {1, kCluster, 1};
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (host::check_cuda(cudaLaunchKernelEx(&cfg, kernel, tmap_a, tmap_b, tmap_c, int(args->k), host::profile_buffer(args, p)),
                       "launching gemm_v5", err, errlen))
    return 1;
  return host::check_cuda(cudaGetLastError(), "launching gemm_v5", err, errlen);
}
