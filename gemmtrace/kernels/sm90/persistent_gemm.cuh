// The persistent warp-specialized GEMM of v6 to v10, written once. v6-v9 differ only in the tile
// scheduler they loop on (StaticScheduler below, in row order for v6 and in the host's tile order
// for v7; v8_dynamic.cu and stream_k.cuh define the dynamic and the stream-K one); v10 instantiates
// it for a family of tile shapes (Tile<BM, BN, cluster, stages> below).
//
// One CTA per SM, alone or in clusters of two CTAs on vertically adjacent tiles that share B by TMA
// multicast (v5); v6-v9 run 128x256 tiles in clusters of two. A producer lane and two consumer
// warpgroups loop over the tiles the scheduler hands them; each consumer takes half the tile's rows
// (half its columns when the tile has only 64 rows; a 64x64 tile is the first's alone). The
// pipeline's stages and phases run on across tiles, so the producer loads the next tile while the
// consumers finish this one, and the TMA stores of C (through stmatrix-written, swizzled panels)
// drain under the next tile's mainloop.
//
// A tile scheduler is a template on the tile, Sched<Tile>, and provides (see the kernel files):
//   struct Params;                                   built on the host from GtArgs, passed by value
//   static int params(const GtArgs*, Params*, char* err, int errlen);   nonzero: a one-sentence error
//   static int max_tiles_per_cluster(units, clusters, const GtArgs*);  sizes the profiler buffer
//   static constexpr int kSmemBytes;                 shared memory of its own (after the barriers)
//   __device__ TileScheduler(const Params&, int units, int grid_n, int cluster, int clusters, uint32_t smem);
//   __device__ void init_barriers();                 thread 0, before the cluster barrier
//   __device__ bool next_tile(bool frees, uint32_t rank, Sync group_sync, int& m, int& n);
//   __device__ bool claims() const;                  the producer records a sched_claim span per tile
//   __device__ int index() const;                    position of the current tile in the tile order
//   __device__ void on_exit(uint32_t rank);          the producer lane, leaving: waits for what peers
//                                                    still write into this CTA's shared memory
// A scheduler that hands out parts of a tile's k-loop (stream-K, stream_k.cuh) also declares
// `static constexpr bool kSplitsK = true;` and provides
//   static void plan(const GtArgs*, int units, int num_kb, int max_clusters, GtPlan*);  grid, buffer, workspace
//   __device__ void k_range(int& kb_begin, int& kb_end) const;      the current unit's k-blocks
//   __device__ void coords(uint32_t rank, int& m_block, int& n_block) const;  the current unit's tile
//   __device__ bool fixup(acc, rank, cw, tile, rec, wg_sync, t&);   after the unit's last k-block
//     retired (acc: float[row groups][WN / 2]): false when the tile is finished elsewhere (this
//     unit's share went to the workspace), true when this consumer stores the tile (`acc` then
//     holds the whole sum)
// The others take every tile whole: the code below is then what it was without these hooks.
// A scheduler that claims tiles at run time (v8's dynamic one) may also declare
// `static constexpr int kClaimLead = L;` (L > 0) and provide
//   __device__ void request(uint32_t rank);         the producer lane, once it has issued the loads of
//                                                    a tile's L-th k-block from the end (a shorter
//                                                    unit's first): ask for the next tile, so that the
//                                                    claim's round trips overlap the tile's last loads
//   __device__ void serve(uint32_t rank);           lane 0 of the producer warpgroup's second warp,
//                                                    otherwise idle: make the claims asked for, until
//                                                    one is refused; it waits for the round trips, so
//                                                    that the producer lane never does
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "gemmtrace/cluster.cuh"
#include "gemmtrace/epilogue.cuh"
#include "gemmtrace/host.cuh"
#include "gemmtrace/mbarrier.cuh"
#include "gemmtrace/profiler.cuh"
#include "gemmtrace/tma.cuh"
#include "gemmtrace/wgmma.cuh"

namespace persistent {

using namespace gemmtrace;

constexpr int BK = 64;
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kThreads = 128 * (1 + kConsumers);
constexpr int kPanelBytes = 64 * 128;  // one 64x64 bf16 panel of C
constexpr int kRecordRing = 32;  // records each recording warp stages in shared memory (profiler.cuh)
constexpr int kRecorders = 1 + kConsumers;
constexpr int kRecorderBytes = kRecorders * Recorder<true, kRecordRing>::kSmemBytes;

// A tile shape: BM x BN output tiles, kCluster CTAs a cluster (along M, sharing B by multicast),
// kStages pipeline stages. Consumer warpgroup cw computes a WM x WN part of the tile: rows
// [cw * WM, ...) when BM >= 128, columns [cw * WN, ...) when BM = 64; as kRowGroups wgmma of
// m64nWN per 16-wide k step.
// kSplitK > 1 (with kCluster = 1): a cluster of kSplitK CTAs computes one tile at a time, each CTA
// a contiguous share of its k-loop, and the CTAs sum their accumulators through distributed shared
// memory (the scheduler's fix-up, stream_k.cuh): CTA r ends up with piece r of each consumer's
// part (float4s [r * kPieceFloat4s, ...) of a thread's accumulators) and stores it to C itself.
// Those tiles need no panel buffers: their shared memory holds the pieces received instead.
template <int BM_, int BN_, int kCluster_, int kStages_, int kSplitK_ = 1>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, kCluster = kCluster_, kStages = kStages_, kSplitK = kSplitK_;
  static constexpr int kClusterCTAs = kCluster * kSplitK;  // the launch's cluster size
  // Rows split where each consumer's half is whole m64 row groups (128, 256 rows); otherwise
  // columns (64 rows: one row group; 192: three row groups each, of half the columns).
  static constexpr bool kSplitRows = BM % 128 == 0;
  // Consumer warpgroups that compute: both, except on a 64x64 tile, whose halves would be n32
  // wgmma reading all of A from shared memory twice; there one computes the tile and one idles.
  static constexpr int kParts = kSplitRows || BN >= 128 ? kConsumers : 1;
  static constexpr int WM = kSplitRows ? BM / kConsumers : BM, WN = kSplitRows ? BN : BN / kParts;
  static constexpr int kRowGroups = WM / 64;
  // C leaves through panels of 64 rows and 64 columns (128-byte swizzle), or 32 where a consumer's
  // part is not a multiple of 64 columns wide (64-byte swizzle; C's tensor map has the same box).
  static constexpr int kPanelCols = WN % 64 == 0 ? 64 : 32;
  static constexpr int kPanels = kRowGroups * (WN / kPanelCols);  // panels of C per consumer
  static constexpr int kAccFloat4s = kRowGroups * WN / 8;  // a consumer thread's accumulators, in float4s
  // At most 64 accumulators a consumer thread (64x64, 64x128, 64x256, 128x128): a k-block's wgmma
  // group is short. The producer's registers and the consumers' operand descriptors take another
  // form there (gemm_persistent).
  static constexpr bool kFewAccumulators = kAccFloat4s <= 16;
  static constexpr int kPieceFloat4s = kAccFloat4s / kSplitK;
  static constexpr int kTileBytesA = BM * BK * 2, kTileBytesB = BN * BK * 2;
  static constexpr int kHalfBytesB = kTileBytesB / kCluster;
  static constexpr int kStageBytes = kTileBytesA + kTileBytesB;
  static constexpr int kEpilogueRegionBytes = kSplitK > 1 ? 0 : kParts * 2 * kPanelBytes;
  static constexpr int kPipelineBytes = 1024 + kStages * kStageBytes + kEpilogueRegionBytes + 2 * kStages * 8;
  static_assert(WM % 64 == 0 && WN % 32 == 0 && WN >= 64 && WN <= 256, "consumer parts are m64 row groups of n64..n256 wgmma");
  static_assert(BM <= 256 && BN / kCluster <= 256, "a TMA box has at most 256 rows");
  static_assert(kCluster == 1 || kCluster == 2, "clusters of one or two CTAs along M");
  // Clusters of four or more would need grids sized by what the device holds at once, not by SMs
  // over the cluster size: a cluster must fit in one GPC, and the H100 holds 30 clusters of four
  // (120 of its 132 SMs). Measured slower anyway and dropped (bench/NOTES.md).
  static_assert(kSplitK == 1 || (kCluster == 1 && kSplitK == 2 && kAccFloat4s % kSplitK == 0),
                "k split over the two CTAs of a cluster, without multicast, in equal pieces");
  __host__ __device__ static constexpr int row0(int cw) { return kSplitRows ? cw * WM : 0; }
  __host__ __device__ static constexpr int col0(int cw) { return kSplitRows ? 0 : cw * WN; }
};
using Tile128x256 = Tile<128, 256, 2, 4>;  // v6-v9

// Shared memory: the pipeline, the tile scheduler's own (16-byte aligned), the profiler's rings.
template <class T, class TileScheduler>
constexpr int smem_bytes() { return T::kPipelineBytes + (TileScheduler::kSmemBytes + 15) / 16 * 16 + kRecorderBytes; }
// What a bounded wait reports as its barrier (debug.cuh); kPartialFlag: a global flag (v9).
// kExchangeFull/kExchangeFree: a k-split tile's pieces received, and read by the peers (stream_k.cuh).
// kClaimedBarrier, kReadBarrier, kRequestBarrier: v8's claim ring and its claim thread's requests.
enum BarrierId : uint32_t {
  kFullBarrier = 0, kEmptyBarrier = 1, kClaimedBarrier = 2, kReadBarrier = 3, kRequestBarrier = 4, kPartialFlag = 5,
  kExchangeFull = 6, kExchangeFree = 7
};

// Lane 0's v, which every lane of the warp already holds. Said this way, ptxas knows the value is
// warp-uniform and keeps what follows from it in uniform registers: the k-loop's wgmma descriptors
// follow from the warpgroup's index and the stage counters, and where either looked divergent to
// ptxas (an index from threadIdx; counters carried around the tile loop past a stream-K fix-up,
// whose per-thread waits ptxas cannot see through) it built them in ordinary registers and moved
// each into uniform ones with R2UR before every wgmma.
template <class V>
__device__ __forceinline__ V warp_uniform(V v) { return V(__shfl_sync(0xffffffffu, int(v), 0)); }

// Zero, in a form ptxas cannot prove warp-uniform (the lane id shifted out): what is added to it
// stays in ordinary registers.
__device__ __forceinline__ int per_thread_zero() {
  int zero;
  asm volatile("{\n .reg .u32 lane;\n mov.u32 lane, %%laneid;\n shr.u32 %0, lane, 5;\n}" : "=r"(zero));
  return zero;
}

// One lane of the converged warp, chosen by elect.sync: one instruction, no register held.
__device__ __forceinline__ bool elect_one() {
  uint32_t elected;
  asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}" : "=r"(elected));
  return elected != 0;
}

template <class S, class = void>
struct SplitsK : std::false_type {};
template <class S>
struct SplitsK<S, std::void_t<decltype(S::kSplitsK)>> : std::bool_constant<S::kSplitsK> {};
// A scheduler's kClaimLead (see request above), or 0: no claims asked for ahead.
template <class S, class = void>
struct ClaimLead : std::integral_constant<int, 0> {};
template <class S>
struct ClaimLead<S, std::void_t<decltype(S::kClaimLead)>> : std::integral_constant<int, S::kClaimLead> {};

// The static schedule of v6 and v7: cluster c of G visits entries c, c + G, c + 2G, ... of a tile
// order, row order when there is none (v6) or the table the host built (v7, gemmtrace/tile_order.py).
// An entry is a cluster tile u = m_group * grid_n + n_block; rank r of the cluster takes m block
// kCluster * m_group + r.
template <class T, bool kOrdered>
struct StaticScheduler {
  struct Params {
    const int32_t* order;
  };
  static constexpr int kSmemBytes = 0;
  const int32_t* order;
  int units, grid_n, clusters, next;

  static int params(const GtArgs* args, Params* p, char* err, int errlen) {
    if (kOrdered && host::require_order_table(args, err, errlen)) return 1;
    p->order = kOrdered ? args->tile_order : nullptr;
    return 0;
  }
  static int max_tiles_per_cluster(int units, int clusters, const GtArgs*) { return host::ceil_div(units, clusters); }
  __device__ StaticScheduler(const Params& p, int units_, int grid_n_, int cluster, int clusters_, uint32_t)
      : order(p.order), units(units_), grid_n(grid_n_), clusters(clusters_), next(cluster) {}
  __device__ void init_barriers() {}
  template <typename GroupSync>
  __device__ bool next_tile(bool, uint32_t rank, GroupSync, int& m_block, int& n_block) {
    if (next >= units) return false;
    const int u = kOrdered && order != nullptr ? __ldg(order + next) : next;
    m_block = (u / grid_n) * T::kCluster + int(rank);
    n_block = u % grid_n;
    next += clusters;
    return true;
  }
  __device__ bool claims() const { return false; }
  __device__ int index() const { return next - clusters; }
  __device__ void on_exit(uint32_t) {}
};

template <bool kProfile, class T, class TileScheduler>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_persistent(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                    const __grid_constant__ CUtensorMap tmap_c, const typename TileScheduler::Params sched_params,
                    int grid_m_groups, int grid_n, int num_kb, ProfileBuffer prof) {
  constexpr bool kSplitsK = SplitsK<TileScheduler>::value;
  constexpr int kClaimLead = ClaimLead<TileScheduler>::value;
  constexpr int BM = T::BM, BN = T::BN, kCluster = T::kCluster, kStages = T::kStages, WN = T::WN;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t stage0 = (smem_addr(smem_raw) + 1023) & ~1023u;  // swizzle atoms need 1024-byte alignment
  const uint32_t epi0 = stage0 + kStages * T::kStageBytes;
  const uint32_t full0 = epi0 + T::kEpilogueRegionBytes, empty0 = full0 + kStages * 8, sched_smem = empty0 + kStages * 8;
  auto smem_a = [&](int s) { return stage0 + s * T::kStageBytes; };
  auto smem_b = [&](int s) { return stage0 + s * T::kStageBytes + T::kTileBytesA; };
  auto full = [&](int s) { return full0 + s * 8; };
  auto empty = [&](int s) { return empty0 + s * 8; };
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = warp_uniform(warp / 4);
  const uint32_t rank = kCluster > 1 ? cluster_ctarank() : 0, peer = rank ^ 1;
  // Each role builds its own scheduler after the register split (setmaxnreg): state carried across
  // it has to fit the producer's 40 registers, and ptxas spills it otherwise.
  auto make_scheduler = [&] {
    return TileScheduler(sched_params, grid_m_groups * grid_n, grid_n, int(cluster_index()), int(cluster_count()), sched_smem);
  };
  int m_block, n_block;

  Recorder<kProfile, kRecordRing> rec;
  const uint32_t rec_smem = sched_smem + (TileScheduler::kSmemBytes + 15) / 16 * 16;
  // The recorders are set up while the cluster barrier completes: init reads the profile buffer's
  // kernel parameter, a cold constant-cache line at launch (0.3-0.4 us on the H100), and thread 0,
  // a recording thread, initialised the barriers only after it. The setup span still starts here,
  // at the base time read now. (Warp 3 warming the scheduler's parameters there as well cost v8's
  // plain build 0.2-0.3 us at 6144x6144x1096 in four runs; bench/NOTES.md.)
  const ClockStamp entry = kProfile && warp % 4 == wg ? clock_stamp() : ClockStamp{0, 0};
  uint32_t t = uint32_t(entry.clk);
  auto init_recorder = [&] {
    // Recording warps: the producer (warp 0) and warps 5 and 10, one per SM sub-partition (warp % 4),
    // so no scheduler issues for all three.
    if (warp % 4 == wg)
      rec.init(prof, wg, wg == 0 ? Role::PRODUCER : Role::CONSUMER, rec_smem + wg * Recorder<true, kRecordRing>::kSmemBytes, entry);
  };
  if (tid == 0) {
    tma_prefetch_descriptor(&tmap_a);
    tma_prefetch_descriptor(&tmap_b);
    tma_prefetch_descriptor(&tmap_c);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), kCluster * T::kParts * 4);  // every computing consumer warp of the cluster's CTAs
    }
    make_scheduler().init_barriers();
    mbarrier_init_fence();
  }
  // The peers' barriers are initialised before anyone multicasts, stores or arrives on them.
  if constexpr (T::kClusterCTAs > 1) {
    cluster_arrive_after_init();
    init_recorder();
    cluster_wait();
  } else {
    init_recorder();
    __syncthreads();
  }
  t = rec.record(Tag::SETUP, t);

  if (wg == 0) {  // ---------------- producer ----------------
    setmaxnreg_dec<40>();
    TileScheduler sched = make_scheduler();
    // One elected lane runs the whole load loop: waiting, issuing and recording with no warp-wide
    // reconvergence per k-block (recording from the full warp here cost v4 14.5% at 4096^3).
    if (warp == 0 && lane == 0) {
      int it = 0;  // k-blocks loaded so far, across tiles
      // The next stage to load and the parity of its empty barrier's phase to wait for, kept as
      // counters like the consumers' (deriving them from `it` put a division by the stage count on
      // the lone issuing lane's path from one k-block's loads to the next).
      int stage = 0;
      uint32_t phase = 1;
      // The lone lane's stage and coordinates: ptxas keeps them in uniform registers throughout,
      // unless told they are per-thread; then it keeps them in ordinary ones and moves them into
      // uniform ones inside each TMA issue. The tiles with few accumulators (with the consumers'
      // counters uniform, below) run their load-bound k-loops faster that way on the H100: 64x64/c2
      // up to 6 % and 64x64/c1 16 % at 512x1024x8192, the others within their spread. Found in the
      // profiled build, whose records gave the loop that form; why the loads then arrive sooner is
      // not known (bench/NOTES.md).
      const int stage_offset = T::kFewAccumulators ? per_thread_zero() : 0;
      while (true) {
        const bool more = sched.next_tile(true, rank, [] {}, m_block, n_block);
        const uint32_t tile = more ? uint32_t(m_block) * grid_n + n_block : kNoTile;
        // The claim span carries the tile (none for the final, empty claim) and, as its k-block,
        // the claim's position in the tile order, so the trace holds the exact claim sequence.
        if (sched.claims()) t = rec.record(Tag::SCHED_CLAIM, t, tile, more ? uint32_t(sched.index()) : kNoKBlock);
        if (!more) break;
        int kb0 = 0, kb1 = num_kb;  // the k-blocks of this tile to load: all, unless the scheduler splits K
        if constexpr (kSplitsK) sched.k_range(kb0, kb1);
        // One tma_issue span per unit, from the producer's previous span (its claim, the previous
        // unit or setup) to the unit's last loads issued, and a wait_empty span inside it where a
        // stage was not free. Recording (and polling) every k-block's issue cost the 128x128 tiles
        // 11 points at 4096^3: the lone producer lane is on the loads' critical path (bench/NOTES.md).
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          const int s = stage + stage_offset;
          const uint32_t parity = phase;
          if (++stage == kStages) stage = 0, phase ^= 1;
          // A wait for a free stage is recorded only when it outlasts try_wait's own suspension, and
          // right where it ends, before the loads: stored after them (behind a was-free flag) the
          // record made ptxas lay the loop out around it, and that cost the profiled 64x64/c2 tile
          // 11 points at 512x1024x8192, where no such wait was ever recorded (bench/NOTES.md).
          if (!mbarrier_try_wait(empty(s), parity)) {
            const uint32_t from = rec.now();
            mbarrier_wait(empty(s), parity, WaitSite{uint32_t(Role::PRODUCER), kEmptyBarrier, tile, uint32_t(kb)});
            rec.record(Tag::WAIT_EMPTY, from, tile, kb);
            rec.poll();  // it waited anyway
          }
          if (!debug_drop_load(it)) {
            // This CTA's full barrier counts its own A and all of B (its own half and, in a
            // cluster, the half the peer multicasts).
            mbarrier_arrive_expect_tx(full(s), T::kStageBytes);
            tma_load_2d(smem_a(s), &tmap_a, full(s), kb * BK, m_block * BM);
            if constexpr (kCluster > 1)
              tma_load_2d_multicast(smem_b(s) + rank * T::kHalfBytesB, &tmap_b, full(s), kb * BK,
                                    n_block * BN + rank * (BN / kCluster), uint16_t((1u << kCluster) - 1));
            else
              tma_load_2d(smem_b(s), &tmap_b, full(s), kb * BK, n_block * BN);
          }
          if constexpr (kClaimLead > 0)
            if (kb == kb1 - kClaimLead || (kb == kb0 && kb1 - kb0 < kClaimLead)) sched.request(rank);
        }
        t = rec.record(Tag::TMA_ISSUE, t, tile, kb0);
        rec.poll();
      }
      // Leaving. Every consumer warp of the cluster arrives on this CTA's empty barriers after each
      // k-block, the peer's remotely, and nobody waits for the last kStages of those arrivals. The
      // producer waits for them here, as if it were loading kStages more k-blocks, so this CTA's
      // shared memory outlives the peer's last remote arrive. The producer is idle by now and the
      // wait ends under the consumers' last epilogue; the cluster barrier at exit that did this job
      // cost every launch 0.3-1 us (bench/NOTES.md). The peer's multicasts into this CTA have all
      // landed: this CTA's consumers waited for each of them. Unbounded: if it never ends, a
      // consumer is stuck in a bounded wait, and that wait's report names the cause.
      if constexpr (kCluster > 1)
        for (int i = 0; i < kStages; ++i) {
          mbarrier_wait_unbounded(empty(stage), phase);
          if (++stage == kStages) stage = 0, phase ^= 1;
        }
      sched.on_exit(rank);
    }
    if constexpr (kClaimLead > 0)
      if (warp == 1 && lane == 0) sched.serve(rank);
  } else if (wg - 1 >= T::kParts) {  // ---------------- an idle consumer (64x64 tiles) ----------------
    setmaxnreg_dec<40>();
  } else {  // ---------------- consumers ----------------
    setmaxnreg_inc<232>();
    TileScheduler sched = make_scheduler();
    const int cw = wg - 1;  // this consumer's part of the tile
    // The stages' base, said warp-uniform where tiles are claimed (see next_tile below): otherwise
    // the profiled dynamic k-loop kept it, the stage counter and the warpgroup index in ordinary
    // registers and moved two of them with R2UR every k-block; with it, one (the static kernel's
    // form), and its profiled build 0.5 % faster at 6144x6144x1096 on the H100 (bench/NOTES.md).
    // The consumers' smem_a and smem_b shadow the kernel's, with that base.
    const uint32_t base = kClaimLead > 0 ? warp_uniform(stage0) : stage0;
    auto smem_a = [&](int s) { return base + s * T::kStageBytes; };
    auto smem_b = [&](int s) { return base + s * T::kStageBytes + T::kTileBytesA; };
    const bool issuer = (tid % 128) == 0;
    const uint32_t buf = epi0 + cw * 2 * kPanelBytes;
    float acc[T::kRowGroups][WN / 2];
    // The previous tile's C as bf16 pairs. Its epilogue is deferred: packing frees the accumulators
    // at once, and the panels are written to shared memory and stored one per k-block under the
    // next tile's first wgmma groups, so the tensor cores wait for the packing only, not the stores.
    uint32_t packed[T::kRowGroups][WN / 4];
    int prev_m = -1, prev_n = 0;  // the tile in `packed`, if any
    uint32_t epi_start = 0;
    // Release stage ps to the producer of each CTA of the cluster (the peer's producer drains these
    // arrives before its CTA leaves: see the producer's exit).
    // The lane that arrives: lane 0 where the consumer has a register to hold that test in. Past 128
    // accumulators a thread (192x192) its profiled build had none, and ptxas recomputed the test
    // from %tid at each release: an S2R and four dependent instructions among the k-block's wgmma.
    // There elect.sync picks the lane: 0.8-1.5 us off the profiled 192x192/c2 at 4160^3 and up to
    // 1.0 us off its plain build on the H100. Elsewhere lane 0: the 64x64/c2 tile, which holds
    // the test, ran 0.4 us slower at 512x1024x8192 with elect.sync (bench/NOTES.md).
    auto release = [&](int ps) {
      if (T::kAccFloat4s > 32 ? elect_one() : lane == 0) {
        mbarrier_arrive(empty(ps));
        if constexpr (kCluster > 1) mbarrier_arrive_cluster(empty(ps), peer);
      }
    };
    // Panel p of the previous tile (64 rows of row group p / kCols, kPanelCols columns), through
    // one of this warpgroup's two panel buffers.
    auto store_panel = [&](int p) {
      constexpr int kCols = WN / T::kPanelCols;
      const uint32_t panel = buf + (p % 2) * kPanelBytes;
      // The store that last read this buffer is done reading: the store before the latest, except
      // at a tile's first panel where a tile has an odd number of panels (64x64 and 64x128: 1,
      // 128x192: 3, 192x192: 9). There the previous tile's last panel went through buffer 0 too and
      // may be the latest store, so wait for every store. Waiting for all but the latest let a short
      // k-loop overwrite a panel the TMA was still reading: on an H200, 37 of 200 launches of
      // 128x192/c2 at 4096x4096x64 gave a C that differed from the first launch's (bench/NOTES.md).
      if (issuer) {
        if (T::kPanels % 2 == 1 && p == 0)
          tma_store_wait_read<0>();
        else
          tma_store_wait_read<1>();
      }
      named_barrier_sync(1 + cw, 128);
      stmatrix_panel<T::kPanelCols, WN>(packed[p / kCols], p % kCols, panel);
      fence_async_shared();  // make the generic-proxy writes visible to the TMA engine
      named_barrier_sync(1 + cw, 128);
      if (issuer) {
        // (one row group: the panels run along the columns; more: kCols panels a row group). The
        // general form alone gives the same values, but ptxas then builds v10's 128x256/c2 k-loop
        // descriptors in ordinary registers (6-10 more instructions a k-block): keep the branch.
        const int col = T::kRowGroups == 1 ? T::col0(cw) + p * T::kPanelCols : T::col0(cw) + (p % kCols) * T::kPanelCols;
        const int row = T::kRowGroups == 1 ? T::row0(cw) : T::row0(cw) + (p / kCols) * 64;
        tma_store_2d(&tmap_c, panel, prev_n * BN + col, prev_m * BM + row);
        tma_store_commit();
      }
      if (p == T::kPanels - 1) rec.record(Tag::EPILOGUE, epi_start, uint32_t(prev_m) * grid_n + prev_n);
    };
    // The k-loop's position: the next k-block's stage and its full barrier's parity, kept as
    // counters. Derived from a count of k-blocks (it % kStages, it / kStages) they put a division by
    // the stage count on the path from one wgmma group to the next, and where the stage count is not
    // a power of two and the k-block is short, that set the pace: 64x64/c2 (13 stages) ran a fifth
    // slower at 512x1024x8192, 128x128/c2 (6 stages) 5 % slower at 8192^3 (bench/NOTES.md).
    int stage = 0;
    uint32_t phase = 0;
    auto stage_before = [](int s) { return s == 0 ? kStages - 1 : s - 1; };
    // After each tile the counters are said again to be warp-uniform (warp_uniform), so that the
    // k-loops build the descriptors in uniform registers: 0.3-1 point of cuBLAS more at 4096^3 and
    // 6144x6144x1096 on the H100, the other large shapes within their spread. On 64x64/c2 it pays
    // only together with the producer's per-thread form (above): about 4 % with it, 2-3 % slower
    // without it (bench/NOTES.md).
    auto after_tile = [&] { stage = warp_uniform(stage), phase = warp_uniform(phase); };
    auto wg_sync = [cw] { named_barrier_sync(1 + cw, 128); };
    // A claimed tile (kClaimLead > 0) is read from shared memory by every thread, so ptxas takes
    // the tile loop's exit for divergent and keeps everything carried around the loop (the stage
    // counters, the stages' base, the warpgroup index) in ordinary registers: the k-loop then built
    // its descriptors there and moved them with 16 R2UR a k-block. Said warp-uniform, the exit lets
    // the k-loop keep them in uniform registers as the static schedule's does: v8's dynamic
    // schedule went from 0.0-0.2 % behind static to 0.2 % ahead at 4096^3 on the H100 (bench/NOTES.md).
    auto next_tile = [&] {
      const bool more = sched.next_tile(issuer, rank, wg_sync, m_block, n_block);
      return kClaimLead > 0 ? bool(warp_uniform(int(more))) : more;
    };
    for (; next_tile(); after_tile()) {
      const uint32_t tile = uint32_t(m_block) * grid_n + n_block;
      int kb0 = 0, kb1 = num_kb;  // the k-blocks of this tile to compute: all, unless the scheduler splits K
      if constexpr (kSplitsK) sched.k_range(kb0, kb1);
      const int nkb = kb1 - kb0;  // 0 only for a k-split tile's CTA whose share of a short unit is empty
      // One MMA span per unit, from its first wgmma issue to the retirement of its last k-block: the
      // k-loop itself records nothing (per-k-block spans, contiguous within a unit and so adding
      // nothing to the busy union, cost the 128x128 tiles 3 points at 4096^3), only the waits for
      // data that outlast mbarrier.try_wait's own suspension.
      uint32_t mma_start = 0;
      // One k-block: wait for its stage, issue its wgmma group, run `under_mma` while it computes,
      // then retire k-block kb - 1 and release that stage. `first_kb`: kb is the unit's first k-block
      // (a constant at every call). The tiles with few accumulators take it from there, so that
      // their profiled steady loop carries no test and clock read for the MMA span's start: 0.17-0.21
      // us off the profiled 64x64 tiles at 64x8192x4096 and 512x1024x8192 on the H100, together with
      // the recorder's finish() (profiler.cuh). The others test kb == kb0: told the same, the profiled
      // 128x256 and 256x128 stream-K builds spilled (bench/NOTES.md).
      auto kblock = [&](int kb, bool first_kb, auto&& under_mma) {
        const bool is_first = T::kFewAccumulators ? first_kb : kb == kb0;
        const int s = stage;
        const uint32_t parity = phase;
        // Operand descriptors. Where a consumer holds at most 64 accumulators a thread, the stage's
        // are built once and a k16 step adds its 32 bytes (2 in the low word's 16-byte address
        // field, which no shared-memory address here overflows; the high word does not depend on
        // the address): 4 % off 64x64/c2's time. The tiles with 128 rebuild them per wgmma; the
        // other way ptxas spills their profiled builds. The stage's low words are pinned before
        // the wait (the empty asm), as they do not depend on it: the plain build's scheduler moves
        // them there by itself, but in the profiled one the wait's recording branch stops it, and
        // built after the wait they sat between the data's arrival and the first wgmma (1-2 % of
        // the profiled 64x64/c2's time on the H100; bench/NOTES.md).
        constexpr bool kDescPerStage = T::kFewAccumulators;
        const uint64_t desc_high = make_desc_sw128(0) & ~uint64_t(0xFFFFFFFFu);
        uint32_t stage_a = uint32_t(make_desc_sw128(smem_a(s) + T::row0(cw) * 128));
        uint32_t stage_b = uint32_t(make_desc_sw128(smem_b(s) + T::col0(cw) * 128));
        if constexpr (kDescPerStage) asm volatile("" : "+r"(stage_a), "+r"(stage_b));
        auto desc_a = [&](int g, int k16) {
          return kDescPerStage ? desc_high | (stage_a + (g * 64 * 128 + k16 * 32) / 16)
                               : make_desc_sw128(smem_a(s) + (T::row0(cw) + g * 64) * 128 + k16 * 32);
        };
        auto desc_b = [&](int k16) {
          return kDescPerStage ? desc_high | (stage_b + k16 * 32 / 16)
                               : make_desc_sw128(smem_b(s) + T::col0(cw) * 128 + k16 * 32);
        };
        if (!mbarrier_try_wait(full(s), parity)) {  // the tensor cores may starve here: record it
          const uint32_t from = rec.now();
          mbarrier_wait(full(s), parity, WaitSite{uint32_t(Role::CONSUMER), kFullBarrier, tile, uint32_t(kb)});
          rec.record(Tag::WAIT_FULL, from, tile, kb);
          rec.poll();  // it waited anyway
        }
        if (is_first) mma_start = rec.now();  // the tile's first issue
        wgmma_fence();
#pragma unroll
        for (int k16 = 0; k16 < BK / 16; ++k16)
#pragma unroll
          for (int g = 0; g < T::kRowGroups; ++g)
            wgmma_bf16<WN>(acc[g], desc_a(g, k16), desc_b(k16), (kb > kb0 || k16 > 0) ? 1 : 0);
        wgmma_commit();
        under_mma();
        wgmma_wait<1>();  // the k-block before has retired; this one stays queued
        if (kb > kb0) release(stage_before(s));
        if (++stage == kStages) stage = 0, phase ^= 1;
      };
#pragma unroll
      for (int p = 0; p < T::kPanels; ++p)
        if (p < nkb) kblock(kb0 + p, p == 0, [&] { if (prev_m >= 0) store_panel(p); });
      for (int kb = kb0 + T::kPanels; kb < kb1; ++kb) kblock(kb, false, [] {});
#pragma unroll
      for (int p = 0; p < T::kPanels; ++p)  // fewer k-blocks than panels: the rest of the previous epilogue
        if (p >= nkb && prev_m >= 0) store_panel(p);
      wgmma_wait<0>();
#pragma unroll
      for (int g = 0; g < T::kRowGroups; ++g) fence_registers(acc[g]);
      t = rec.now();  // the last k-block retired; the epilogue starts here
      // (A k-split tile's CTA whose share is empty issued nothing: its fix-up counts its share as
      // zero instead of writing zeros into the accumulators, which would make ptxas serialize every
      // wgmma of the kernel.)
      if (T::kSplitK == 1 || nkb > 0) {
        release(stage_before(stage));  // the unit's last k-block's stage
        rec.record_span(Tag::MMA, mma_start, t, tile, kb0);
        rec.poll();
      }
      if constexpr (T::kSplitK > 1) {
        // A k-split tile: the fix-up sums the cluster's shares and stores this CTA's piece of C
        // itself, so no panel is ever pending here.
        sched.fixup(acc, nkb == 0, rank, cw, tile, rec, wg_sync, t);
      } else {
        if constexpr (kSplitsK) {
          // The previous tile's panels are all stored by now, so nothing is pending when this unit
          // hands its share of the tile to another CTA instead of storing it.
          if (!sched.fixup(acc, false, rank, cw, tile, rec, wg_sync, t)) {
            prev_m = -1;
            continue;
          }
          sched.coords(rank, m_block, n_block);  // recomputed rather than held through the mainloop
        }
#pragma unroll
        for (int g = 0; g < T::kRowGroups; ++g) pack_fragment_bf16<WN>(acc[g], packed[g]);
        prev_m = m_block, prev_n = n_block, epi_start = t;
      }
    }
    if (prev_m >= 0) {  // the last tile's epilogue has no mainloop to hide under
#pragma unroll
      for (int p = 0; p < T::kPanels; ++p) store_panel(p);
    }
    if (issuer) tma_store_wait_read<0>();  // shared memory must outlive the stores' reads
    // A k-split tile's peers arrive on this CTA's barriers after reading the pieces it sent them.
    if constexpr (T::kSplitK > 1) sched.drain_exchange(cw);
  }
  rec.finish();
  // No cluster barrier on the way out: the producer lane stays until the peer's last writes into
  // this CTA's shared memory have landed (above).
}

template <class T>
int grid_m_groups(const GtArgs* args) { return host::ceil_div(host::ceil_div(args->m, T::BM), T::kCluster); }
template <class T>
int grid_n(const GtArgs* args) { return host::ceil_div(args->n, T::BN); }
// Clusters a launch may have: one CTA per SM (or args->max_ctas), grouped into clusters. (Every
// GPC has an even number of SMs, so clusters of two fill them; see Tile for larger ones.)
template <class T>
int max_clusters(const GtArgs* args) {
  const int sms = args->max_ctas > 0 ? args->max_ctas : (args->num_sms > 0 ? args->num_sms : 132);
  return std::max(1, sms / T::kClusterCTAs);
}

// Shapes: any M, N >= 1 with N a multiple of 8 (TMA stores of C) and K a multiple of 8.
template <class T, class TileScheduler>
int plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  if (host::check_bf16_gemm_shape(args, 8, err, errlen)) return 1;
  if (args->n % 8 != 0)
    return host::fail(err, errlen, "N must be a multiple of 8 (TMA stores of C need 16-byte row strides); got N=%lld",
                      (long long)args->n);
  const int units = grid_m_groups<T>(args) * grid_n<T>(args);
  const int clusters = std::max(1, std::min(units, max_clusters<T>(args)));
  const int num_kb = host::ceil_div(args->k, BK);
  *p = GtPlan{};
  p->grid_ctas = clusters * T::kClusterCTAs;
  p->regions_per_cta = 1 + kConsumers;
  // setup and a final claim; per tile: the producer's claim, its issue span and at most a stage wait
  // per k-block, or the consumer's MMA span, at most a data wait per k-block and the epilogue
  p->records_per_region = TileScheduler::max_tiles_per_cluster(units, clusters, args) * (num_kb + 2) + 2;
  p->block_threads = kThreads;
  static_assert(smem_bytes<T, TileScheduler>() <= 227 * 1024, "more shared memory than an H100 CTA may have");
  p->smem_bytes = smem_bytes<T, TileScheduler>();
  p->tile_m = T::BM, p->tile_n = T::BN, p->tile_k = BK;
  p->stages = T::kStages;
  p->cluster = T::kCluster;
  p->split_k = T::kSplitK;
  p->tiles = units * T::kCluster;
  if constexpr (SplitsK<TileScheduler>::value) TileScheduler::plan(args, units, num_kb, max_clusters<T>(args), p);
  return 0;
}

// The plain or the profiled build (GtArgs.profile), allowed the plan's dynamic shared memory; null
// (with the error in `err`) when the runtime refuses.
template <class T, class TileScheduler>
auto kernel_for(const GtArgs* args, const GtPlan& p, char* err, int errlen) {
  auto kernel = args->profile ? gemm_persistent<true, T, TileScheduler> : gemm_persistent<false, T, TileScheduler>;
  if (host::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem_bytes),
                       "cudaFuncSetAttribute", err, errlen))
    return decltype(kernel)(nullptr);
  return kernel;
}

// The launch of the plan's grid in clusters of T::kCluster (`attr` holds the cluster attribute).
template <class T>
cudaLaunchConfig_t launch_config(const GtPlan& p, cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(p.grid_ctas);
  cfg.blockDim = dim3(p.block_threads);
  cfg.dynamicSmemBytes = p.smem_bytes;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim = {unsigned(T::kClusterCTAs), 1, 1};
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

template <class T, class TileScheduler>
int launch(const GtArgs* args, const char* name, char* err, int errlen) {
  GtPlan p;
  if (plan<T, TileScheduler>(args, &p, err, errlen)) return 1;
  typename TileScheduler::Params sched_params;
  if (TileScheduler::params(args, &sched_params, err, errlen)) return 1;
  CUtensorMap tmap_a, tmap_b, tmap_c;
  if (host::encode_rows_sw128(&tmap_a, args->a, args->m, args->k, T::BM, "A", err, errlen)) return 1;
  if (host::encode_rows_sw128(&tmap_b, args->b, args->n, args->k, T::BN / T::kCluster, "B", err, errlen)) return 1;
  // C's box is one panel (epilogue.cuh): 64 columns in the 128-byte swizzle, or 32 in the 64-byte one.
  const auto c_swizzle = T::kPanelCols == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  if (host::encode_rows(&tmap_c, args->c, args->m, args->n, 64, c_swizzle, "C", err, errlen)) return 1;
  auto stream = static_cast<cudaStream_t>(args->stream);
  const auto kernel = kernel_for<T, TileScheduler>(args, p, err, errlen);
  if (kernel == nullptr) return 1;
  if (host::set_hang_report(args, stream, err, errlen)) return 1;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = launch_config<T>(p, stream, attr);
  return host::check_cuda(cudaLaunchKernelEx(&cfg, kernel, tmap_a, tmap_b, tmap_c, sched_params, grid_m_groups<T>(args),
                                             grid_n<T>(args), host::ceil_div(int(args->k), BK), host::profile_buffer(args, p)),
                          name, err, errlen);
}

}  // namespace persistent
