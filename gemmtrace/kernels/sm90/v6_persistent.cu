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
// The kernel body and its static scheduler are in persistent_gemm.cuh, shared with v7 and v8.
// - The TMA stores of C drain asynchronously under the next tile's mainloop; a panel buffer is
//   reused only once the store that read it is done reading (cp.async.bulk.wait_group.read).
// - No CTA launch, barrier set-up or pipeline fill per tile: those are paid once per SM.
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include "persistent_gemm.cuh"

namespace {
using Tile = persistent::Tile128x256;
using TileScheduler = persistent::StaticScheduler<Tile, false>;  // row order
}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  return persistent::plan<Tile, TileScheduler>(args, p, err, errlen);
}

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  return persistent::launch<Tile, TileScheduler>(args, "launching gemm_v6", err, errlen);
}
