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
using Tile = persistent::Tile128x256;
using TileScheduler = persistent::StaticScheduler<Tile, true>;  // the host's tile order (row, snake, Hilbert)
}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  return persistent::plan<Tile, TileScheduler>(args, p, err, errlen);
}

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  return persistent::launch<Tile, TileScheduler>(args, "launching gemm_v7", err, errlen);
}
