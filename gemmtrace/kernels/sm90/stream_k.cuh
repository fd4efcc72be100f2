// The stream-K tile scheduler of v9 and v10 (Scheduler<Tile>): the persistent grid splits the
// k-loops of the last tiles across clusters, so that every cluster gets the same number of
// k-blocks, and split tiles are summed through a workspace in a fixed order (bitwise-identical
// results run to run). It switches on the stream-K hooks of persistent_gemm.cuh. Work is handed
// out as units (cluster tile, first k-block, end k-block); the CTAs of a cluster run the same
// units, so they still share B by multicast.
//
// The partition (W clusters, U cluster tiles in the tile order, K_b k-blocks a tile):
// - U a multiple of W: every tile whole, cluster c takes entries c, c + W, ... (v7's schedule).
// - otherwise the last T = (U mod W) + W tiles (all U when U < W) are split: their T * K_b
//   k-blocks, as one sequence in tile order, are cut into W' equal ranges (sizes differ by at most
//   one), range c going to cluster c; the earlier U - T tiles (whole waves) go whole to clusters
//   c, c + W, ... first. W' = W, except when U < W: then at most sqrt(K_b / 2) segments a tile
//   (W' = min(W, U * that)), because the CTA finishing a tile adds the others' partials one after
//   another (about 2 k-blocks' time each), so more segments stop paying once K_b / S^2 < 2.
// - the split is kept only where it beats whole tiles by the same count: fewer k-blocks on the
//   busiest cluster plus 2 per partial its tiles move, else every tile is whole. v10 asks for a
//   gain of at least kMinGainPct percent.
// - v10 only (kTailSplit): under the snake order, 128x256/c2 and 192x192/c2 grids of three or more
//   whole waves may split only the last U mod W tiles instead (make_tail_partition below).
// - v10 only (kParallelFixup): when U < W it also weighs cutting every tile into S segments of its
//   own, one cluster each (U * S clusters run; S = floor(W / U), or fewer where that many would
//   only wait on HBM: hbm_segments below), each segment then summing a slice
//   of its tile (the parallel fix-up, fixup_parallel below), and takes whichever partition leaves
//   the busiest cluster fewer k-blocks. Each tile is cut on its own so that no cluster straddles two
//   tiles: one that did published two partials and summed two slices, one after the other, while
//   the next tile's segments waited for it (up to 5 us at 256x512x8192, bench/NOTES.md).
//   (Where the segments keep their own slices, the serial split's k-blocks count more in that
//   comparison, as they run out of step: spread_kblock_cost below.)
// A unit is the part of one tile in one cluster's range. The unit holding a tile's k-block 0 is the
// last unit of its cluster's range; it finishes the tile. Every other unit of a split tile is the
// first unit of its cluster's range (a range starts inside a tile only there): it stores its fp32
// partial to the cluster's own slot of the workspace and sets the slot's flag.
//
// Deadlock freedom: a CTA waits only in the last unit of its range, and only for clusters with a
// higher index, whose awaited partial is the first unit of their range, preceded by nothing but
// whole tiles: no waits, so the wait graph has no cycle and every partial is written once its
// cluster runs. All clusters of the grid are resident at once (one per pair of SMs; gt_launch
// checks cudaOccupancyMaxActiveClusters and refuses a grid the device cannot hold), so every wait
// ends.
//
// Determinism: the partition depends only on the shape and the grid, and the CTA finishing a tile
// adds the partials to its own accumulators in cluster order (= k order), one fp32 add per
// element per partial: the same additions in the same order every run.
//
// Workspace (GtArgs.workspace, GtPlan.workspace_bytes, zeroed once): a flag per (cluster, rank,
// consumer warpgroup) (under the parallel fix-up instead two counts per tile, rank and consumer
// warpgroup), then a WM x WN fp32 slot for each cluster, rank and consumer warpgroup (its part of
// the tile; under the parallel fix-up a segment that keeps its own slice leaves that part of its slot
// unwritten). The finishing warpgroup resets each flag it consumed (under the parallel fix-up, the
// last one done reading a tile resets its counts), so the workspace is all zero flags again when
// the kernel ends. Where every tile is split, partials are written evict-last
// and read evict-first in L2 (partial_store_policy below).
#pragma once
#include <cmath>

#include "gemmtrace/dsmem.cuh"
#include "gemmtrace/flags.cuh"
#include "gemmtrace/l2_hint.cuh"
#include "persistent_gemm.cuh"

namespace stream_k {

using namespace gemmtrace;

// The cost of moving one fp32 partial through L2 (a store by one warpgroup, a load by another), in
// k-blocks of mainloop time: for a 128x256 tile 64 KB a warpgroup at roughly 100 GB/s per SM
// against ~0.6 us a k-block; both scale with the tile's area, so the ratio holds for every tile of
// the family. Sets the split limit and the split-or-not test (see the header comment).
constexpr int kFixupKBlocks = 2;
// The parallel fix-up (below), in the same units: its partial stored, the wait for the tile's other
// segments, one partial's worth read back in slices. Measured with v10's trace at 256x256x16384
// (128x128 tiles, 33 segments a tile): about 5 us, 12 k-blocks of 0.41 us (4.8 us again in a trace
// whose operands started in DRAM). So it pays only where
// a tile has many segments; with a few, v9's serial fix-up is cheaper (measured slower by 14-25 % at
// 512x1024x8192, 64x8192x4096 and 8192x128x8192, 3 to 5 segments a tile).
constexpr int kParallelFixupKBlocks = 12;
// Weighed against the parallel fix-up where its segments keep their own slices (keeps_own_slice)
// and a tile has at least kSpreadMinKBlocks k-blocks, a split k-block of the serial partition
// counts kSerialSplitKBlockCost whole ones: its clusters run their ranges at their own k offsets,
// out of step with the others reading the same operands (v10's kSplitKBlockCost, fitted over the
// tile matrix). Measured on the H100 (bench/NOTES.md): weighed so at every K, v10's picks changed on
// 384 of 1734 shapes and lost on 14 of 50 sampled, 11 of them with K <= 8192; from K = 16384 they
// change on 155, and 34 held out ran a median 17.6 % faster (12 slower, by up to 22 %).
constexpr double kSerialSplitKBlockCost = 2.0;
constexpr int kSpreadMinKBlocks = 256;
// With 128 to 255 k-blocks a tile, such a k-block counts kShortSpreadKBlockCost whole ones: what out
// of step costs a k-loop whose operands stay in L2, measured twice on the H100 (bench/NOTES.md):
// loads alone started at spread k offsets take 1.22 times as long (bench/tma_intake.cu, 64x64/c2),
// and 128x128/c2's k-loops at 512x1024x8192 ran 1.19 times as long split serially as cut for the
// parallel fix-up. Weighed so, v10's picks change on 59 of 1734 shapes (all with K = 8192: a
// median 7.0 % faster, 12 slower by up to 17 %, 8192x128x8192 by 6 %) and on 197 of 648 with
// K = 10240 or 12288, of which every 4th (50, held out) ran a median 12.4 % faster, 6 slower by up
// to 15 %. Most losses have M = 320 or 384: a cluster of two 128-row tiles with its second CTA empty.
constexpr double kShortSpreadKBlockCost = 1.2;
constexpr int kShortSpreadMinKBlocks = 128;
__host__ __device__ constexpr double spread_kblock_cost(int num_kb) {
  return num_kb >= kSpreadMinKBlocks ? kSerialSplitKBlockCost : num_kb >= kShortSpreadMinKBlocks ? kShortSpreadKBlockCost : 1.0;
}

// A unit of work; also the cursor through a cluster's list of units (the next one follows from it).
struct Unit {
  int entry;     // position in the tile order (-1: before the first unit)
  int kb_begin;  // first k-block
  int kb_end;    // one past the last k-block
};

// The partition, computed on the host (plan), passed to the kernel in the scheduler's Params, and
// walked the same way by both (`next`). Python mirror: gemmtrace/stream_k.py.
struct Partition {
  int units;     // cluster tiles
  int num_kb;    // k-blocks a tile
  int workers;   // clusters launched
  int dp_tiles;  // entries [0, dp_tiles) are whole tiles; the rest are split
  int sk_base, sk_extra;  // split k-blocks per cluster: sk_base, plus one for clusters < sk_extra
                          // (parallel: per segment of a tile, plus one for its first sk_extra)
  int parallel;  // 0, or the segments of every tile under the parallel fix-up (fewer tiles than
                 // clusters: every tile split, cut on its own, its segments reduce it together)

  // The first split k-block of cluster w's range. (kMayCutPerTile: false in the kernels of the
  // schedulers that never take the parallel fix-up, which then carry no code for it.)
  template <bool kMayCutPerTile = true>
  __host__ __device__ int sk_begin(int w) const {
    if (kMayCutPerTile && parallel) {
      const int t = w / parallel, q = w - t * parallel;
      return t * num_kb + q * sk_base + (q < sk_extra ? q : sk_extra);
    }
    return w * sk_base + (w < sk_extra ? w : sk_extra);
  }
  // The cluster whose range holds split k-block g (of the serial partition: the serial fix-up's
  // waits ask; the parallel fix-up knows a tile's segments from the tile alone).
  __host__ __device__ int owner(int g) const {
    const int big = sk_extra * (sk_base + 1);
    return g < big ? g / (sk_base + 1) : sk_extra + (g - big) / sk_base;
  }
  // Cluster w's unit after `u` (start from Unit{-1, 0, 0}): whole tiles w, w + workers, ... below
  // dp_tiles, then its range of split k-blocks, one unit per tile it touches. Only the current unit
  // is kept (three registers): the position in the split sequence follows from it.
  template <bool kMayCutPerTile = true>
  __host__ __device__ bool next(int w, Unit& u) const {
    int g;  // the next split k-block
    if (u.entry < dp_tiles) {
      const int dp = u.entry < 0 ? w : u.entry + workers;
      if (dp < dp_tiles) {
        u = Unit{dp, 0, num_kb};
        return true;
      }
      g = sk_begin<kMayCutPerTile>(w);
    } else {
      g = (u.entry - dp_tiles) * num_kb + u.kb_end;
    }
    const int g_end = sk_begin<kMayCutPerTile>(w + 1);
    if (g >= g_end) return false;
    const int t = g / num_kb;
    u.entry = dp_tiles + t;
    u.kb_begin = g - t * num_kb;
    u.kb_end = u.kb_begin + (g_end - g) < num_kb ? u.kb_begin + (g_end - g) : num_kb;
    return true;
  }
  // A split tile's finishing unit waits for the clusters (w, last]: the owners of its other segments
  // (serial partition).
  __host__ __device__ int last_partner(int entry) const { return owner((entry - dp_tiles + 1) * num_kb - 1); }
  bool split() const { return dp_tiles < units; }
  // The k-blocks of the busiest cluster's whole tiles.
  int64_t whole_kblocks() const { return (int64_t(dp_tiles) + workers - 1) / workers * num_kb; }
  // The k-blocks the busiest cluster runs, counting each partial its split tiles move as
  // kFixupKBlocks: the whole tiles of cluster 0 (which has the most), then its split range.
  int64_t busiest_kblocks() const {
    const int64_t whole = whole_kblocks();
    if (!split()) return whole;
    if (parallel) return sk_base + (sk_extra > 0) + kParallelFixupKBlocks;
    const int64_t split_tiles = units - dp_tiles;
    return whole + sk_base + (sk_extra > 0) + kFixupKBlocks * ((workers + split_tiles - 1) / split_tiles);
  }
};

inline int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// min_gain_pct: keep a split only where it promises at least that many percent fewer k-blocks on
// the busiest cluster than whole tiles (v9: 0, any gain; v10: see v10_tile_family.cu).
// parallel_fixup (make_partition below): with fewer tiles than clusters, also consider cutting every
// tile's k-loop over all the clusters and letting every segment's cluster reduce a slice of the
// tile (v10), instead of capping the segments at sqrt(K_b / 2) for one CTA to add them all (v9),
// and keep whichever leaves the busiest cluster fewer k-blocks.
inline Partition make_serial_partition(int units, int num_kb, int max_workers, int min_gain_pct) {
  const int w_all = std::max(1, max_workers);
  const Partition whole{units, num_kb, std::min(units, w_all), units, 0, 0, 0};
  const int rest = units % w_all;
  if (rest == 0) return whole;
  const int split_tiles = units > w_all ? rest + w_all : units;
  const int max_segments = std::max(1, int(std::sqrt(double(num_kb / kFixupKBlocks))));
  const int workers = int(std::min<int64_t>(w_all, int64_t(split_tiles) * max_segments));
  const int64_t iters = int64_t(split_tiles) * num_kb;
  if (iters > (int64_t(1) << 30)) return whole;  // k-block indices stay well inside int
  const int64_t busiest = ceil_div64(iters, workers) + kFixupKBlocks * ceil_div64(workers, split_tiles);
  const int64_t dp_kblocks = int64_t(units - split_tiles) / w_all * num_kb;  // full waves before the split
  const int64_t whole_kblocks = ceil_div64(units, w_all) * num_kb;
  if ((dp_kblocks + busiest) * 100 >= whole_kblocks * (100 - min_gain_pct)) return whole;
  return Partition{units, num_kb, workers, units - split_tiles, int(iters / workers), int(iters % workers), 0};
}

// The tail split (v10, grids of more tiles than clusters): only the last partial wave's tiles, U mod
// W of them, are split, their k-blocks cut into W equal ranges; the whole waves before them run as
// whole tiles. v9's partition also splits the wave before (U mod W + W tiles), whose k-loops then
// run at every cluster's own k offset, out of step with the tiles sharing their operands; with only
// the last wave split, that holds for the tail alone. Measured on the H100 with 128x256/c2 at 15
// shapes (bench/NOTES.md): a split k-block ran 4-19 % slower than a whole one where the tail's A
// and B panels fit in L2, 5-20 % where they exceeded it by up to a quarter, 20-100 % beyond; the
// partial's store cost about 4 k-blocks and each partial read back about 6 (2.5 and 4 us at 0.66 us
// a k-block). The estimate: whole waves, then the busiest range slowed by tail_slowdown (below; 0:
// no split), then one partial stored and the others of a tile read back; kept where it gains
// kTailMinGainPct.
// Measured on grids of 3 to 34 whole waves before the tail: fewer are left to v9's partition.
constexpr int kTailStoreKBlocks = 4, kTailReadKBlocks = 6, kTailMinGainPct = 1, kTailMinWaves = 3;
inline int64_t tail_split_kblocks(const Partition& p, double slowdown) {
  const int rest = p.units - p.dp_tiles;
  return int64_t(p.dp_tiles / p.workers) * p.num_kb +
         int64_t(std::ceil(slowdown * (p.sk_base + (p.sk_extra > 0)))) + kTailStoreKBlocks +
         kTailReadKBlocks * (ceil_div64(p.workers, rest) - 1);
}
inline Partition make_tail_partition(int units, int num_kb, int workers, double slowdown, const Partition& otherwise) {
  const int rest = units % workers;
  const int64_t iters = int64_t(rest) * num_kb;
  if (slowdown <= 0 || units < kTailMinWaves * workers || rest == 0 || iters > (int64_t(1) << 30)) return otherwise;
  const Partition tail{units, num_kb, workers, units - rest, int(iters / workers), int(iters % workers), 0};
  const int64_t whole_kblocks = ceil_div64(units, workers) * num_kb;
  return tail_split_kblocks(tail, slowdown) * 100 < whole_kblocks * (100 - kTailMinGainPct) ? tail : otherwise;
}
// Whether a partition is a tail split (whole waves, then fewer split tiles than clusters).
inline bool is_tail_split(const Partition& p) {
  return !p.parallel && p.dp_tiles > 0 && p.split() && p.units - p.dp_tiles < p.workers;
}

// Whether the parallel fix-up's S segments sum their slices from their own registers (Scheduler::
// fixup_parallel): where that takes fewer round trips (S - 1) than the slices cut in float2s (2 F / S
// float2s a thread, one round trip each while S <= 13; F float4s a thread in a consumer's partial).
__host__ __device__ constexpr bool keeps_own_slice(int segments, int slot_float4s) {
  return segments * (segments - 1) <= 2 * slot_float4s;
}

// hbm_segments: the parallel fix-up's most segments a tile (hbm_segments<T> below; 0: no limit).
// tail_slowdown: > 0 to weigh the tail split (above) with that slowdown of its split k-blocks.
inline Partition make_partition(int units, int num_kb, int max_workers, int min_gain_pct, bool parallel_fixup,
                                int hbm_segments = 0, double tail_slowdown = 0, int slot_float4s = 0) {
  const int w_all = std::max(1, max_workers);
  const Partition serial =
      make_tail_partition(units, num_kb, w_all, tail_slowdown, make_serial_partition(units, num_kb, max_workers, min_gain_pct));
  if (!parallel_fixup || units >= w_all || int64_t(units) * num_kb > (int64_t(1) << 30)) return serial;
  int segments = std::min(w_all / units, num_kb);  // a tile's, each on its own cluster
  if (hbm_segments > 0) segments = std::min(segments, hbm_segments);
  const Partition parallel{units, num_kb, units * segments, 0, num_kb / segments, num_kb % segments, segments};
  const int64_t busiest = parallel.busiest_kblocks(), serial_whole = serial.whole_kblocks();
  const double split_cost = keeps_own_slice(segments, slot_float4s) ? spread_kblock_cost(num_kb) : 1.0;
  const double serial_cost = double(serial_whole) + split_cost * double(serial.busiest_kblocks() - serial_whole);
  if (double(busiest) < serial_cost && busiest * 100 < int64_t(num_kb) * (100 - min_gain_pct)) return parallel;
  return serial;
}

// The workspace keeps a slot (and a flag) per group, CTA of the cluster and computing consumer
// warpgroup, in that order: kClusterParts<T> of them a group. A group is a cluster (or, for the
// parallel fix-up's counts, a tile).
template <class T>
constexpr int kClusterParts = T::kClusterCTAs * T::kParts;
template <class T>
__host__ __device__ constexpr int part_slot(int group, uint32_t cta, int cw) {
  return (group * T::kClusterCTAs + int(cta)) * T::kParts + cw;
}

// The flags, in whole KiB: one per cluster, rank and consumer warpgroup; under the parallel fix-up
// instead two counts per tile, rank and consumer warpgroup (segments published, segments done
// reading).
template <class T>
int64_t flag_bytes(const Partition& part) {
  const int64_t ints = (part.parallel ? 2 * int64_t(part.units) : int64_t(part.workers)) * kClusterParts<T>;
  return host::ceil_div(ints * 4, 1024) * int64_t(1024);
}

template <class T>
int64_t workspace_bytes(const Partition& part) {
  if (!part.split()) return 0;
  return flag_bytes<T>(part) + int64_t(part.workers) * kClusterParts<T> * T::kPieceFloat4s * 128 * 16;
}

// The partial bytes the parallel fix-up moves through L2: the workspace, less each segment's own
// slice where it keeps it.
template <class T>
double moved_partial_bytes(const Partition& part) {
  const int s = part.parallel;
  return double(workspace_bytes<T>(part)) * (keeps_own_slice(s, T::kPieceFloat4s) ? double(s - 1) / s : 1.0);
}

// The parallel fix-up cuts a tile into no more segments than it takes for their SMs to draw the
// operands in as fast as HBM delivers them: past that the k-loops wait on HBM all the same, and
// every segment more adds a partial to write and read back, and a CTA to start. A CTA takes in
// (BM + BN) * K_seg * 2 bytes at the pace its k-loop draws them in; the operands, (M + N) * K * 2
// bytes, come at HBM's: so S = (BM + BN) / (M + N) * kHbmOverSmIntake segments, rounded up. The
// ratio: the H100's HBM delivers about 3 TB/s, and a k-loop draws 85-90 GB/s into its SM (a 64x64 or
// 128x256 tile's k-blocks with the grid capped at two CTAs; the loads alone would come faster,
// bench/tma_intake.cu, bench/NOTES.md). Measured on nine few-tile shapes with
// every segment count forced, the best was within one step of this (bench/NOTES.md).
constexpr double kHbmOverSmIntake = 35.0;
template <class T>
int hbm_segments(const GtArgs* args) {
  return int(std::ceil(double(T::BM + T::BN) / double(args->m + args->n) * kHbmOverSmIntake));
}

// The tail split's slowdown of a split k-block (see make_tail_partition): from the bytes of A and
// B panels the tail's tiles read, which only the snake order (v7) makes known here: its last band
// (up to 8 unit rows) walked column by column, so the last R tiles sit in min(R, band) rows of
// ceil(R / band) columns (more bands where R fills the last one). Other orders: no tail split.
// Measured with the 128x256/c2 and 192x192/c2 tiles only: the others keep v9's partition.
template <class T>
constexpr bool kMeasuredTail =
    ((T::BM == 128 && T::BN == 256) || (T::BM == 192 && T::BN == 192)) && T::kCluster == 2 && T::kSplitK == 1;
constexpr double kL2Bytes = 50.0 * 1024 * 1024;  // the H100's
constexpr int kSnakeBand = 8;  // gemmtrace/tile_order.py's SNAKE_BAND
template <class T>
double tail_slowdown(const GtArgs* args) {
  const int rows = persistent::grid_m_groups<T>(args), cols = persistent::grid_n<T>(args);
  const int rest = rows * cols % persistent::max_clusters<T>(args);
  if (!kMeasuredTail<T> || args->order != 1 || rest == 0) return 0;
  const int band = rows - (rows - 1) / kSnakeBand * kSnakeBand;  // the last band's rows
  int r, c;
  if (rest <= band * cols) r = std::min(band, rest), c = host::ceil_div(rest, band);
  else r = std::min(rows, band + kSnakeBand * host::ceil_div(rest - band * cols, kSnakeBand * cols)), c = cols;
  const double bytes = (double(r) * T::BM * T::kCluster + double(c) * T::BN) * double(args->k) * 2;
  return bytes <= kL2Bytes ? 1.1 : bytes <= 1.25 * kL2Bytes ? 1.2 : 0;
}

// No tile is split whose whole k-loop is shorter than this much work, in k-blocks of a 128x256 tile
// (num_kb x BM x BN / (128 x 256)): K < 1280 for 64x64 tiles, K < 640 for 64x128, K < 320 for
// 128x128. Either fix-up costs microseconds after the last MMA whatever the k-loop's length (store,
// wait for the other segments, reduce: 4.4-4.7 us for 128x128/c2 cut in four at 512x1024x8192 on the
// H100), while a whole 64x64 k-loop of 16 k-blocks takes about 2.4 us, so halving it cannot pay. On
// an H200, 84 of the 87 shapes timed whose plan this changes ran 1-30 % faster, none slower (a median
// of +14.9 %, bench/NOTES.md); where above it a split starts to pay is not measured.
constexpr double kMinSplitKLoop = 2.5;

template <class T>
Partition partition_of(const GtArgs* args, int min_gain_pct, bool parallel_fixup, bool tail_split = false) {
  const int units = persistent::grid_m_groups<T>(args) * persistent::grid_n<T>(args);
  const int num_kb = host::ceil_div(args->k, persistent::BK), max_workers = persistent::max_clusters<T>(args);
  if (double(num_kb) * T::BM * T::BN < kMinSplitKLoop * 128 * 256)  // whole tiles
    return Partition{units, num_kb, std::min(units, std::max(1, max_workers)), units, 0, 0, 0};
  return make_partition(units, num_kb, max_workers, min_gain_pct, parallel_fixup, hbm_segments<T>(args),
                        tail_split ? tail_slowdown<T>(args) : 0, T::kPieceFloat4s);
}

template <class T, int kMinGainPct = 0, bool kParallelFixup = false, bool kTailSplit = false>
struct Scheduler {
  static_assert(T::kSplitK == 1 || !kParallelFixup, "k-split tiles take the serial fix-up");
  // One consumer warpgroup's fp32 partial (of a k-split tile: the piece its CTA sums, see Tile).
  static constexpr int kSlotFloat4s = T::kPieceFloat4s;  // per thread
  static constexpr int kSlotFloats = kSlotFloat4s * 128 * 4;

  // A k-split tile's exchange in shared memory (16-byte aligned after the pipeline's barriers): per
  // consumer warpgroup, the pieces its kSplitK - 1 peers send it (thread-major, as the workspace's
  // slots), then per warpgroup a barrier the pieces complete (xfull) and one the peers arrive on
  // once they have read what this CTA sent them (xfree).
  static constexpr int kPeers = T::kSplitK - 1;
  static constexpr int kPieceBytes = kSlotFloat4s * 128 * 16;
  static constexpr int kExchangeBytes = T::kParts * kPeers * kPieceBytes;
  static constexpr bool kSplitsK = true;
  static constexpr int kSmemBytes = T::kSplitK > 1 ? kExchangeBytes + 2 * T::kParts * 8 : 0;
  struct Params {
    const int32_t* order;  // the tile order (row order when null)
    Partition part;
    int32_t* flags;   // [cluster][rank][consumer]
    float4* slots;    // [cluster][slot][rank][consumer][kSlotFloat4s][128 threads]
    __nv_bfloat16* c;  // the parallel fix-up stores C itself
    int m, n;
  };

  Params p;
  int grid_n;
  Unit unit;  // the current unit (the cluster's index is re-read from %clusterid: one register less)
  uint32_t smem;  // the exchange (k-split tiles)
  int rounds = 0;  // exchanges this consumer warpgroup has made

  static int params(const GtArgs* args, Params* out, char* err, int errlen) {
    if (host::require_order_table(args, err, errlen)) return 1;
    const Partition part = partition_of<T>(args, kMinGainPct, kParallelFixup, kTailSplit);
    const int64_t bytes = workspace_bytes<T>(part);
    if (bytes > 0 && args->workspace == nullptr)
      return host::fail(err, errlen, "this shape splits tiles and needs a workspace of %lld bytes (GtArgs.workspace, zeroed once)",
                        (long long)bytes);
    auto* base = static_cast<uint8_t*>(args->workspace);
    *out = Params{args->tile_order, part, reinterpret_cast<int32_t*>(base),
                  bytes > 0 ? reinterpret_cast<float4*>(base + flag_bytes<T>(part)) : nullptr,
                  static_cast<__nv_bfloat16*>(args->c), int(args->m), int(args->n)};
    return 0;
  }
  static int max_tiles_per_cluster(int units, int clusters, const GtArgs*) { return host::ceil_div(units, clusters); }

  // Records a recording warp may write, for the busiest cluster: producer: setup, per unit an issue
  // span and at most a stage wait per k-block; consumer: setup, per unit an MMA span, at most a data
  // wait per k-block and an epilogue or a partial store, and for a tile it finishes a wait and a
  // reduce span.
  static int records_per_region(const Partition& part) {
    int64_t most = 0;
    for (int w = 0; w < part.workers; ++w) {
      Unit u{-1, 0, 0};
      int64_t n = 1;
      while (part.next(w, u)) {
        n += (u.kb_end - u.kb_begin) + 2;
        if (T::kSplitK > 1) n += 3;  // the exchange: pieces sent, the wait for the peers', their sum
        if (part.parallel) n += 2;  // the wait for the other segments and the reduce
        else if (u.kb_begin == 0 && u.kb_end < part.num_kb) n += 2;  // the wait and the reduce
      }
      most = std::max(most, n);
    }
    return int(std::min<int64_t>(most + 2, 1 << 30));
  }

  // (units, k-blocks and clusters as persistent::plan counted them: partition_of counts the same.)
  static void plan(const GtArgs* args, int, int, int, GtPlan* p) {
    const Partition part = partition_of<T>(args, kMinGainPct, kParallelFixup, kTailSplit);
    p->grid_ctas = part.workers * T::kClusterCTAs;
    p->records_per_region = records_per_region(part);
    p->workspace_bytes = workspace_bytes<T>(part);
  }

  __device__ Scheduler(const Params& p_, int, int grid_n_, int, int, uint32_t smem_)
      : p(p_), grid_n(grid_n_), unit{-1, 0, 0}, smem(smem_) {}
  __device__ uint32_t xbuf(int cw, int slot) const { return smem + (cw * kPeers + slot) * kPieceBytes; }
  __device__ uint32_t xfull(int cw) const { return smem + kExchangeBytes + cw * 8; }
  __device__ uint32_t xfree(int cw) const { return smem + kExchangeBytes + (T::kParts + cw) * 8; }
  __device__ void init_barriers() {
    if constexpr (T::kSplitK > 1)
      for (int cw = 0; cw < T::kParts; ++cw) mbarrier_init(xfull(cw), 1), mbarrier_init(xfree(cw), kPeers);
  }
  template <typename GroupSync>
  __device__ bool next_tile(bool, uint32_t rank, GroupSync, int& m_block, int& n_block) {
    if (!p.part.next<kParallelFixup>(int(cluster_index()), unit)) return false;
    coords(rank, m_block, n_block);
    return true;
  }
  // The current unit's tile. The consumers recompute it after the mainloop instead of holding it
  // through the mainloop (the register it frees is what keeps the profiled build from spilling).
  __device__ void coords(uint32_t rank, int& m_block, int& n_block) const { coords_of(unit.entry, rank, m_block, n_block); }
  // The tile at position `entry` of the tile order.
  __device__ void coords_of(int entry, uint32_t rank, int& m_block, int& n_block) const {
    const int u = p.order != nullptr ? __ldg(p.order + entry) : entry;
    m_block = (u / grid_n) * T::kCluster + int(rank);
    n_block = u % grid_n;
  }
  __device__ bool claims() const { return false; }
  __device__ int index() const { return unit.entry; }
  __device__ void on_exit(uint32_t) {}
  // The current unit's k-blocks; for a k-split tile this CTA's contiguous share of them (CTA r of S:
  // [b + n r / S, b + n (r + 1) / S), empty when the unit is shorter than S).
  __device__ void k_range(int& kb_begin, int& kb_end) const {
    kb_begin = unit.kb_begin, kb_end = unit.kb_end;
    if constexpr (T::kSplitK > 1) {
      const int n = unit.kb_end - unit.kb_begin, r = int(cluster_ctarank());
      kb_begin = unit.kb_begin + n * r / T::kSplitK;
      kb_end = unit.kb_begin + n * (r + 1) / T::kSplitK;
    }
  }

  // The slot of CTA `cta` (its rank in the cluster) of cluster w, consumer cw.
  __device__ int slot_index(int w, uint32_t cta, int cw) const { return part_slot<T>(w, cta, cw); }

  // L2 priorities for the partials (l2_hint.cuh). Where every tile is split, a partial is stored
  // early in a cluster's range and read at the end of another's, after mainloops that stream more
  // than the L2 holds: written evict-last and read evict-first it stays in L2 until then (H100,
  // CUPTI: 8192x128x8192 59.6 -> 55.4 us, 64x8192x4096 34.6 -> 32.6 us, 512x1024x8192 27.9 -> 27.3
  // us). Behind whole-tile waves the same cost 3072^3 3.6 % (89.1 -> 92.3 us) and 4160^3 1.2 %: the
  // kept partials crowd out operands the concurrent tiles share. There they keep the default.
  __device__ uint64_t partial_store_policy() const {
    return p.part.dp_tiles == 0 ? l2_policy_evict_last() : l2_policy_evict_normal();
  }
  __device__ uint64_t partial_load_policy() const {
    return p.part.dp_tiles == 0 ? l2_policy_evict_first() : l2_policy_evict_normal();
  }

  // This thread's share of a consumer's accumulators as float4s: f4(i) points at float4 i.
  struct AccF4 {
    float (&acc)[T::kRowGroups][T::WN / 2];
    __device__ float* operator()(int i) const { return &acc[i / (T::WN / 8)][4 * (i % (T::WN / 8))]; }
  };
  struct PieceF4 {
    float4 (&piece)[kSlotFloat4s];
    __device__ float* operator()(int i) const { return &piece[i].x; }
  };

  // Store this warpgroup's partial (f4(0 .. kSlotFloat4s - 1)) to slot s, less float4s [own_lo,
  // own_hi) of the slot (a parallel fix-up segment's own slice, which nobody else reads), then set
  // `flag` (the slot's own) or, with `count`, add one to it (the tile's count of published segments).
  // Thread-major layout: float4 f = i * 128 + tid is thread tid's i; each store instruction of a warp
  // writes 512 contiguous bytes, and thread tid of the reading warpgroup loads back exactly the
  // elements it holds.
  template <class F4, class Rec, class Sync>
  __device__ void publish(F4 f4, int s, int32_t* flag, bool count, uint32_t tile, Rec& rec, Sync wg_sync, uint32_t& t,
                          int own_lo = 0, int own_hi = 0) {
    const int tid = threadIdx.x % 128;
    float4* slot = p.slots + size_t(s) * (kSlotFloats / 4) + tid;
    const uint64_t keep = partial_store_policy();
#pragma unroll
    for (int i = 0; i < kSlotFloat4s; ++i) {
      if (i * 128 + tid >= own_lo && i * 128 + tid < own_hi) continue;
      const float* a = f4(i);
      st_cg_hint(slot + i * 128, make_float4(a[0], a[1], a[2], a[3]), keep);
    }
    wg_sync();  // every thread's stores, before thread 0's release
    if (tid == 0) {
      if (count) flag_add_release(flag, 1);
      else flag_release(flag, 1);
    }
    t = rec.record(Tag::PARTIAL_STORE, t, tile, uint32_t(unit.kb_begin));
  }

  // After the unit's last k-block has retired (wgmma.wait_group 0): a whole tile needs nothing; a
  // unit past the tile's k-block 0 publishes its partial; the unit with k-block 0 adds the others'.
  // A k-split tile first sums its cluster's shares (exchange), then does the same with its piece,
  // and stores the piece to C itself (it always returns false).
  // (k-split tiles) empty: this CTA computed nothing of the unit, its accumulators count as zero.
  template <class Rec, class Sync>
  __device__ bool fixup(float (&acc)[T::kRowGroups][T::WN / 2], bool empty, uint32_t rank, int cw, uint32_t tile, Rec& rec,
                        Sync wg_sync, uint32_t& t) {
    const bool whole = unit.kb_begin == 0 && unit.kb_end == p.part.num_kb;
    if constexpr (T::kSplitK > 1) {
      float4 piece[kSlotFloat4s];
      exchange(acc, empty, piece, cw, tile, rec, wg_sync, t);
      if (!whole && !fixup_serial(PieceF4{piece}, cluster_ctarank(), cw, tile, rec, wg_sync, t)) return false;
      int m_block, n_block;
      coords(rank, m_block, n_block);
      store_piece(piece, m_block, n_block, cw);
      t = rec.record(Tag::EPILOGUE, t, tile);
      rec.poll();
      return false;
    } else {
      if (whole) return true;
      if (kParallelFixup && p.part.parallel) return fixup_parallel(acc, rank, cw, tile, rec, wg_sync, t);
      return fixup_serial(AccF4{acc}, rank, cw, tile, rec, wg_sync, t);
    }
  }

  // The serial fix-up of a split tile's unit, on this thread's share f4 of CTA `cta`'s partial:
  // false when the unit published it, true when it ends the tile (f4 then holds the whole sum).
  template <class F4, class Rec, class Sync>
  __device__ bool fixup_serial(F4 f4, uint32_t cta, int cw, uint32_t tile, Rec& rec, Sync wg_sync, uint32_t& t) {
    const int tid = threadIdx.x % 128, worker = int(cluster_index());
    if (unit.kb_begin > 0) {
      const int s = slot_index(worker, cta, cw);
      publish(f4, s, p.flags + s, false, tile, rec, wg_sync, t);
      return false;
    }
    // k-block 0 of a split tile: this unit ends this cluster's range, so every other segment
    // belongs to the clusters after it, in k order. Thread i waits for partners worker + 1 + i,
    // + 128, ...: every flag in one round trip, where thread 0 used to wait for each in turn
    // (bench/NOTES.md). Then the partials are added in k order.
    const int last = p.part.last_partner(unit.entry);  // (a serial partition: the parallel one has fixup_parallel)
    const int tile_g0 = (unit.entry - p.part.dp_tiles) * p.part.num_kb;
    for (int j = tid; j < last - worker; j += 128) {
      int32_t* flag = p.flags + slot_index(worker + 1 + j, cta, cw);
      flag_wait(flag, 1, WaitSite{uint32_t(Role::CONSUMER), persistent::kPartialFlag, tile,
                                  uint32_t(p.part.sk_begin<false>(worker + 1 + j) - tile_g0)});
      flag_store_relaxed(flag, 0);  // consumed: the next launch finds it clear
    }
    const uint64_t dead = partial_load_policy();  // read for the last time
    // One wait span (every partner's flag acquired) and one reduce span (every partial added) for
    // the whole fix-up, both stored after the loop (only the clock is read before it): a record and
    // a poll per partial cost the profiled build 5 % at 512x1024x8192, the wait's record stored
    // before the loop another 1-2 % (bench/NOTES.md).
    const uint32_t first_kb = uint32_t(p.part.sk_begin<false>(worker + 1) - tile_g0);  // the first partner's
    wg_sync();  // the waiting threads' acquires, before every thread's loads
    const uint32_t wait_end = rec.now();
    for (int w = worker + 1; w <= last; ++w) {
      // A bar.sync per partial: in this shape ptxas allocates the loop without spilling in the
      // profiled 128x256 and 64-row builds, which spilled 20 to 36 bytes without it.
      wg_sync();
      const float4* slot = p.slots + size_t(slot_index(w, cta, cw)) * (kSlotFloats / 4) + tid;
#pragma unroll
      for (int i = 0; i < kSlotFloat4s; ++i) {
        const float4 v = ld_cg_hint(slot + i * 128, dead);
        float* a = f4(i);
        a[0] += v.x, a[1] += v.y, a[2] += v.z, a[3] += v.w;
      }
    }
    rec.record_span(Tag::WAIT_PARTIAL, t, wait_end, tile, first_kb);
    t = rec.record(Tag::REDUCE, wait_end, tile, first_kb);
    rec.poll();
    return true;
  }

  // A k-split tile (T::kSplitK CTAs a cluster, one share of the k-loop each): the CTAs sum their
  // accumulators through distributed shared memory. CTA r sends piece q of its accumulators (float4s
  // [q P, (q + 1) P) of each thread's, P = kSlotFloat4s) to CTA q for every q != r, by st.async into
  // q's exchange buffer, completing on q's xfull barrier; then it adds the pieces it received to its
  // own piece r, in rank order (the same additions every run), into `piece`. Before sending it waits
  // until every peer has read what it sent last time (xfree); after reading it tells each peer so.
  // The loops run over every piece index q with a runtime test against this CTA's rank, so that the
  // accumulators are only ever indexed by constants (registers, not local memory).
  template <class Rec, class Sync>
  __device__ void exchange(float (&acc)[T::kRowGroups][T::WN / 2], bool empty, float4 (&piece)[kSlotFloat4s], int cw,
                           uint32_t tile, Rec& rec, Sync wg_sync, uint32_t& t) {
    const int tid = threadIdx.x % 128;
    const uint32_t me = cluster_ctarank();
    const AccF4 f4{acc};
    if (tid == 0) mbarrier_arrive_expect_tx(xfull(cw), kPeers * kPieceBytes);
    const uint32_t parity = rounds & 1;
    mbarrier_wait<true>(xfree(cw), parity ^ 1, WaitSite{uint32_t(Role::CONSUMER), persistent::kExchangeFree, tile, uint32_t(unit.kb_begin)});
#pragma unroll
    for (int q = 0; q < T::kSplitK; ++q) {
      if (uint32_t(q) == me) continue;
      const int slot = int(me) < q ? int(me) : int(me) - 1;  // this CTA's place among q's peers
      const uint32_t dst = peer_smem_addr(xbuf(cw, slot) + tid * 16, uint32_t(q));
      const uint32_t bar = peer_smem_addr(xfull(cw), uint32_t(q));
#pragma unroll
      for (int i = 0; i < kSlotFloat4s; ++i) {
        const float* a = f4(q * kSlotFloat4s + i);
        if (empty) st_async_f32x4(dst + i * 128 * 16, 0.f, 0.f, 0.f, 0.f, bar);
        else st_async_f32x4(dst + i * 128 * 16, a[0], a[1], a[2], a[3], bar);
      }
    }
    t = rec.record(Tag::PARTIAL_STORE, t, tile, uint32_t(unit.kb_begin));
    mbarrier_wait<true>(xfull(cw), parity, WaitSite{uint32_t(Role::CONSUMER), persistent::kExchangeFull, tile, uint32_t(unit.kb_begin)});
    t = rec.record(Tag::WAIT_PARTIAL, t, tile, uint32_t(unit.kb_begin));
#pragma unroll
    for (int q = 0; q < T::kSplitK; ++q) {
      if (uint32_t(q) != me) continue;
#pragma unroll
      for (int i = 0; i < kSlotFloat4s; ++i) {
        const float* a = f4(q * kSlotFloat4s + i);
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int r = 0; r < T::kSplitK; ++r) {
          const float4 v = r != q ? ld_shared_f32x4(xbuf(cw, r < q ? r : r - 1) + (i * 128 + tid) * 16)
                           : empty ? make_float4(0.f, 0.f, 0.f, 0.f) : make_float4(a[0], a[1], a[2], a[3]);
          if (r == 0) s = v;
          else s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
        }
        piece[i] = s;
      }
    }
    wg_sync();  // every thread has read the pieces, before thread 0 frees the buffer
    if (tid == 0)
      for (int q = 0; q < T::kSplitK; ++q)
        if (uint32_t(q) != me) mbarrier_arrive_release_cluster(xfree(cw), uint32_t(q));
    ++rounds;
    t = rec.record(Tag::REDUCE, t, tile, uint32_t(unit.kb_begin));
    rec.poll();
  }

  // Before a k-split tile's consumer warpgroup leaves: its peers arrive on its xfree barrier after
  // reading its last pieces, so its shared memory must outlive that. Unbounded in debug builds too,
  // as the producer's drain (persistent_gemm.cuh): it outlasts a bounded wait only when a peer is
  // stuck in one, whose report names the cause.
  __device__ void drain_exchange(int cw) const {
    if (rounds > 0) mbarrier_wait_unbounded(xfree(cw), (rounds & 1) ^ 1);
  }

  // Where float4 f of thread th's accumulators (consumer cw, tile (m_block, n_block)) lies in C: the
  // row and column of its first bf16 pair (x, y); (z, w) lie 8 rows below. In the wgmma D layout
  // float4 f holds the thread's accumulators 4j..4j+3 of row group g: columns 8j + 2 (th % 4) +
  // {0, 1} of row 16 (th / 32) + (th % 32) / 4 and of the row 8 below.
  __device__ static void c_position(int m_block, int n_block, int cw, int f, int th, int& row, int& col) {
    const int g = f / (T::WN / 8), j = f % (T::WN / 8);
    row = m_block * T::BM + T::row0(cw) + g * 64 + (th / 32) * 16 + (th % 32) / 4;
    col = n_block * T::BN + T::col0(cw) + j * 8 + (th % 4) * 2;
  }

  // This thread's float4 f of consumer cw's part of tile (m_block, n_block), summed, to C as bf16
  // (rows and columns past C skipped).
  __device__ void store_to_c(int m_block, int n_block, int cw, int f, float x, float y, float z, float w) const {
    int row, col;
    c_position(m_block, n_block, cw, f, threadIdx.x % 128, row, col);
    if (col >= p.n) return;  // N is a multiple of 8: both columns or neither
    if (row < p.m) *reinterpret_cast<__nv_bfloat162*>(p.c + size_t(row) * p.n + col) = __floats2bfloat162_rn(x, y);
    if (row + 8 < p.m) *reinterpret_cast<__nv_bfloat162*>(p.c + size_t(row + 8) * p.n + col) = __floats2bfloat162_rn(z, w);
  }

  // Piece `me` of this consumer's part of tile (m_block, n_block), summed, to C as bf16.
  __device__ void store_piece(const float4 (&piece)[kSlotFloat4s], int m_block, int n_block, int cw) const {
    const int me = int(cluster_ctarank());
#pragma unroll
    for (int i = 0; i < kSlotFloat4s; ++i)
      store_to_c(m_block, n_block, cw, me * kSlotFloat4s + i, piece[i].x, piece[i].y, piece[i].z, piece[i].w);
  }

  // The parallel fix-up (few tiles, every tile cut into segments of its own, one a cluster: a
  // cluster's range is one unit of one tile). Every segment publishes its partial at once and counts
  // it on the tile's count of published segments; once that reaches S, segment q of S sums slice q
  // of the tile over all S partials in a fixed order (the same additions every run) and stores it
  // to C as bf16. The last warpgroup done reading clears the tile's counts for the next launch. One
  // thread a warpgroup polls one count: with a flag a segment, polled by a thread each, the tile's
  // last wait ended 2.5 us after its last partial was published at 256x256x16384 (bench/NOTES.md).
  // No deadlock and no chain: a cluster waits only after publishing the one partial it will ever
  // publish, so every wait ends once all clusters have run their k-blocks (all are resident).
  //
  // Three ways to sum a slice, by what bounds it: the L2 round trips of a thread's loads.
  // - With few segments (keeps_own_slice), slice q is cut along the slot's thread-major order, so
  //   each thread sums float4s it holds itself (reduce_own_slice): it keeps them in its registers
  //   (its partial is published less that slice: 1 / S fewer bytes through L2), adds the other
  //   segments' one partial at a time, its share of the slice loaded at once (in chunks of up to 8
  //   float4s), S - 1 round trips a chunk.
  // - Where S divides the float4s a thread holds and the other segments' values of its share fit in
  //   12 float4s (in_one_trip: 2, 4 and 8 segments on the tiles with 32 accumulators a thread, 4 on
  //   those with 64), the same, all of them loaded at once: one round trip (sum_shares).
  // - With more, that share is a float4 or none and S - 1 round trips are too many: the slice is cut
  //   in float2s over every thread, each loading up to 12 partials at once (reduce_slice).
  template <class Rec, class Sync>
  __device__ bool fixup_parallel(float (&acc)[T::kRowGroups][T::WN / 2], uint32_t rank, int cw, uint32_t tile, Rec& rec,
                                 Sync wg_sync, uint32_t& t) {
    const int worker = int(cluster_index());
    const int segments = p.part.parallel, seg = worker - unit.entry * segments;
    const bool own = keeps_own_slice(segments) || (kAnyInOneTrip && in_one_trip(segments));
    constexpr int kFloat4s = kSlotFloat4s * 128;
    const int lo = own ? seg * kFloat4s / segments : 0, hi = own ? (seg + 1) * kFloat4s / segments : 0;
    const AccF4 f4{acc};
    publish(f4, slot_index(worker, rank, cw), published(unit.entry, rank, cw), true, tile, rec, wg_sync, t, lo, hi);
    if (own) reduce_own_slice(f4, unit.entry, seg, lo, hi, rank, cw, rec, wg_sync, t);
    else reduce_slice(unit.entry, seg, rank, cw, rec, wg_sync, t);
    return false;
  }

  __device__ static bool keeps_own_slice(int segments) { return stream_k::keeps_own_slice(segments, kSlotFloat4s); }
  // Where the segments divide a thread's float4s, segment q's own slice is the same kShare = F / S
  // float4s of every thread, and where the other segments' values of them fit in kOneTripFloat4s
  // registers' worth, a thread loads them all at once: one round trip (sum_shares). On the tiles
  // with 32 accumulators a thread (F = 8) that is 2, 4 and 8 segments; 8 took a round trip per
  // float2 of the slice (reduce_slice), 4 one per segment. With 64 (F = 16: 128x128, 64x256) it is 4
  // segments, 12 float4s loaded at once: their reduce took 2.2 us in three round trips and takes
  // 1.2-1.5 us in one on the H100, 2.4-3 % of four launches' time (bench/NOTES.md; ptxas issues the
  // 12 loads before the first add, in two groups around the C store's bounds test). In reduce_slice's
  // float2 batches more in flight made ptxas interleave the adds with the loads (14 float2s at once,
  // and slower).
  static constexpr int kOneTripFloat4s = 12;
  __host__ __device__ static constexpr bool fits_one_trip(int share) {
    return share <= kSlotFloat4s && kSlotFloat4s % share == 0 && kSlotFloat4s / share > 1 &&
           (kSlotFloat4s / share - 1) * share <= kOneTripFloat4s;
  }
  static constexpr bool kAnyInOneTrip = fits_one_trip(1) || fits_one_trip(2) || fits_one_trip(4);
  __device__ static bool in_one_trip(int segments) {
    return (segments == kSlotFloat4s && fits_one_trip(1)) || (2 * segments == kSlotFloat4s && fits_one_trip(2)) ||
           (4 * segments == kSlotFloat4s && fits_one_trip(4));
  }

  // Tile `entry`'s counts (rank, consumer warpgroup): segments published, and segments done reading.
  __device__ int32_t* published(int entry, uint32_t rank, int cw) const { return p.flags + part_slot<T>(entry, rank, cw); }
  __device__ int32_t* done_reading(int entry, uint32_t rank, int cw) const {
    return p.flags + size_t(p.part.units) * kClusterParts<T> + part_slot<T>(entry, rank, cw);
  }

  // The head of both reduces: wait until every segment of tile `entry` has published (one thread
  // polls the tile's count), record the wait, and give the tile's place in C and its id.
  template <class Rec, class Sync>
  __device__ uint32_t wait_for_segments(int entry, uint32_t rank, int cw, Rec& rec, Sync wg_sync, uint32_t& t, int& m_block,
                                        int& n_block) const {
    coords_of(entry, rank, m_block, n_block);
    const uint32_t tile = uint32_t(m_block) * grid_n + n_block;
    if (threadIdx.x % 128 == 0)
      flag_wait(published(entry, rank, cw), p.part.parallel,
                WaitSite{uint32_t(Role::CONSUMER), persistent::kPartialFlag, tile, uint32_t(unit.kb_begin)});
    wg_sync();  // the waiting thread's acquire, before every thread's loads
    t = rec.record(Tag::WAIT_PARTIAL, t, tile, uint32_t(unit.kb_begin));
    return tile;
  }

  // The thread's part of tile `entry`'s tally, after the fix-up's loads: the warpgroup's last reader
  // clears the tile's counts.
  __device__ void done_with(int entry, uint32_t rank, int cw, int segments) const {
    if (threadIdx.x % 128 == 0 && flag_add_acq_rel(done_reading(entry, rank, cw), 1) == segments - 1) {
      flag_store_relaxed(published(entry, rank, cw), 0);  // everyone has read: clear both
      flag_store_relaxed(done_reading(entry, rank, cw), 0);
    }
  }

  // Segment `seg`'s slice of tile `entry`, float4s [lo, hi) of the slot (float4 f = i * 128 + th is
  // thread th's float4 i): wait for every segment, then each thread adds the other segments' values
  // of its own float4s in the slice to its accumulators, in k order after its own, and stores them to C.
  template <class Rec, class Sync>
  __device__ void reduce_own_slice(AccF4 f4, int entry, int seg, int lo, int hi, uint32_t rank, int cw, Rec& rec,
                                   Sync wg_sync, uint32_t& t) {
    const int tid = threadIdx.x % 128, segments = p.part.parallel;
    int m_block, n_block;
    const uint32_t tile = wait_for_segments(entry, rank, cw, rec, wg_sync, t, m_block, n_block);
    auto in_slice = [tid, lo, hi](int i) { return i * 128 + tid >= lo && i * 128 + tid < hi; };  // thread tid's float4 i
    const float4* first_slot = p.slots + size_t(slot_index(entry * segments, rank, cw)) * (kSlotFloats / 4) + tid;
    constexpr size_t kStride = size_t(kClusterParts<T>) * (kSlotFloats / 4);  // consecutive clusters' slots, in float4s
    const uint64_t dead = partial_load_policy();
    if constexpr (kAnyInOneTrip) {
      if (in_one_trip(segments)) {
        if (segments == kSlotFloat4s) sum_shares<1>(f4, first_slot, kStride, dead, seg, m_block, n_block, cw);
        else if (segments * 2 == kSlotFloat4s) sum_shares<2>(f4, first_slot, kStride, dead, seg, m_block, n_block, cw);
        else sum_shares<4>(f4, first_slot, kStride, dead, seg, m_block, n_block, cw);
        t = rec.record(Tag::REDUCE, t, tile, uint32_t(unit.kb_begin));
        wg_sync();  // every thread's loads, before thread 0 says this warpgroup is done reading
        done_with(entry, rank, cw, segments);
        return;
      }
    }
    // The loads of a round trip land in kChunk float4s of registers (more spill the 64x128
    // consumers), so a share spanning two chunks takes two rounds per segment.
    constexpr int kChunk = kSlotFloat4s < 8 ? kSlotFloat4s : 8;
#pragma unroll
    for (int c = 0; c < kSlotFloat4s; c += kChunk) {
      if (c * 128 + tid >= hi || (c + kChunk - 1) * 128 + tid < lo) continue;  // none of this chunk is in the slice
#pragma unroll 1
      for (int w = 0; w < segments; ++w) {
        if (w == seg) continue;
        const float4* src = first_slot + w * kStride;
        float4 v[kChunk];
#pragma unroll
        for (int j = 0; j < kChunk; ++j)
          if (in_slice(c + j)) v[j] = ld_cg_hint(src + (c + j) * 128, dead);
#pragma unroll
        for (int j = 0; j < kChunk; ++j)
          if (in_slice(c + j)) {
            float* a = f4(c + j);
            a[0] += v[j].x, a[1] += v[j].y, a[2] += v[j].z, a[3] += v[j].w;
          }
      }
    }
#pragma unroll
    for (int i = 0; i < kSlotFloat4s; ++i) {
      if (!in_slice(i)) continue;
      const float* a = f4(i);
      store_to_c(m_block, n_block, cw, i, a[0], a[1], a[2], a[3]);
    }
    t = rec.record(Tag::REDUCE, t, tile, uint32_t(unit.kb_begin));
    wg_sync();  // every thread's loads, before thread 0 says this warpgroup is done reading
    done_with(entry, rank, cw, segments);
  }

  // The own slice of segment `seg` of kSlotFloat4s / kShare (in_one_trip): this thread's float4s
  // seg * kShare ... + kShare - 1, the other segments' values loaded at once, added in k order after
  // its own (as reduce_own_slice adds them), stored to C.
  template <int kShare>
  __device__ void sum_shares(AccF4 f4, const float4* first_slot, size_t stride, uint64_t dead, int seg, int m_block,
                             int n_block, int cw) const {
    if constexpr (fits_one_trip(kShare)) {
      constexpr int kOthers = kSlotFloat4s / kShare - 1;
      float4 v[kOthers][kShare];
#pragma unroll
      for (int o = 0; o < kOthers; ++o)
#pragma unroll
        for (int j = 0; j < kShare; ++j)
          v[o][j] = ld_cg_hint(first_slot + (o < seg ? o : o + 1) * stride + (seg * kShare + j) * 128, dead);
      float4 sum[kShare];
#pragma unroll
      for (int i = 0; i < kSlotFloat4s; ++i)  // the accumulators by constant index only (else local memory)
        if (i / kShare == seg) sum[i % kShare] = make_float4(f4(i)[0], f4(i)[1], f4(i)[2], f4(i)[3]);
#pragma unroll
      for (int j = 0; j < kShare; ++j) {
#pragma unroll
        for (int o = 0; o < kOthers; ++o) sum[j].x += v[o][j].x, sum[j].y += v[o][j].y, sum[j].z += v[o][j].z, sum[j].w += v[o][j].w;
        store_to_c(m_block, n_block, cw, seg * kShare + j, sum[j].x, sum[j].y, sum[j].z, sum[j].w);
      }
    }
  }

  // Segment `seg`'s slice of tile `entry`, cut in float2s: wait for every segment, sum the slice over
  // the S partials in k order, store it to C.
  template <class Rec, class Sync>
  __device__ void reduce_slice(int entry, int seg, uint32_t rank, int cw, Rec& rec, Sync wg_sync, uint32_t& t) {
    const int tid = threadIdx.x % 128;
    const int segments = p.part.parallel, first = entry * segments;  // the tile's segments: clusters first, first + 1, ...
    int m_block, n_block;
    const uint32_t tile = wait_for_segments(entry, rank, cw, rec, wg_sync, t, m_block, n_block);
    // The slice is cut in float2s (one bf16x2 of C each), so that every thread of the warpgroup has
    // work even when a tile has tens of segments: a slice is then a few float2s a thread, read from
    // each of tens of partials, and its time goes to L2 round trips. The partials are loaded kBatch
    // at a time, every load of a batch issued before the first add, the sum kept in k order.
    // (Cut in float4s, loaded 8 partials a round trip, 256x256x16384 ran 17.95 us a launch on the
    // H100, CUPTI; this way 17.06 us.)
    constexpr int F2 = kSlotFloat4s * 128 * 2;  // float2s in a slot; float2 e is half e % 2 of float4 e / 2
    constexpr int kBatch = 12;                  // more spills the 64-accumulator tiles
    const int others = segments - 1;
    // Consecutive clusters' slots are a fixed stride apart.
    const float2* first_slot = reinterpret_cast<const float2*>(p.slots + size_t(slot_index(first, rank, cw)) * (kSlotFloats / 4));
    constexpr size_t kStride = size_t(kClusterParts<T>) * (kSlotFloats / 4) * 2;  // in float2s
    const float2* next_slots = first_slot + kStride;
    const uint64_t dead = partial_load_policy();
#pragma unroll 1
    for (int e = seg * F2 / segments + tid; e < (seg + 1) * F2 / segments; e += 128) {
      float2 s = ld_cg_hint(first_slot + e, dead);
#pragma unroll 1
      for (int w0 = 0; w0 < others; w0 += kBatch) {
        const float2* batch = next_slots + w0 * kStride + e;  // one address; the rest at fixed offsets
        float2 v[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
          if (w0 + j < others) v[j] = ld_cg_hint(batch + j * kStride, dead);
#pragma unroll
        for (int j = 0; j < kBatch; ++j)
          if (w0 + j < others) s.x += v[j].x, s.y += v[j].y;
      }
      // float4 f = i * 128 + th of the slot is thread th's float4 i (c_position); float2 e is its
      // first half (x, y) or its second (z, w), 8 rows below.
      const int f = e / 2;
      int row, col;
      c_position(m_block, n_block, cw, f / 128, f % 128, row, col);
      row += (e % 2) * 8;
      if (col < p.n && row < p.m)  // N is a multiple of 8: both columns or neither
        *reinterpret_cast<__nv_bfloat162*>(p.c + size_t(row) * p.n + col) = __floats2bfloat162_rn(s.x, s.y);
    }
    t = rec.record(Tag::REDUCE, t, tile, uint32_t(unit.kb_begin));
    wg_sync();  // every thread's loads, before thread 0 says this warpgroup is done reading
    done_with(entry, rank, cw, segments);
  }
};

// Stream-K waits on other clusters, so the whole grid must be resident at once: ask the runtime how
// many clusters of this kernel fit (once per device and build) and refuse a larger grid.
template <class T, int kMinGainPct = 0, bool kParallelFixup = false, bool kTailSplit = false>
int check_resident(const GtArgs* args, const GtPlan& plan, char* err, int errlen) {
  static int cached_device = -1, cached[2] = {0, 0};
  int device = 0;
  if (host::check_cuda(cudaGetDevice(&device), "cudaGetDevice", err, errlen)) return 1;
  if (device != cached_device) cached[0] = cached[1] = 0, cached_device = device;
  int& fits = cached[args->profile ? 1 : 0];
  if (fits == 0) {
    const auto kernel = persistent::kernel_for<T, Scheduler<T, kMinGainPct, kParallelFixup, kTailSplit>>(args, plan, err, errlen);
    if (kernel == nullptr) return 1;
    cudaLaunchAttribute attr[1];
    const cudaLaunchConfig_t cfg = persistent::launch_config<T>(plan, nullptr, attr);
    if (host::check_cuda(cudaOccupancyMaxActiveClusters(&fits, kernel, &cfg), "cudaOccupancyMaxActiveClusters", err,
                         errlen))
      return 1;
  }
  if (plan.grid_ctas / T::kClusterCTAs > fits)
    return host::fail(err, errlen,
                      "stream-K needs all %d clusters resident at once and this device holds %d: set max_ctas to %d or fewer",
                      plan.grid_ctas / T::kClusterCTAs, fits, fits * T::kClusterCTAs);
  return 0;
}

template <class T, int kMinGainPct = 0, bool kParallelFixup = false, bool kTailSplit = false>
int launch(const GtArgs* args, const char* name, char* err, int errlen) {
  GtPlan plan;
  if (persistent::plan<T, Scheduler<T, kMinGainPct, kParallelFixup, kTailSplit>>(args, &plan, err, errlen)) return 1;
  if (plan.workspace_bytes > 0 && check_resident<T, kMinGainPct, kParallelFixup, kTailSplit>(args, plan, err, errlen)) return 1;
  return persistent::launch<T, Scheduler<T, kMinGainPct, kParallelFixup, kTailSplit>>(args, name, err, errlen);
}

// For tests (tests/test_stream_k.py): the units of cluster `worker` as (entry, kb_begin, kb_end)
// triples in `out` (room for `max_units`); returns how many there are, or -1 for a bad shape.
template <class T, int kMinGainPct = 0, bool kParallelFixup = false, bool kTailSplit = false>
int units_of(const GtArgs* args, int worker, int32_t* out, int max_units) {
  char err[8];
  GtPlan plan;
  if (persistent::plan<T, Scheduler<T, kMinGainPct, kParallelFixup, kTailSplit>>(args, &plan, err, sizeof err)) return -1;
  const Partition part = partition_of<T>(args, kMinGainPct, kParallelFixup, kTailSplit);
  Unit u{-1, 0, 0};
  int n = 0;
  while (part.next(worker, u)) {
    if (n < max_units) out[3 * n] = u.entry, out[3 * n + 1] = u.kb_begin, out[3 * n + 2] = u.kb_end;
    ++n;
  }
  return n;
}

}  // namespace stream_k

