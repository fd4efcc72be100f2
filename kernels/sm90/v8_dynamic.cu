// v8 (sm_90a): v7 plus dynamic scheduling: clusters claim cluster tiles from a global atomic
// counter, the Hopper stand-in for Blackwell's Cluster Launch Control.
//
// What changes from v7: with --sched dynamic, the producer thread of each cluster's rank-0 CTA
// claims the next entry of the tile order with one atomicAdd when it starts a tile, and publishes
// it to both CTAs through a two-slot ring in shared memory (a st.shared::cluster into the peer and
// a release.cluster arrive on each CTA's "claimed" barrier). Every role of both CTAs (the other
// producer and the four consumer warpgroups) reads the tile from the ring, and frees the slot with
// an arrive on rank 0's "read" barrier. The producer runs a few k-blocks ahead of the consumers,
// so a claim is made, and published, before the consumers finish the previous tile: claiming costs
// no mainloop time. An SM whose tiles ran fast simply claims more: no partial last wave is left
// to the SMs that happened to get one tile too many under the static schedule.
// The counter resets itself: the last CTA to finish zeroes it, so no extra launch is needed.
// --sched static keeps v7's schedule, so the two differ in one thing only.
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
constexpr int kClaimSlots = 2;  // claimed tiles in flight between rank 0's producer and the readers
// Who reads each claim and frees its slot: rank 0's two consumer warpgroups, and rank 1's producer
// and two consumer warpgroups (rank 0's producer made the claim).
constexpr int kClaimReaders = kConsumers + (1 + kConsumers) * (kCluster - 1);
constexpr int kSchedBytes = kClaimSlots * (8 + 8 + 4);
constexpr int kSmemBytes = 1024 + kStages * kStageBytes + kEpilogueBytes + 2 * kStages * 8 + kSchedBytes;
enum BarrierId : uint32_t { kFullBarrier = 0, kEmptyBarrier = 1, kClaimedBarrier = 2, kReadBarrier = 3 };

// The tile scheduler both roles loop on. Static: cluster c visits entries c, c + G, ... of the tile
// order (row order when the host passes none). Dynamic: position = atomicAdd(counter, 1), claimed by
// rank 0's producer and passed to everyone else through the claim ring. An entry is a cluster
// tile u = m_pair * grid_n + n_block; rank r of the cluster takes m block 2 * m_pair + r.
struct TileScheduler {
  const int32_t* order;
  int32_t* counter;
  int units, grid_n, clusters, next;
  bool dynamic;
  uint32_t ring;  // shared-memory address: claimed[2] barriers, read[2] barriers, slot[2]
  int claims = 0;  // claims this participant has taken from the ring
  int index = -1;  // position in the tile order of the current tile (the claim's counter value)

  __device__ uint32_t claimed_bar(int j) const { return ring + j * 8; }
  __device__ uint32_t read_bar(int j) const { return ring + kClaimSlots * 8 + j * 8; }
  __device__ uint32_t slot(int j) const { return ring + kClaimSlots * 16 + j * 4; }

  __device__ int entry(int i) const { return order != nullptr ? __ldg(order + i) : i; }

  // Rank 0's producer: claim the next position in the tile order (-1: none left) and publish it.
  __device__ int claim_and_publish(uint32_t peer) {
    const int j = claims % kClaimSlots;
    // Wait until every reader has read what this slot held kClaimSlots claims ago.
    mbarrier_wait(read_bar(j), ((claims / kClaimSlots) & 1) ^ 1,
                  WaitSite{uint32_t(Role::SCHEDULER), kReadBarrier, kNoTile, uint32_t(claims)});
    int i = atomicAdd(counter, 1);
    if (i >= units) i = -1;
    *reinterpret_cast<volatile int32_t*>(__cvta_shared_to_generic(slot(j))) = i;
    st_shared_cluster(slot(j), peer, i);
    mbarrier_arrive(claimed_bar(j));
    mbarrier_arrive_release_cluster(claimed_bar(j), peer);
    ++claims;
    return i;
  }

  // Everyone else: take the next claim from the ring. `frees`: this thread arrives for its group,
  // after `group_sync` (which makes sure the whole group has read the slot).
  template <typename GroupSync>
  __device__ int read_claim(bool frees, uint32_t rank, GroupSync group_sync) {
    const int j = claims % kClaimSlots;
    mbarrier_wait_cluster(claimed_bar(j), (claims / kClaimSlots) & 1,
                          WaitSite{uint32_t(Role::SCHEDULER), kClaimedBarrier, kNoTile, uint32_t(claims)});
    const int i = *reinterpret_cast<volatile int32_t*>(__cvta_shared_to_generic(slot(j)));
    ++claims;
    group_sync();
    // The final claim (-1) is not freed: nobody reuses its slot, and rank 0 may already be gone.
    if (frees && i >= 0) {
      if (rank == 0) mbarrier_arrive(read_bar(j));
      else mbarrier_arrive_cluster(read_bar(j), 0);
    }
    return i;
  }

  template <typename GroupSync>
  __device__ bool next_tile(bool claimer, bool frees, uint32_t rank, GroupSync group_sync, int& m_block,
                            int& n_block) {
    if (!dynamic) {
      index = next < units ? next : -1;
      next += clusters;
    } else {
      index = claimer ? claim_and_publish(rank ^ 1) : read_claim(frees, rank, group_sync);
    }
    if (index < 0) return false;
    const int u = entry(index);
    m_block = (u / grid_n) * kCluster + int(rank);
    n_block = u % grid_n;
    return true;
  }
};

template <bool kProfile>
__global__ void __launch_bounds__(kThreads, 1) gemm_v8(const __grid_constant__ CUtensorMap tmap_a,
                                                       const __grid_constant__ CUtensorMap tmap_b,
                                                       const __grid_constant__ CUtensorMap tmap_c,
                                                       const int32_t* __restrict__ tile_order, int32_t* tile_counter,
                                                       int dynamic, int grid_m_pairs, int grid_n, int K,
                                                       ProfileBuffer prof) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t stage0 = (smem_addr(smem_raw) + 1023) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t epi0 = stage0 + kStages * kStageBytes;
  const uint32_t full0 = epi0 + kEpilogueBytes, empty0 = full0 + kStages * 8, ring = empty0 + kStages * 8;
  auto smem_a = [&](int s) { return stage0 + s * kStageBytes; };
  auto smem_b = [&](int s) { return stage0 + s * kStageBytes + kTileBytesA; };
  auto full = [&](int s) { return full0 + s * 8; };
  auto empty = [&](int s) { return empty0 + s * 8; };
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp / 4;
  const uint32_t rank = cluster_ctarank(), peer = rank ^ 1;
  const int cluster = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;
  const int num_kb = (K + BK - 1) / BK;
  TileScheduler sched{tile_order, tile_counter, grid_m_pairs * grid_n, grid_n, clusters, cluster, dynamic != 0, ring};
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
    for (int j = 0; j < kClaimSlots; ++j) {
      mbarrier_init(sched.claimed_bar(j), 1);
      mbarrier_init(sched.read_bar(j), kClaimReaders);
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
      const bool claimer = sched.dynamic && rank == 0;
      while (true) {
        const bool more = sched.next_tile(claimer, true, rank, [] {}, m_block, n_block);
        const uint32_t tile = more ? uint32_t(m_block) * grid_n + n_block : kNoTile;
        // The claim span carries the tile (none for the final, empty claim) and, as its k-block,
        // the claim's position in the tile order, so the trace holds the exact claim sequence.
        if (sched.dynamic) t = rec.record(Tag::SCHED_CLAIM, t, tile, more ? uint32_t(sched.index) : kNoKBlock);
        if (!more) break;
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
    auto wg_sync = [cw] { named_barrier_sync(1 + cw, 128); };
    while (sched.next_tile(false, (tid % 128) == 0, rank, wg_sync, m_block, n_block)) {
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
          // Release stage it - 1 to both producers (the cluster barrier at exit keeps the peer alive).
          if (lane == 0) {
            const uint32_t ps = (it - 1) % kStages;
            mbarrier_arrive(empty(ps));
            mbarrier_arrive_cluster(empty(ps), peer);
          }
        }
      }
      wgmma_wait<0>();
      fence_registers(acc);
      t = rec.now();  // the last k-block retired; the epilogue starts here
      if (lane == 0) {
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
  // Every stage is released to both producers, so a peer's last arrives may come after this CTA's
  // own work is done: leave together.
  cluster_sync();
  if (dynamic && tid == 0) {  // the last CTA out resets the counter for the next launch
    __threadfence();
    if (atomicAdd(tile_counter + 1, 1) == int(gridDim.x) - 1) {
      tile_counter[0] = 0;
      tile_counter[1] = 0;
      __threadfence();
    }
  }
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
  // Under dynamic scheduling a cluster may take more than its share: size for twice the share.
  const int tiles_per_cluster = host::ceil_div(units, clusters) * (args->sched == 1 ? 2 : 1);
  *p = GtPlan{};
  p->grid_ctas = clusters * kCluster;
  p->regions_per_cta = 1 + kConsumers;
  // setup, the final claim; per tile: a claim, two spans per k-block, the epilogue
  p->records_per_region = tiles_per_cluster * (2 * num_kb + 2) + 2;
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
  if (args->sched == 1 && args->tile_counter == nullptr)
    return host::fail(err, errlen, "dynamic scheduling needs a tile counter (two zeroed int32 in device memory)");
  CUtensorMap tmap_a, tmap_b, tmap_c;
  if (host::encode_rows_sw128(&tmap_a, args->a, args->m, args->k, BM, "A", err, errlen)) return 1;
  if (host::encode_rows_sw128(&tmap_b, args->b, args->n, args->k, BN / kCluster, "B", err, errlen)) return 1;
  if (host::encode_rows_sw128(&tmap_c, args->c, args->m, args->n, 64, "C", err, errlen)) return 1;
  auto stream = static_cast<cudaStream_t>(args->stream);
  auto kernel = args->profile ? gemm_v8<true> : gemm_v8<false>;
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
  return host::check_cuda(cudaLaunchKernelEx(&cfg, kernel, tmap_a, tmap_b, tmap_c, args->tile_order, args->tile_counter, int(args->sched == 1),
                                             grid_m_pairs, grid_n, int(args->k),
                                             host::profile_buffer(args, p)),
                          "launching gemm_v8", err, errlen);
}
