// v7 (sm_90a): v6 plus a selectable tile order for L2 reuse: row, snake (column-major walks of
// 8-row bands, alternating direction) or a generalized Hilbert curve.
//
// What changes from v6: the static schedule walks cluster tiles in the order of a table the host
// builds (gemmtrace/tile_order.py) instead of row order: only the scheduler below (the kernel body
// is persistent_gemm.cuh). Cluster c still takes the c-th, (c+G)-th,
// ... entry, but consecutive entries are neighbours in the grid, so the G clusters in flight at
// any moment work on a compact block of C: each A row panel and B column panel they load is
// shared by several of them while it is still in the 50 MB L2, instead of being read again from
// HBM by tiles a whole row apart.
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include "persistent_gemm.cuh"

namespace {

// Static schedule over a tile order: cluster c of G visits entries c, c + G, ... of the table (row
// order when the host passes none). An entry is a cluster tile u = m_pair * grid_n + n_block.
struct OrderedScheduler {
  struct Params {
    const int32_t* order;
  };
  static constexpr int kSmemBytes = 0;
  const int32_t* order;
  int units, grid_n, clusters, next;

  static int params(const GtArgs* args, Params* p, char*, int) {
    p->order = args->tile_order;
    return 0;
  }
  static int max_tiles_per_cluster(int units, int clusters, const GtArgs*) {
    return gemmtrace::host::ceil_div(units, clusters);
  }
  __device__ OrderedScheduler(const Params& p, int units_, int grid_n_, int cluster, int clusters_, uint32_t)
      : order(p.order), units(units_), grid_n(grid_n_), clusters(clusters_), next(cluster) {}
  __device__ void init_barriers() {}
  template <typename GroupSync>
  __device__ bool next_tile(bool, bool, uint32_t rank, GroupSync, int& m_block, int& n_block) {
    if (next >= units) return false;
    const int u = order != nullptr ? __ldg(order + next) : next;
    m_block = (u / grid_n) * persistent::kCluster + int(rank);
    n_block = u % grid_n;
    next += clusters;
    return true;
  }
  __device__ bool claims() const { return false; }
  __device__ int index() const { return next - clusters; }
  __device__ void on_exit() {}
};

}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  return persistent::plan<OrderedScheduler>(args, p, err, errlen);
}

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  return persistent::launch<OrderedScheduler>(args, "launching gemm_v7", err, errlen);
}
