// v9 (sm_90a): stream-K: the persistent grid splits the k-loops of the last tiles across clusters,
// so that every cluster gets the same number of k-blocks, and split tiles are summed through a
// workspace in a fixed order (bitwise-identical results run to run).
//
// What changes from v7: only the tile scheduler (stream_k.cuh, which says how the work is
// partitioned, why it cannot deadlock and why it is deterministic); the kernel body is
// persistent_gemm.cuh, on v7's 128x256 tiles in clusters of two.
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include "stream_k.cuh"

namespace {
using Tile = persistent::Tile128x256;
}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  return persistent::plan<Tile, stream_k::Scheduler<Tile>>(args, p, err, errlen);
}

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  return stream_k::launch<Tile>(args, "launching gemm_v9", err, errlen);
}

// For tests (tests/test_stream_k.py): the units of cluster `worker` as (entry, kb_begin, kb_end)
// triples in `out` (room for `max_units`); returns how many there are, or -1 for a bad shape.
extern "C" int gt_stream_k_units(const GtArgs* args, int worker, int32_t* out, int max_units) {
  return stream_k::units_of<Tile>(args, worker, out, max_units);
}
