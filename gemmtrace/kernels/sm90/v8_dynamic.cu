// v8 (sm_90a): v7 plus dynamic scheduling: clusters claim cluster tiles from a global atomic
// counter, the Hopper stand-in for Blackwell's Cluster Launch Control.
//
// What changes from v7: with --sched dynamic, the producer thread of each cluster's rank-0 CTA
// claims the next entry of the tile order with one atomicAdd when it starts a tile, and publishes
// it to both CTAs through a two-slot ring in shared memory (a st.shared::cluster into the peer and
// a release.cluster arrive on each CTA's "claimed" barrier). Every role of both CTAs (the other
// producer and the four consumer warpgroups) reads the tile from the ring, and frees the slot with
// an arrive on rank 0's "read" barrier (which rank 0's producer drains before it leaves: the CTAs
// leave without a cluster barrier). The producer runs a few k-blocks ahead of the consumers,
// so a claim is made, and published, before the consumers finish the previous tile: claiming costs
// no mainloop time. An SM whose tiles ran fast simply claims more: no partial last wave is left
// to the SMs that happened to get one tile too many under the static schedule.
// The counter resets itself: every cluster claims until it is refused once, so a launch makes
// exactly units + clusters claims, and the cluster that draws the last of them zeroes the counter
// (nobody claims after it). No extra launch and no atomic at exit: an exit-time count of finished
// CTAs, the first form of this, put a fence and a contended atomic on every CTA's way out.
// --sched static keeps v7's schedule, so the two differ in one thing only: the scheduler below
// (the kernel body is persistent_gemm.cuh).
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include "persistent_gemm.cuh"

namespace {

using namespace gemmtrace;

using Tile = persistent::Tile128x256;
constexpr int kClaimSlots = 2;  // claimed tiles in flight between rank 0's producer and the readers
// Who reads each claim and frees its slot: rank 0's two consumer warpgroups, and rank 1's producer
// and two consumer warpgroups (rank 0's producer made the claim).
constexpr int kClaimReaders = persistent::kConsumers + (1 + persistent::kConsumers) * (Tile::kCluster - 1);

// Static (--sched static): cluster c of G visits entries c, c + G, ... of the tile order, as in v7.
// Dynamic: position = atomicAdd(counter, 1), claimed by rank 0's producer and passed to everyone
// else through the claim ring. An entry is a cluster tile u = m_pair * grid_n + n_block; rank r of
// the cluster takes m block 2 * m_pair + r.
struct TileScheduler {
  struct Params {
    const int32_t* order;  // the tile order (row order when null)
    int32_t* counter;      // dynamic: claims made, zero before the first launch (and after each)
    int dynamic;
  };
  // The claim ring: claimed[2] barriers, read[2] barriers, slot[2] claimed positions.
  static constexpr int kSmemBytes = kClaimSlots * (8 + 8 + 4);

  Params p;
  int units, grid_n, clusters, next;
  uint32_t ring;
  int taken = 0;    // claims this participant has taken from the ring
  int index_ = -1;  // position in the tile order of the current tile

  static int params(const GtArgs* args, Params* out, char* err, int errlen) {
    if (args->sched == 1 && args->tile_counter == nullptr)
      return host::fail(err, errlen, "dynamic scheduling needs a tile counter (a zeroed int32 in device memory)");
    *out = Params{args->tile_order, args->tile_counter, int(args->sched == 1)};
    return 0;
  }
  // Under dynamic scheduling a cluster may take more than its share: size for twice the share.
  static int max_tiles_per_cluster(int units, int clusters, const GtArgs* args) {
    return host::ceil_div(units, clusters) * (args->sched == 1 ? 2 : 1);
  }

  __device__ TileScheduler(const Params& p_, int units_, int grid_n_, int cluster, int clusters_, uint32_t smem)
      : p(p_), units(units_), grid_n(grid_n_), clusters(clusters_), next(cluster), ring(smem) {}

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
    int i = atomicAdd(p.counter, 1);
    if (i == units + clusters - 1) *reinterpret_cast<volatile int32_t*>(p.counter) = 0;  // the last claim: reset
    if (i >= units) i = -1;
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

  template <typename GroupSync>
  __device__ bool next_tile(bool producer, bool frees, uint32_t rank, GroupSync group_sync, int& m_block,
                            int& n_block) {
    if (!p.dynamic) {
      index_ = next < units ? next : -1;
      next += clusters;
    } else if (producer && rank == 0) {
      index_ = claim_and_publish(rank ^ 1);
    } else {
      index_ = read_claim(frees, rank, group_sync);
    }
    if (index_ < 0) return false;
    const int u = entry(index_);
    m_block = (u / grid_n) * Tile::kCluster + int(rank);
    n_block = u % grid_n;
    return true;
  }

  __device__ bool claims() const { return p.dynamic != 0; }
  __device__ int index() const { return index_; }

  // Rank 0's producer, leaving: the readers free each claim's slot with an arrive on rank 0's read
  // barrier, rank 1's remotely, and nobody waits for the frees of the last claim before the final
  // one. Wait for them as a next claim would, so that this CTA's shared memory outlives them. (The
  // final claim is never freed; the last claim also reset the counter: claim_and_publish.)
  // Unbounded: a reader that never frees is stuck in a bounded wait that reports.
  __device__ void on_exit(uint32_t rank) {
    if (!p.dynamic || rank != 0) return;
    mbarrier_wait_unbounded(read_bar(taken % kClaimSlots), ((taken / kClaimSlots) & 1) ^ 1);
  }
};

}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  return persistent::plan<Tile, TileScheduler>(args, p, err, errlen);
}

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  return persistent::launch<Tile, TileScheduler>(args, "launching gemm_v8", err, errlen);
}
