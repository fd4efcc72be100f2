// v8 (sm_90a): v7 plus dynamic scheduling: clusters claim cluster tiles from a global atomic
// counter, the Hopper stand-in for Blackwell's Cluster Launch Control.
//
// What changes from v7: with --sched dynamic, each cluster starts on its own entry of the tile
// order (entry c for cluster c: the first wave needs no claim), and from then on the producer thread
// of its rank-0 CTA claims the next entry with one atomicAdd, and publishes it to both CTAs through a
// three-slot ring in shared memory (a st.shared::cluster into the peer and a release.cluster arrive on
// each CTA's "claimed" barrier). Every role of both CTAs (the other producer and the four consumer
// warpgroups) reads the tile from the ring, and frees the slot with an arrive on rank 0's "read"
// barrier (which rank 0's producer drains before it leaves: the CTAs leave without a cluster
// barrier). An SM whose tiles ran fast simply claims more: no partial last wave is left to the SMs
// that happened to get one tile too many under the static schedule.
// The claim is made early: once the producer has issued the loads of the tile's kClaimLead-th
// k-block from the end (persistent_gemm.cuh's claim_early hook), not after its last. Claimed after
// the last loads, the claim's round trip to L2 (and its publication to the peer's producer, whose
// multicast half of B the next tile's first stages wait for) delayed the next tile's first loads
// while the stages the consumers freed meanwhile stayed empty, and the consumers waited at the tile
// switch: dynamic ran 0.8-1.4 % behind static at 4096^3 and 3.4 % at 6144x6144x1096 on the H100
// (bench/NOTES.md).
// The counter resets itself: every cluster claims until it is refused once, so a launch makes
// exactly `units` claims (units - clusters tiles, then one refusal a cluster), and the cluster that
// draws the last of them zeroes the counter (nobody claims after it). No extra launch and no atomic
// at exit: an exit-time count of finished CTAs, the first form of this, put a fence and a contended
// atomic on every CTA's way out.
// --sched static runs v7's kernel (the same scheduler and instantiation), so the two differ in one
// thing only: the scheduler below (the kernel body is persistent_gemm.cuh). Both were once one
// kernel, switched at run time; the static path's speed then moved with every change to the dynamic
// one's code (0.3-0.7 points of cuBLAS lost at 4096^3 and 6144x6144x1096 when the first tiles went
// unclaimed, its own logic unchanged; bench/NOTES.md).
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include "persistent_gemm.cuh"

namespace {

using namespace gemmtrace;

using Tile = persistent::Tile128x256;
using StaticScheduler = persistent::StaticScheduler<Tile, true>;  // v7's: the host's tile order
// Claimed tiles in flight between rank 0's producer and the readers. Three: an early claim for the
// tile after next may be made before every reader has taken the claim two back (a tile shorter than
// the producer's lead over the consumers), and its slot must be free then.
constexpr int kClaimSlots = 3;
// Who reads each claim and frees its slot: rank 0's two consumer warpgroups, and rank 1's producer
// and two consumer warpgroups (rank 0's producer made the claim).
constexpr int kClaimReaders = persistent::kConsumers + (1 + persistent::kConsumers) * (Tile::kCluster - 1);

// Dynamic (--sched dynamic): cluster c takes entry c of the tile order first, then position
// clusters + atomicAdd(counter, 1), claimed by rank 0's producer and passed to everyone else through
// the claim ring. An entry is a cluster tile u = m_pair * grid_n + n_block; rank r of the cluster
// takes m block 2 * m_pair + r.
struct DynamicScheduler {
  struct Params {
    const int32_t* order;  // the tile order (row order when null)
    int32_t* counter;      // claims made, zero before the first launch (and after each)
  };
  // The claim ring: claimed[kClaimSlots] barriers, read[kClaimSlots] barriers, slot[kClaimSlots]
  // claimed positions.
  static constexpr int kSmemBytes = kClaimSlots * (8 + 8 + 4);
  // The producer claims the next tile once it has issued the loads of this tile's kClaimLead-th
  // k-block from the end: some 2 us ahead of the tile's end at 128x256, about twice the claim's
  // round trip. Measured on the H100: leads of 2, 4 and 8 k-blocks ran within 0.5 % of each other
  // (bench/NOTES.md).
  static constexpr int kClaimLead = 4;
  static constexpr int kNoClaim = -2;  // (-1 is the refusal)

  Params p;
  int units, grid_n, clusters;
  int first;  // this cluster's first entry, -1 once taken
  uint32_t ring;
  int taken = 0;    // claims this participant has taken from the ring
  int index_ = -1;  // position in the tile order of the current tile
  int early = kNoClaim;  // rank 0's producer: the claim it made early for its next tile, if any

  static int params(const GtArgs* args, Params* out, char* err, int errlen) {
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
  __device__ uint32_t slot(int j) const { return ring + kClaimSlots * 16 + j * 4; }
  __device__ int entry(int i) const { return p.order != nullptr ? __ldg(p.order + i) : i; }

  __device__ void init_barriers() {
    for (int j = 0; j < kClaimSlots; ++j) {
      mbarrier_init(claimed_bar(j), 1);
      mbarrier_init(read_bar(j), kClaimReaders);
    }
  }

  // Rank 0's producer: claim the next position in the tile order (-1: none left) and publish it.
  __device__ int claim_and_publish(uint32_t peer) {
    const int j = taken % kClaimSlots;
    // Wait until every reader has read what this slot held kClaimSlots claims ago.
    mbarrier_wait(read_bar(j), ((taken / kClaimSlots) & 1) ^ 1,
                  WaitSite{uint32_t(Role::SCHEDULER), persistent::kReadBarrier, kNoTile, uint32_t(taken)});
    const int c = atomicAdd(p.counter, 1);
    if (c == units - 1) *reinterpret_cast<volatile int32_t*>(p.counter) = 0;  // the last claim: reset
    const int i = c + clusters < units ? c + clusters : -1;  // entries below `clusters` went out unclaimed
    *reinterpret_cast<volatile int32_t*>(__cvta_shared_to_generic(slot(j))) = i;
    st_shared_cluster(slot(j), peer, i);
    mbarrier_arrive(claimed_bar(j));
    mbarrier_arrive_release_cluster(claimed_bar(j), peer);
    ++taken;
    return i;
  }

  // Everyone else: take the next claim from the ring. `frees`: this thread arrives for its group,
  // after `group_sync` (which makes sure the whole group has read the slot).
  template <typename GroupSync>
  __device__ int read_claim(bool frees, uint32_t rank, GroupSync group_sync) {
    const int j = taken % kClaimSlots;
    mbarrier_wait<true>(claimed_bar(j), (taken / kClaimSlots) & 1,
                        WaitSite{uint32_t(Role::SCHEDULER), persistent::kClaimedBarrier, kNoTile, uint32_t(taken)});
    const int i = *reinterpret_cast<volatile int32_t*>(__cvta_shared_to_generic(slot(j)));
    ++taken;
    group_sync();
    // The final claim (-1) is not freed: nobody reuses its slot, and rank 0 may already be gone.
    if (frees && i >= 0) {
      if (rank == 0) mbarrier_arrive(read_bar(j));
      else mbarrier_arrive_cluster(read_bar(j), 0);
    }
    return i;
  }

  // Rank 0's producer, under the current tile's last loads: claim (and publish) its next tile now.
  __device__ void claim_early(uint32_t rank) {
    if (rank == 0) early = claim_and_publish(rank ^ 1);
  }

  template <typename GroupSync>
  __device__ bool next_tile(bool producer, bool frees, uint32_t rank, GroupSync group_sync, int& m_block,
                            int& n_block) {
    if (first >= 0) {  // the cluster's own entry (clusters <= units: the grid is never larger)
      index_ = first;
      first = -1;
    } else if (producer && rank == 0) {
      index_ = early != kNoClaim ? early : claim_and_publish(rank ^ 1);
      early = kNoClaim;
    } else {
      index_ = read_claim(frees, rank, group_sync);
    }
    if (index_ < 0) return false;
    const int u = entry(index_);
    m_block = (u / grid_n) * Tile::kCluster + int(rank);
    n_block = u % grid_n;
    return true;
  }

  __device__ bool claims() const { return true; }
  __device__ int index() const { return index_; }

  // Rank 0's producer, leaving: the readers free each claim's slot with an arrive on rank 0's read
  // barrier, rank 1's remotely, and nobody waits for the frees of the last kClaimSlots - 1 claims
  // before the final one. Wait for them as the claims kClaimSlots later would, so that this CTA's
  // shared memory outlives them. (The final claim is never freed; the last claim also reset the
  // counter: claim_and_publish.) Unbounded: a reader that never frees is stuck in a bounded wait that
  // reports.
  __device__ void on_exit(uint32_t rank) {
    if (rank != 0) return;
    for (int c = taken - kClaimSlots; c < taken - 1; ++c)
      if (c >= 0) mbarrier_wait_unbounded(read_bar(c % kClaimSlots), (((c + kClaimSlots) / kClaimSlots) & 1) ^ 1);
  }
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
