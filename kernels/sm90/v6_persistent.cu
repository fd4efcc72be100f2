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
// The kernel body is persistent_gemm.cuh, shared with v7 and v8; this file is its scheduler.
// - The TMA stores of C drain asynchronously under the next tile's mainloop; a panel buffer is
//   reused only once the store that read it is done reading (cp.async.bulk.wait_group.read).
// - No CTA launch, barrier set-up or pipeline fill per tile: those are paid once per SM.
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include "persistent_gemm.cuh"

namespace {

// Static schedule: cluster c of G visits cluster tiles c, c + G, c + 2G, ... in row order. A cluster
// tile u = m_pair * grid_n + n_block; rank r of the cluster takes m block 2 * m_pair + r.
struct RowScheduler {
  struct Params {};
  static constexpr int kSmemBytes = 0;
  int units, grid_n, clusters, next;

  static int params(const GtArgs*, Params*, char*, int) { return 0; }
  static int max_tiles_per_cluster(int units, int clusters, const GtArgs*) {
    return gemmtrace::host::ceil_div(units, clusters);
  }
  __device__ RowScheduler(const Params&, int units_, int grid_n_, int cluster, int clusters_, uint32_t)
      : units(units_), grid_n(grid_n_), clusters(clusters_), next(cluster) {}
  __device__ void init_barriers() {}
  template <typename GroupSync>
  __device__ bool next_tile(bool, bool, uint32_t rank, GroupSync, int& m_block, int& n_block) {
    if (next >= units) return false;
    m_block = (next / grid_n) * persistent::kCluster + int(rank);
    n_block = next % grid_n;
    next += clusters;
    return true;
  }
  __device__ bool claims() const { return false; }
  __device__ int index() const { return next - clusters; }
  __device__ void on_exit() {}
};

}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  return persistent::plan<RowScheduler>(args, p, err, errlen);
}

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  return persistent::launch<RowScheduler>(args, "launching gemm_v6", err, errlen);
}
