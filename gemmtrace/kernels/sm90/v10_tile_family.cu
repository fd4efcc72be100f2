// v10 (sm_90a): the tile shape chosen per problem: a small family of tiles, each compiled once, one
// picked at launch by a written-down rule from M, N, K and the SM count, with stream-K where it pays.
//
// What changes from v9: the kernel body (persistent_gemm.cuh) and the stream-K scheduler
// (stream_k.cuh) are instantiated for every tile of the family below instead of 128x256 alone.
// Small tiles make more tiles where there are few (skinny M or N, small squares), 64-row tiles stop
// computing the empty half of a 128-row tile when M is 64, clusters of one let a lone tile
// row (M <= 128) use every SM instead of every other one, 64x64 tiles make the most whole
// tiles of one wave on few-tile shapes, 64x128 tiles in pairs sharing B bring a quarter fewer
// bytes a flop into each SM than 64x64 tiles where the loads set the pace, and 192x192 tiles make
// whole waves on large shapes where the 128-row tiles leave a partial one.
//
// The rule (tile_cost and rule_cost below; `gemmtrace list` and docs/kernels.md say it in words):
// for each tile of the family no taller than M and no wider than N (rounded up to 64), partition the work
// exactly as the stream-K scheduler would (whole tiles for full waves, the rest split where that
// pays), take the k-blocks of the busiest cluster, count each split k-block (and serial fix-up)
// kSplitKBlockCost times, and scale by the tile's time per k-block: its area relative to 128x256
// over its measured throughput relative to 128x256 (kThroughput). Where every tile is cut for the
// parallel fix-up, split k-blocks count once, and the fix-up adds a fixed time and its partials'
// bytes moved through L2. Under the snake order a grid of several waves may instead split only its
// last partial wave (stream_k.cuh's tail split), counted by that split's own measured estimate.
// A cluster of two along M whose second CTA has no rows gives way to single CTAs (tiles of 128 rows
// or more always, 64x64 tiles where they split). The tile with the smallest cost runs; one within 2 % of a tile earlier in the order of preference loses to it (the largest
// tile, 192x192/c2, first, then the list: larger tiles, multicast clusters first). Nothing in it
// names a shape.
//
// GtArgs.variant: 0 for the rule, i >= 1 to force tile i - 1 of the family (for studies); GtPlan
// reports the tile that runs in tile_m, tile_n, cluster and stages, and its index + 1 in variant.
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include <limits>
#include <type_traits>

#include "stream_k.cuh"

namespace {

using persistent::Tile;
// The family, in order of preference. Stages: as many as fit beside the epilogue buffers.
using T0 = Tile<128, 256, 2, 4>;  // v9's tile: the most work per byte loaded
using T1 = Tile<256, 128, 2, 4>;  // the same area, for N too short for 256-wide tiles
using T2 = Tile<128, 192, 2, 4>;  // three quarters of the area at 0.93 of the throughput: whole waves where 128x256 splits
using T3 = Tile<128, 128, 2, 6>;  // half the area: twice the tiles where they are few
using T4 = Tile<128, 128, 1, 6>;  // no cluster: a lone row of tiles (M <= 128) uses every SM
using T5 = Tile<64, 256, 1, 4>;   // M <= 64: no empty half-tile computed
using T6 = Tile<64, 128, 1, 7>;   // a quarter of the area: one wave of whole tiles where N = 128 or the grid is small
using T7 = Tile<128, 128, 1, 5, 2>;  // k split over a cluster of two: two SMs a tile where a wave of tiles has a long K
using T8 = Tile<64, 64, 1, 13>;  // a sixteenth of the area, one consumer: one wave of whole tiles on few-tile shapes
using T9 = Tile<64, 64, 2, 13>;  // the same, B shared by multicast
using T10 = Tile<64, 128, 2, 7>;  // a quarter of the area, B shared: a quarter fewer bytes a flop into each SM than 64x64/c2
// 1.125 times 128x256's area, each consumer three m64n96 row groups (half the columns): the fewest
// bytes a flop of the family, and whole waves where 128x256 and 128x192 leave a partial one
// (3072^3: 128 cluster tiles on 66 clusters, where 128x192 makes 192). cuBLAS runs this tile at
// 3072^3, 4160^3 and 16384^3 on the H100.
using T11 = Tile<192, 192, 2, 4>;
constexpr int kFamily = 12;

// Throughput of each tile relative to 128x256 in clusters of two, measured on the H100 with every
// tile forced at 8192x8192x8192, whole tiles, in one process: 128x256/c2 750, 256x128/c2 698,
// 128x192/c2 693, 128x128/c2 641, 128x128/c1 504, 64x256/c1 403, 64x128/c1 344, 128x128/k2 446,
// 64x64/c1 254 and 64x64/c2 333 TFLOP/s (bench/results/20261124-h100-v10-stage-counters.json;
// 64x128/c2, added later: 479 against 785 for 128x256/c2 in one process,
// bench/results/20261124-h100-v10-64x128-c2.json; the consumer's stage counters made 128x128/c2
// 0.74 -> 0.85 of 128x256/c2; 128x128/k2 keeps the 0.60 fitted with its exchange cost below,
// against 0.59 measured; 192x192/c2, added later: 0.97, the lower of two processes' figures at 8192^3,
// 0.97 and 1.00, from its time against 128x256/c2's in the same process; bench/results/20261125-h100-v10-192x192.json).
// The 64-row and 128-wide
// tiles are slower per flop, and where measured not for shared-memory bandwidth: Nsight Compute
// puts the bank reads of 64x64/c2 and 128x128/c2 at 20 and 33 % of peak. cuBLAS's 64x64 tile
// runs its k-blocks 1.34-1.35 times as fast with the same fixed costs. It also reads less from L2,
// partly by keeping the CTAs that share A in one GPC; an order doing that cut ours by 15 % and left
// its time unchanged (bench/NOTES.md).
constexpr double kThroughput[kFamily] = {1.00, 0.93, 0.925, 0.85, 0.67, 0.54, 0.46, 0.60, 0.34, 0.44, 0.61, 0.97};

// A split k-block costs this many whole ones. Split ranges start at different k offsets on
// different clusters, so the tiles in flight stop sharing their A and B panels in L2 and read them
// again from HBM (v9's NOTES). Fitted on the H100 over every tile forced on 51 shapes (37 of them
// outside the benchmark suite; bench/results/20261123-h100-v10-tile-matrix.json): 1 left a mean
// loss against the best tile of 9.7 % off the suite, 2 left 4.0 %, 2.5 and 3 made it worse again.
constexpr double kSplitKBlockCost = 2.0;
static_assert(kSplitKBlockCost == stream_k::kSerialSplitKBlockCost, "stream_k.cuh weighs its two fix-ups with it");

// Stream-K splits only where it promises at least this many percent fewer k-blocks on the busiest
// cluster than whole tiles. v9 measured why: its split phase runs slower than whole tiles, up to a
// third slower with a long K, because clusters at different k offsets no longer share operands in
// L2; predicted gains under 3 % turned into losses from -34 to +1.4 points, gains of 12 % and more
// into wins (bench/results/20261123-h100-bench-v8-v9-shapes.json, bench/NOTES.md).
constexpr int kMinSplitGainPct = 10;
// With fewer tiles than clusters every tile is cut over all the clusters and its segments reduce
// it together (stream_k.cuh, the parallel fix-up), instead of v9's at most sqrt(K_b / 2) segments
// added up by one CTA: for the tiles whose consumers hold at most 64 accumulators a thread. With
// 128 (128x256, 256x128) the profiled build spills with it, and those tiles keep v9's fix-up.
template <class T>
constexpr bool kParallelFixup = T::kFewAccumulators && T::kSplitK == 1;
template <class T>
using Sched = stream_k::Scheduler<T, kMinSplitGainPct, kParallelFixup<T>, true>;

template <class T>
void describe(int32_t* out) {
  out[0] = T::BM, out[1] = T::BN, out[2] = T::kCluster, out[3] = T::kStages, out[4] = T::kSplitK;
}

// Calls f(T{}) for tile i of the family.
template <class F>
auto with_tile(int i, F&& f) {
  switch (i) {
    case 0: return f(T0{});
    case 1: return f(T1{});
    case 2: return f(T2{});
    case 3: return f(T3{});
    case 4: return f(T4{});
    case 5: return f(T5{});
    case 6: return f(T6{});
    case 7: return f(T7{});
    case 8: return f(T8{});
    case 9: return f(T9{});
    case 10: return f(T10{});
    default: return f(T11{});
  }
}

// The time of one k-block of tile T (tile i of the family), in 128x256 k-block times: its area
// relative to 128x256 over its throughput relative to 128x256.
template <class T>
constexpr double kblock_time(int i) { return double(T::BM) * T::BN / (128.0 * 256.0) / kThroughput[i] / T::kSplitK; }

// A k-split tile's exchange (its two CTAs' sums through distributed shared memory) and its piece
// stored from registers, per tile a cluster runs, in 128x256 k-block times: about 2.6 us in v10's
// trace at 512x1024x8192 (send 0.9, wait 0.35, add 0.25, store 1.2), some 3.5 k-blocks; 3 with 0.60
// as the tile's throughput fitted best over the 16 shapes where the rule without it chose 128x128/k2
// (bench/NOTES.md).
constexpr double kExchangeKBlocks = 3.0;

// The parallel fix-up, in 128x256 k-block times: a fixed part (the flags' round trip, and a head
// whose clusters all start at their own k offset: 8.8 us against 2.8 us at zero cost in a fit of
// launch time to the rule's cost over the tile matrix's shapes, about 8 k-blocks apart), and the
// workspace's bytes (each CTA's partial, written, then read back in slices) at the rate partials
// move through L2: 2.5-4 TB/s measured over the whole GPU, so about 1.3 MB written and read back
// again per k-block time (bench/NOTES.md). A tile's partial is its area in fp32: the fix-up of a
// 64x64 tile moves a quarter of what a 128x128 tile's does (2.3 against 4.6 us at 256x256x16384).
constexpr double kParallelFixupFixedKBlocks = 8.0;
constexpr double kPartialBytesPerKBlock = 1.3e6;

// The rule's cost of tile i: the busiest cluster's k-blocks, in 128x256 k-block times.
double tile_cost(const GtArgs* args, int i) {
  return with_tile(i, [&](auto t) {
    using T = decltype(t);
    // A tile taller than M or wider than N (rounded up to 64) computes an empty part of every tile,
    // and in a cluster of two along M the second CTA has no rows at all: such a tile is not weighed.
    // (The costs below count k-blocks, not useful flops, and would not see it.)
    using gemmtrace::host::ceil_div;
    if (T::BM > ceil_div(args->m, 64) * 64 || T::BN > ceil_div(args->n, 64) * 64) return std::numeric_limits<double>::infinity();
    // Nor is a cluster of two along M of tiles with 128 rows or more where M <= BM: its second CTA has
    // no rows, so every cluster computes one tile with two SMs, and the pair's measured throughput
    // (B shared by two CTAs that both compute) does not apply. At M = 80-128 with long K the same
    // tile shapes on single SMs ran 3-47 % faster on all 45 shapes timed (bench/NOTES.md). The 64-row
    // pairs at M <= 64 are weighed by rule_cost below.
    if (T::kCluster == 2 && T::BM >= 128 && args->m <= T::BM) return std::numeric_limits<double>::infinity();
    // 64x128/c2 only where it was measured to win (bench/NOTES.md): M above 64 (with one row of
    // 64-row tiles the second CTA of each pair computes nothing) and K from 2048 to 8192. At K = 1024
    // its clusters lost 3-8 % to 64x128/c1's single CTAs, and from K = 16384 it lost 1-10 % to the
    // 128x128 tiles, with or without a split.
    if (T::BM == 64 && T::BN == 128 && T::kCluster == 2 && (args->m <= 64 || args->k < 2048 || args->k > 8192))
      return std::numeric_limits<double>::infinity();
    // The partition that runs, with the parallel fix-up's segments capped where more would only wait
    // on HBM (stream_k::hbm_segments).
    const stream_k::Partition part = stream_k::partition_of<T>(args, kMinSplitGainPct, kParallelFixup<T>, true);
    const double per_kblock = kblock_time<T>(i);
    const int64_t busiest = part.busiest_kblocks();
    const double exchanges = T::kSplitK > 1 ? kExchangeKBlocks * double(ceil_div(part.units, part.workers)) : 0.0;
    if (!part.split()) return double(busiest) * per_kblock + exchanges;
    // The tail split: its own estimate, which counts its split k-blocks' slowdown as measured.
    if (stream_k::is_tail_split(part)) return double(stream_k::tail_split_kblocks(part, stream_k::tail_slowdown<T>(args))) * per_kblock;
    const int64_t whole = part.whole_kblocks();
    if (!part.parallel) return (double(whole) + kSplitKBlockCost * double(busiest - whole)) * per_kblock + exchanges;
    // Every tile cut for the parallel fix-up: its segments are capped to what HBM feeds, so their
    // k-blocks count once (kSplitKBlockCost is the loss of L2 sharing behind whole-tile waves); then
    // the fix-up, whose partials scale with the tile's area.
    const double moved = stream_k::moved_partial_bytes<T>(part) / kPartialBytesPerKBlock;
    return double(busiest - stream_k::kParallelFixupKBlocks) * per_kblock + kParallelFixupFixedKBlocks + moved;
  });
}

// The cost the rule weighs tile i by: tile_cost, except for 64x64 tiles at M <= 64. There the pair's
// (64x64/c2) second CTA has no rows. Where the pair's tiles run whole, the idle partner still loads
// half of each B panel for the computing CTA, whose k-loop its loads bound, and the pair stays
// weighed (64x3072x1024, 64x4096x1024 and 64x4096x2048 ran 7-11 % faster as pairs than as single
// CTAs split in two). Where its tiles split, each segment computes on one SM of two, while the same
// tile on single SMs (64x64/c1) puts a segment on every SM: there the pair is not weighed and
// 64x64/c1 weighs no more than the pair would. Measured on the H100 where that changes the pick,
// 83 shapes (45 held out, M = 16-64): 77 faster by up to 25 %, a median of +6.1 %, 2 slower by 2 %
// (bench/NOTES.md).
constexpr int kSingle64 = 8, kPair64 = 9;
static_assert(std::is_same_v<T8, Tile<64, 64, 1, 13>> && std::is_same_v<T9, Tile<64, 64, 2, 13>>,
              "kSingle64 and kPair64 name 64x64/c1 and 64x64/c2");
double rule_cost(const GtArgs* args, int i) {
  if (args->m > 64 || (i != kSingle64 && i != kPair64)) return tile_cost(args, i);
  if (!stream_k::partition_of<T9>(args, kMinSplitGainPct, kParallelFixup<T9>, true).split()) return tile_cost(args, i);
  if (i == kPair64) return std::numeric_limits<double>::infinity();
  return std::min(tile_cost(args, kSingle64), tile_cost(args, kPair64));
}

// The order of preference: ties (within 2 %) go to the earlier tile. 192x192/c2 comes first, though
// added last: on 10 shapes where its cost and 128x256/c2's were within 2 % (none of them used to set
// anything) it ran 1.3-4.6 % faster by % of cuBLAS in the same rounds, on every shape in two
// processes on the H100, and at 4160^3 3.5 % faster (bench/results/20261125-h100-v10-192x192.json).
constexpr int kPreference[kFamily] = {11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};

int chosen_tile(const GtArgs* args) {
  if (args->variant >= 1 && args->variant <= kFamily) return args->variant - 1;
  int best = kPreference[0];
  double best_cost = rule_cost(args, best);
  for (int j = 1; j < kFamily; ++j) {
    const int i = kPreference[j];
    const double c = rule_cost(args, i);
    if (c < best_cost * 0.98) best = i, best_cost = c;
  }
  return best;
}

}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  if (args->variant < 0 || args->variant > kFamily)
    return gemmtrace::host::fail(err, errlen, "v10 has tiles 1 to %d (0: the rule chooses); got variant %d", kFamily, args->variant);
  if (gemmtrace::host::check_bf16_gemm_shape(args, 8, err, errlen)) return 1;  // before the rule reads the shape
  const int i = chosen_tile(args);
  const int rc = with_tile(i, [&](auto t) { return persistent::plan<decltype(t), Sched<decltype(t)>>(args, p, err, errlen); });
  p->variant = i + 1;
  return rc;
}

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  if (gemmtrace::host::check_bf16_gemm_shape(args, 8, err, errlen)) return 1;
  return with_tile(chosen_tile(args), [&](auto t) { return stream_k::launch<decltype(t), kMinSplitGainPct, kParallelFixup<decltype(t)>, true>(args, "launching gemm_v10", err, errlen); });
}

// The family and the rule's costs, for the Python side (`gemmtrace list`, `--kernel best`, tests):
// tile i as (BM, BN, cluster, stages, k split) in out[5 i ...], and its cost for this shape in costs[i]
// (costs may be null). Returns the family's size.
extern "C" int gt_tile_family(const GtArgs* args, int32_t* out, double* costs) {
  for (int i = 0; i < kFamily; ++i) {
    with_tile(i, [&](auto t) { describe<decltype(t)>(out + 5 * i); return 0; });
    if (costs) costs[i] = args ? rule_cost(args, i) : 0.0;
  }
  return kFamily;
}

// For tests (tests/test_stream_k.py): the stream-K units of cluster `worker` for the tile the rule
// (or GtArgs.variant) picks, as in v9's gt_stream_k_units.
extern "C" int gt_stream_k_units(const GtArgs* args, int worker, int32_t* out, int max_units) {
  if (gemmtrace::host::check_bf16_gemm_shape(args, 8, nullptr, 0)) return -1;
  return with_tile(chosen_tile(args), [&](auto t) { return stream_k::units_of<decltype(t), kMinSplitGainPct, kParallelFixup<decltype(t)>, true>(args, worker, out, max_units); });
}
