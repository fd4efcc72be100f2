// v8 (sm_90a): v7 plus dynamic scheduling: clusters claim cluster tiles from a global atomic
// counter, the Hopper stand-in for Blackwell's Cluster Launch Control.
//
// What changes from v7: with --sched dynamic, each cluster starts on its own entry of the tile
// order (entry c for cluster c: the first wave needs no claim), and from then on a claim thread of
// its rank-0 CTA (lane 0 of the producer warpgroup's second warp, idle otherwise) claims the next
// entry with one atomic on a global counter, loads the entry's tile, and publishes both to both CTAs
// through a three-slot ring in shared memory (st.shared::cluster into the peer and a release.cluster
// arrive on each CTA's "claimed" barrier). Every role of both CTAs (the two producers and the four
// consumer warpgroups) reads its next tile from the ring, and frees the slot with an arrive on rank
// 0's "read" barrier (which the claim thread drains before it leaves: the CTAs leave without a
// cluster barrier). An SM whose tiles ran fast simply claims more: no partial last wave is left to
// the SMs that happened to get one tile too many under the static schedule.
// The claim is asked for early: rank 0's producer asks (an arrive on the claim thread's "request"
// barrier) once it has issued the loads of the tile's kClaimLead-th k-block from the end, not after
// its last. Claimed after the last loads, the claim's round trip to L2 (and its publication to the
// peer's producer, whose multicast half of B the next tile's first stages wait for) delayed the
// next tile's first loads while the stages the consumers freed meanwhile stayed empty, and the
// consumers waited at the tile switch. Claimed by the producer lane itself, under its loads, the
// round trips still held up its next loads: ptxas waits for an atomic's or a load's result at the
// next barrier wait of the load loop, though nothing reads it there. With the claim thread dynamic
// runs 1.0 % ahead of static at 6144x6144x1096 on the H100, where the producer's own claim left it
// 0.35 % behind (bench/NOTES.md).
// The counter resets itself: every cluster claims until it is refused once, so a launch makes
// exactly `units` claims (units - clusters tiles, then one refusal a cluster), and the counter's
// atom.inc wraps to zero on the last of them (nobody claims after it). No extra launch and no
// atomic at exit: an exit-time count of finished CTAs, the first form of this, put a fence and a
// contended atomic on every CTA's way out.
// --sched static runs v7's kernel (the same scheduler and instantiation), so the two differ in one
// thing only: the scheduler below (the kernel body is persistent_gemm.cuh). Both were once one
// kernel, switched at run time; the static path's speed then moved with every change to the dynamic
// one's code (0.3-0.7 points of cuBLAS lost at 4096^3 and 6144x6144x1096 when the first tiles went
// unclaimed, its own logic unchanged; bench/NOTES.md).
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include "gemmtrace/flags.cuh"
#include "persistent_gemm.cuh"

namespace {

using namespace gemmtrace;

using Tile = persistent::Tile128x256;
using StaticScheduler = persistent::StaticScheduler<Tile, true>;  // v7's: the host's tile order
// Claimed tiles in flight between rank 0's claim thread and the readers. Three: the claim for the
// tile after next may be made before every reader has taken the claim two back (a tile shorter than
// the producer's lead over the consumers), and its slot must be free then.
constexpr int kClaimSlots = 3;
// Who reads each claim and frees its slot: every producer and consumer warpgroup of the cluster.
constexpr int kClaimReaders = (1 + persistent::kConsumers) * Tile::kCluster;

// Dynamic (--sched dynamic): cluster c takes entry c of the tile order first, then position
// clusters + n for the n-th number the counter hands out, claimed by a thread of rank 0's producer
// warpgroup and passed to everyone through the claim ring with its entry of the order. An entry is a
// cluster tile u = m_pair * grid_n + n_block; rank r of the cluster takes m block 2 * m_pair + r.
struct DynamicScheduler {
  struct Params {
    const int32_t* order;  // the tile order (row order when null)
    int32_t* counter;      // claims made, zero before the first launch (and after each)
  };
  // The claim ring: claimed[kClaimSlots] barriers, read[kClaimSlots] barriers, slot[kClaimSlots]
  // (position in the tile order, entry) pairs; then the barrier the producer asks for claims on.
  static constexpr int kSmemBytes = kClaimSlots * (8 + 8 + 8) + 8;
  // Rank 0's producer asks for the next tile once it has issued the loads of this tile's
  // kClaimLead-th k-block from the end, and the claim thread makes the claim: the counter's atomic
  // and the entry's load, two round trips to L2, then the publication. Made by the producer lane
  // itself, the round trips held up its loads (ptxas waits for an atomic's or a load's result at the
  // next barrier wait of the k-loop, though nothing reads it there), and the stages the consumers
  // freed meanwhile stayed empty (bench/NOTES.md).
  static constexpr int kClaimLead = 6;

  Params p;
  int units, grid_n, clusters;
  int first;  // this cluster's first entry, -1 once taken
  uint32_t ring;
  int taken = 0;    // claims this participant has taken from (the claim thread: put in) the ring
  int index_ = -1;  // position in the tile order of the current tile

  static int params(const GtArgs* args, Params* out, char* err, int errlen) {
    if (host::require_order_table(args, err, errlen)) return 1;
    if (args->tile_counter == nullptr)
      return host::fail(err, errlen, "dynamic scheduling needs a tile counter (a zeroed int32 in device memory)");
    *out = Params{args->tile_order, args->tile_counter};
    return 0;
  }
  // A cluster may take more than its share: size for twice the share.
  static int max_tiles_per_cluster(int units, int clusters, const GtArgs*) { return host::ceil_div(units, clusters) * 2; }

  __device__ DynamicScheduler(const Params& p_, int units_, int grid_n_, int cluster, int clusters_, uint32_t smem)
      : p(p_), units(units_), grid_n(grid_n_), clusters(clusters_), first(cluster), ring(smem) {}

  __device__ uint32_t claimed_bar(int j) const { return ring + j * 8; }
  __device__ uint32_t read_bar(int j) const { return ring + kClaimSlots * 8 + j * 8; }
  __device__ uint32_t slot(int j) const { return ring + kClaimSlots * 16 + j * 8; }
  __device__ uint32_t request_bar() const { return ring + kClaimSlots * 24; }
  __device__ int entry(int i) const { return p.order != nullptr ? __ldg(p.order + i) : i; }
  // The parity read_bar(n % kClaimSlots) completes once every reader has freed claim n - kClaimSlots,
  // what claim n waits for before it takes the slot.
  static __device__ uint32_t freed_parity(int n) { return ((n / kClaimSlots) & 1) ^ 1; }

  __device__ void init_barriers() {
    for (int j = 0; j < kClaimSlots; ++j) {
      mbarrier_init(claimed_bar(j), 1);
      mbarrier_init(read_bar(j), kClaimReaders);
    }
    mbarrier_init(request_bar(), 1);
  }

  // Rank 0's producer: ask the claim thread for the next tile (one request a tile; the next comes
  // only after the producer has read this one's claim, so no request is ever two phases ahead).
  __device__ void request(uint32_t rank) {
    if (rank == 0) mbarrier_arrive(request_bar());
  }

  // Rank 0's claim thread: for each request, take a number from the counter (atom.inc: the launch's
  // last claim, the units-th, leaves it at zero for the next launch), load the claimed tile's entry,
  // and publish both to every reader of both CTAs; until a claim is refused (-1).
  __device__ void serve(uint32_t rank) {
    if (rank != 0) return;
    for (int i = 0; i >= 0; ++taken) {
      mbarrier_wait(request_bar(), taken & 1,
                    WaitSite{uint32_t(Role::SCHEDULER), persistent::kRequestBarrier, kNoTile, uint32_t(taken)});
      const int c = counter_take(p.counter, units - 1);
      i = c + clusters < units ? c + clusters : -1;  // entries below `clusters` went out unclaimed
      const int u = i >= 0 ? entry(i) : 0;
      const int j = taken % kClaimSlots;
      // Wait until every reader has read what this slot held kClaimSlots claims ago.
      mbarrier_wait(read_bar(j), freed_parity(taken),
                    WaitSite{uint32_t(Role::SCHEDULER), persistent::kReadBarrier, kNoTile, uint32_t(taken)});
      auto* local = reinterpret_cast<volatile int32_t*>(__cvta_shared_to_generic(slot(j)));
      local[0] = i, local[1] = u;
      st_shared_cluster(slot(j), 1, i);
      st_shared_cluster(slot(j) + 4, 1, u);
      mbarrier_arrive(claimed_bar(j));
      mbarrier_arrive_release_cluster(claimed_bar(j), 1);
    }
    // Leaving: the readers free each claim's slot with an arrive on this CTA's read barrier (rank
    // 1's remotely), and nobody waits for the frees of the last kClaimSlots - 1 claims before the
    // final one. Wait for them as the claims kClaimSlots later would, so that this CTA's shared
    // memory outlives them (the final claim is never freed). Unbounded: a reader that never frees is
    // stuck in a bounded wait that reports.
    for (int c = taken - kClaimSlots; c < taken - 1; ++c)
      if (c >= 0) mbarrier_wait_unbounded(read_bar(c % kClaimSlots), freed_parity(c + kClaimSlots));
  }

  // Everyone else: take the next claim and its entry from the ring. `frees`: this thread arrives for
  // its group, after `group_sync` (which makes sure the whole group has read the slot).
  template <typename GroupSync>
  __device__ int read_claim(bool frees, uint32_t rank, GroupSync group_sync, int& u) {
    const int j = taken % kClaimSlots;
    mbarrier_wait<true>(claimed_bar(j), (taken / kClaimSlots) & 1,
                        WaitSite{uint32_t(Role::SCHEDULER), persistent::kClaimedBarrier, kNoTile, uint32_t(taken)});
    const auto* held = reinterpret_cast<volatile int32_t*>(__cvta_shared_to_generic(slot(j)));
    const int i = held[0];
    u = held[1];
    ++taken;
    group_sync();
    // The final claim (-1) is not freed: nobody reuses its slot, and rank 0 may already be gone.
    if (frees && i >= 0) {
      if (rank == 0) mbarrier_arrive(read_bar(j));
      else mbarrier_arrive_cluster(read_bar(j), 0);
    }
    return i;
  }

  template <typename GroupSync>
  __device__ bool next_tile(bool frees, uint32_t rank, GroupSync group_sync, int& m_block, int& n_block) {
    int u;
    if (first >= 0) {  // the cluster's own entry (clusters <= units: the grid is never larger)
      index_ = first;
      first = -1;
      u = entry(index_);
    } else {
      index_ = read_claim(frees, rank, group_sync, u);
    }
    if (index_ < 0) return false;
    m_block = (u / grid_n) * Tile::kCluster + int(rank);
    n_block = u % grid_n;
    return true;
  }

  __device__ bool claims() const { return true; }
  __device__ int index() const { return index_; }
  __device__ void on_exit(uint32_t) {}  // (the claim thread waits for the last frees: serve)
};

}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  return args->sched == 1 ? persistent::plan<Tile, DynamicScheduler>(args, p, err, errlen)
                          : persistent::plan<Tile, StaticScheduler>(args, p, err, errlen);
}

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  return args->sched == 1 ? persistent::launch<Tile, DynamicScheduler>(args, "launching gemm_v8", err, errlen)
                          : persistent::launch<Tile, StaticScheduler>(args, "launching gemm_v8", err, errlen);
}
