// v6 (sm_90a): v5 made persistent: one cluster per pair of SMs loops over output tiles with a
// static schedule, and each tile's epilogue overlaps the next tile's loads and stores.
//
// What changes from v5:
// - The grid is at most one CTA per SM (clusters of two). Cluster c takes cluster tiles (two
//   vertically adjacent 128x256 tiles sharing B) c, c + G, c + 2G, ... in row order, G clusters in
//   all: the static schedule, in a TileScheduler the producer and the consumers both loop on.
// - The pipeline's stage and phase run on across tiles, so the producer starts loading the next
//   tile while the consumers are still in this tile's last k-blocks and its epilogue: the
//   mainloop of the next tile starts on full stages.
// - The TMA stores of C drain asynchronously under the next tile's mainloop; a panel buffer is
//   reused only once the store that read it is done reading (cp.async.bulk.wait_group.read).
// - No CTA launch, barrier set-up or pipeline fill per tile: those are paid once per SM.
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include <cuda_bf16.h>

#include <algorithm>

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
constexpr int kHalfBytesB = kTileBytesB / kCluster;
constexpr int kStageBytes = kTileBytesA + kTileBytesB;
constexpr int kPanelBytes = 64 * 128;
constexpr int kEpilogueBytes = kConsumers * 2 * kPanelBytes;
constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kEpilogueBytes + 2 * kStages * 8;
enum BarrierId : uint32_t { kFullBarrier = 0, kEmptyBarrier = 1 };

// Static schedule: cluster `cluster` of `clusters` visits cluster tiles cluster, cluster + clusters,
// ... in row order. A cluster tile is (m pair, n block); rank r of the cluster takes m block 2p + r.
struct TileScheduler {
  int units, grid_n, clusters, next;
  __device__ TileScheduler(int grid_m_pairs, int grid_n_, int cluster, int clusters_)
      : units(grid_m_pairs * grid_n_), grid_n(grid_n_), clusters(clusters_), next(cluster) {}
  __device__ int count(int cluster) const { return cluster < units ? (units - cluster + clusters - 1) / clusters : 0; }
  __device__ bool next_tile(uint32_t rank, int& m_block, int& n_block) {
    if (next >= units) return false;
    m_block = (next / grid_n) * kCluster + int(rank);
    n_block = next % grid_n;
    next += clusters;
    return true;
  }
};

template <bool kProfile>
__global__ void __launch_bounds__(kThreads, 1) gemm_v6(const __grid_constant__ CUtensorMap tmap_a,
                                                       const __grid_constant__ CUtensorMap tmap_b,
                                                       const __grid_constant__ CUtensorMap tmap_c, int grid_m_pairs,
                                                       int grid_n, int K, ProfileBuffer prof) {
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
  const int cluster = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;
  const int num_kb = (K + BK - 1) / BK;
  TileScheduler sched(grid_m_pairs, grid_n, cluster, clusters);
  const int total_kb = sched.count(cluster) * num_kb;  // k-blocks this cluster streams, all tiles
  int m_block, n_block;

  Recorder<kProfile> rec;
  // Recording warps: the producer (warp 0) and warps 5 and 10, one per SM sub-partition (warp % 4),
  // so no scheduler issues for all three.
  if (warp % 4 == wg) rec.init(prof, wg, wg == 0 ? Role::PRODUCER : Role::CONSUMER);
  uint32_t t = rec.now();
  if (tid == 0) {
    tma_prefetch_descriptor(&tmap_a);
    tma_prefetch_descriptor(&tmap_b);
    tma_prefetch_descriptor(&tmap_c);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), kCluster * kConsumers * 4);
    }
    mbarrier_init_fence();
  }
  cluster_sync();
  t = rec.record(Tag::SETUP, t);

  if (wg == 0) {  // ---------------- producer ----------------
    setmaxnreg_dec<40>();
    // One elected lane runs the whole load loop: waiting, issuing and recording with no warp-wide
    // reconvergence per k-block (recording from the full warp here cost v4 14.5% at 4096^3).
    if (warp == 0 && lane == 0) {
      int it = 0;  // k-blocks loaded so far, across tiles: stage = it % kStages
      while (sched.next_tile(rank, m_block, n_block)) {
        const uint32_t tile = uint32_t(m_block) * grid_n + n_block;
        for (int kb = 0; kb < num_kb; ++kb, ++it) {
          const int s = it % kStages;
          const uint32_t parity = ((it / kStages) & 1) ^ 1;
          // A wait for a free stage is recorded only when the stage was not already free.
          const bool was_free = mbarrier_try_wait(empty(s), parity);
          uint32_t wait_from = 0, wait_to = t;
          if (!was_free) {
            wait_from = rec.now();
            mbarrier_wait(empty(s), parity, WaitSite{uint32_t(Role::PRODUCER), kEmptyBarrier, tile, uint32_t(kb)});
            wait_to = rec.now();
          }
          if (!debug_drop_load(it)) {
            mbarrier_arrive_expect_tx(full(s), kStageBytes);
            tma_load_2d(smem_a(s), &tmap_a, full(s), kb * BK, m_block * BM);
            tma_load_2d_multicast(smem_b(s) + rank * kHalfBytesB, &tmap_b, full(s), kb * BK,
                                  n_block * BN + rank * (BN / kCluster), uint16_t((1u << kCluster) - 1));
          }
          if (!was_free) rec.record_span(Tag::WAIT_EMPTY, wait_from, wait_to, tile, kb);
          t = rec.record(Tag::TMA_ISSUE, wait_to, tile, kb);  // from the stage being free to the loads issued
        }
      }
    }
  } else {  // ---------------- consumers ----------------
    setmaxnreg_inc<232>();
    const int cw = wg - 1;
    const bool issuer = (tid % 128) == 0;
    uint8_t* buf = smem_raw + (epi0 - smem_addr(smem_raw)) + cw * 2 * kPanelBytes;
    float acc[BN / 2];
    int it = 0;
    // One clock read and one store per k-block in steady state. A k-block's MMA span starts where
    // the previous k-block retired: its wgmmas were issued before the wait that retired the previous
    // one returned, so the clip to the previous retirement always applies. A wait for a full stage is
    // recorded only when the stage was not already full. MMA spans are stored one k-block late,
    // after the next wgmmas are issued, so no clock read's latency holds up an issue.
    while (sched.next_tile(rank, m_block, n_block)) {
      const uint32_t tile = uint32_t(m_block) * grid_n + n_block;
      uint32_t mma_start = 0, pending_start = 0, pending_end = 0;  // MMA span of k-block kb - 1, not yet stored
      for (int kb = 0; kb < num_kb; ++kb, ++it) {
        const int s = it % kStages;
        const uint32_t parity = (it / kStages) & 1;
        if (!mbarrier_try_wait(full(s), parity)) {  // the tensor cores may starve here: record it
          const uint32_t from = rec.now();
          mbarrier_wait(full(s), parity, WaitSite{uint32_t(Role::CONSUMER), kFullBarrier, tile, uint32_t(kb)});
          rec.record(Tag::WAIT_FULL, from, tile, kb);
        }
        if (kb == 0) mma_start = rec.now();  // the tile's first issue
        wgmma_fence();
#pragma unroll
        for (int k16 = 0; k16 < BK / 16; ++k16)
          wgmma_bf16<BN>(acc, make_desc_sw128(smem_a(s) + cw * 64 * 128 + k16 * 32),
                         make_desc_sw128(smem_b(s) + k16 * 32), (kb > 0 || k16 > 0) ? 1 : 0);
        wgmma_commit();
        if (kb >= 2) rec.record_span(Tag::MMA, pending_start, pending_end, tile, kb - 2);
        wgmma_wait<1>();  // k-block it - 1 has retired; it stays queued
        if (kb > 0) {
          pending_start = mma_start;
          pending_end = mma_start = rec.now();
          // Release stage it - 1 to both producers; the cluster's last kStages k-blocks need none.
          if (lane == 0 && it - 1 + kStages < total_kb) {
            const uint32_t ps = (it - 1) % kStages;
            mbarrier_arrive(empty(ps));
            mbarrier_arrive_cluster(empty(ps), peer);
          }
        }
      }
      wgmma_wait<0>();
      fence_registers(acc);
      t = rec.now();  // the last k-block retired; the epilogue starts here
      if (lane == 0 && it - 1 + kStages < total_kb) {
        const uint32_t ps = (it - 1) % kStages;
        mbarrier_arrive(empty(ps));
        mbarrier_arrive_cluster(empty(ps), peer);
      }
      if (num_kb >= 2) rec.record_span(Tag::MMA, pending_start, pending_end, tile, num_kb - 2);
      rec.record_span(Tag::MMA, mma_start, t, tile, num_kb - 1);

      // Epilogue: the producer is already loading the next tile; these stores drain under it.
#pragma unroll
      for (int p = 0; p < BN / 64; ++p) {
        uint8_t* panel = buf + (p % 2) * kPanelBytes;
        if (issuer) tma_store_wait_read<1>();  // the store that last read this buffer is done reading
        named_barrier_sync(1 + cw, 128);
        stmatrix_panel_sw128<BN>(acc, p, smem_addr(panel));
        fence_async_shared();
        named_barrier_sync(1 + cw, 128);
        if (issuer) {
          tma_store_2d(&tmap_c, smem_addr(panel), n_block * BN + p * 64, m_block * BM + cw * 64);
          tma_store_commit();
        }
      }
      rec.record(Tag::EPILOGUE, t, tile);
    }
    if (issuer) tma_store_wait_read<0>();
  }
  rec.finish();
}

int plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  if (host::check_bf16_gemm_shape(args, 8, err, errlen)) return 1;
  if (args->n % 8 != 0)
    return host::fail(err, errlen, "N must be a multiple of 8 (TMA stores of C need 16-byte row strides); got N=%lld",
                      (long long)args->n);
  const int grid_m_pairs = host::ceil_div(host::ceil_div(args->m, BM), kCluster);
  const int grid_n = host::ceil_div(args->n, BN);
  const int units = grid_m_pairs * grid_n;
  const int sms = args->max_ctas > 0 ? args->max_ctas : (args->num_sms > 0 ? args->num_sms : 132);
  const int clusters = std::max(1, std::min(units, sms / kCluster));
  const int num_kb = host::ceil_div(args->k, BK);
  const int tiles_per_cluster = host::ceil_div(units, clusters);
  *p = GtPlan{};
  p->grid_ctas = clusters * kCluster;
  p->regions_per_cta = 1 + kConsumers;
  p->records_per_region = tiles_per_cluster * (2 * num_kb + 1) + 1;  // setup; per tile: 2 per k-block + epilogue
  p->block_threads = kThreads;
  p->smem_bytes = kSmemBytes;
  p->tile_m = BM, p->tile_n = BN, p->tile_k = BK;
  p->stages = kStages;
  p->cluster = kCluster;
  p->tiles = units * kCluster;
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
  auto kernel = args->profile ? gemm_v6<true> : gemm_v6<false>;
  if (host::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes),
                       "cudaFuncSetAttribute", err, errlen))
    return 1;
  if (host::set_hang_report(args, stream, err, errlen)) return 1;
  const int grid_m_pairs = host::ceil_div(host::ceil_div(args->m, BM), kCluster);
  const int grid_n = host::ceil_div(args->n, BN);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(p.grid_ctas);
  cfg.blockDim = dim3(p.block_threads);
  cfg.dynamicSmemBytes = p.smem_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim = {kCluster, 1, 1};
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return host::check_cuda(cudaLaunchKernelEx(&cfg, kernel, tmap_a, tmap_b, tmap_c, grid_m_pairs, grid_n, int(args->k),
                                             host::profile_buffer(args, p)),
                          "launching gemm_v6", err, errlen);
}
