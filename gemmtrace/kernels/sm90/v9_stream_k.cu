// v9 (sm_90a): stream-K: the persistent grid splits the k-loops of the last tiles across clusters,
// so that every cluster gets the same number of k-blocks, and split tiles are summed through a
// workspace in a fixed order (bitwise-identical results run to run).
//
// What changes from v7: only the tile scheduler below (the kernel body is persistent_gemm.cuh,
// whose stream-K hooks this scheduler switches on). Work is handed out as units (cluster tile,
// first k-block, end k-block); both CTAs of a cluster run the same units, so they still share B by
// multicast.
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
//   busiest cluster plus 2 per partial its tiles move, else every tile is whole.
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
// consumer warpgroup), then a 64x256 fp32 slot for each. The finishing warpgroup resets each
// flag it consumed, so the workspace is all zero flags again when the kernel ends.
//
// Shapes: any M, N >= 1 with N a multiple of 8 and K a multiple of 8.
#include <cmath>

#include "gemmtrace/flags.cuh"
#include "persistent_gemm.cuh"

namespace {

using namespace gemmtrace;
using persistent::BN;
using persistent::kCluster;
using persistent::kConsumers;

// The cost of moving one 64x256 fp32 partial through L2 (a store by one warpgroup, a load by
// another), in k-blocks of mainloop time: 64 KB at roughly 100 GB/s per SM against ~0.6 us a
// k-block. Sets the split limit and the split-or-not test (see the header comment).
constexpr int kFixupKBlocks = 2;
constexpr int kSlotFloats = 64 * BN;  // one consumer warpgroup's 64x256 fp32 partial

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

  __host__ __device__ int sk_begin(int w) const { return w * sk_base + (w < sk_extra ? w : sk_extra); }
  // The cluster whose range holds split k-block g.
  __host__ __device__ int owner(int g) const {
    const int big = sk_extra * (sk_base + 1);
    return g < big ? g / (sk_base + 1) : sk_extra + (g - big) / sk_base;
  }
  // Cluster w's unit after `u` (start from Unit{-1, 0, 0}): whole tiles w, w + workers, ... below
  // dp_tiles, then its range of split k-blocks, one unit per tile it touches. Only the current unit
  // is kept (three registers): the position in the split sequence follows from it.
  __host__ __device__ bool next(int w, Unit& u) const {
    int g;  // the next split k-block
    if (u.entry < dp_tiles) {
      const int dp = u.entry < 0 ? w : u.entry + workers;
      if (dp < dp_tiles) {
        u = Unit{dp, 0, num_kb};
        return true;
      }
      g = sk_begin(w);
    } else {
      g = (u.entry - dp_tiles) * num_kb + u.kb_end;
    }
    const int g_end = sk_begin(w + 1);
    if (g >= g_end) return false;
    const int t = g / num_kb;
    u.entry = dp_tiles + t;
    u.kb_begin = g - t * num_kb;
    u.kb_end = u.kb_begin + (g_end - g) < num_kb ? u.kb_begin + (g_end - g) : num_kb;
    return true;
  }
  // A split tile's finishing unit waits for the clusters (w, last]: the owners of its other segments.
  __host__ __device__ int last_partner(int entry) const { return owner((entry - dp_tiles + 1) * num_kb - 1); }
  bool split() const { return dp_tiles < units; }
};

int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

Partition make_partition(int units, int num_kb, int max_workers) {
  const int w_all = std::max(1, max_workers);
  const Partition whole{units, num_kb, std::min(units, w_all), units, 0, 0};
  const int rest = units % w_all;
  if (rest == 0) return whole;
  const int split_tiles = units > w_all ? rest + w_all : units;
  const int max_segments = std::max(1, int(std::sqrt(double(num_kb / kFixupKBlocks))));
  const int workers = int(std::min<int64_t>(w_all, int64_t(split_tiles) * max_segments));
  const int64_t iters = int64_t(split_tiles) * num_kb;
  if (iters > (int64_t(1) << 30)) return whole;  // k-block indices stay well inside int
  const int64_t busiest = ceil_div64(iters, workers) + kFixupKBlocks * ceil_div64(workers, split_tiles);
  if (busiest >= ceil_div64(split_tiles, w_all) * num_kb) return whole;
  return Partition{units, num_kb, workers, units - split_tiles, int(iters / workers), int(iters % workers)};
}

int64_t workspace_bytes(const Partition& part) {
  if (!part.split()) return 0;
  return host::ceil_div(int64_t(part.workers) * kCluster * kConsumers * 4, 1024) * int64_t(1024) +
         int64_t(part.workers) * kCluster * kConsumers * kSlotFloats * 4;
}

int max_clusters(const GtArgs* args) {
  const int sms = args->max_ctas > 0 ? args->max_ctas : (args->num_sms > 0 ? args->num_sms : 132);
  return std::max(1, sms / kCluster);
}

Partition partition_of(const GtArgs* args) {
  const int grid_m_pairs = host::ceil_div(host::ceil_div(args->m, persistent::BM), kCluster);
  const int units = grid_m_pairs * host::ceil_div(args->n, BN);
  return make_partition(units, host::ceil_div(args->k, persistent::BK), max_clusters(args));
}

struct TileScheduler {
  static constexpr bool kSplitsK = true;
  static constexpr int kSmemBytes = 0;
  struct Params {
    const int32_t* order;  // the tile order (row order when null)
    Partition part;
    int32_t* flags;   // [cluster][rank][consumer]
    float4* slots;    // [cluster][rank][consumer][32 float4][128 threads]
  };

  Params p;
  int grid_n;
  Unit unit;  // the current unit (the cluster's index is re-read from %clusterid: one register less)

  static int params(const GtArgs* args, Params* out, char* err, int errlen) {
    const Partition part = partition_of(args);
    const int64_t bytes = workspace_bytes(part);
    if (bytes > 0 && args->workspace == nullptr)
      return host::fail(err, errlen, "this shape splits tiles and needs a workspace of %lld bytes (GtArgs.workspace, zeroed once)",
                        (long long)bytes);
    auto* base = static_cast<uint8_t*>(args->workspace);
    const int64_t flag_bytes = host::ceil_div(int64_t(part.workers) * kCluster * kConsumers * 4, 1024) * int64_t(1024);
    *out = Params{args->tile_order, part, reinterpret_cast<int32_t*>(base),
                  bytes > 0 ? reinterpret_cast<float4*>(base + flag_bytes) : nullptr};
    return 0;
  }
  static int max_tiles_per_cluster(int units, int clusters, const GtArgs*) { return host::ceil_div(units, clusters); }

  // Records a recording warp may write, for the busiest cluster: producer: setup, and per k-block a
  // stage wait and an issue; consumer: setup, per k-block a data wait and an MMA span, per unit an
  // epilogue or a partial store, per partial added a wait and a reduce span.
  static int records_per_region(const Partition& part) {
    int64_t most = 0;
    for (int w = 0; w < part.workers; ++w) {
      Unit u{-1, 0, 0};
      int64_t n = 1;
      while (part.next(w, u)) {
        n += 2 * (u.kb_end - u.kb_begin) + 1;
        if (u.kb_begin == 0 && u.kb_end < part.num_kb) n += 2 * (part.last_partner(u.entry) - w);
      }
      most = std::max(most, n);
    }
    return int(std::min<int64_t>(most + 2, 1 << 30));
  }

  static void plan(const GtArgs* args, int units, int num_kb, int clusters, GtPlan* p) {
    const Partition part = make_partition(units, num_kb, clusters);
    p->grid_ctas = part.workers * kCluster;
    p->records_per_region = records_per_region(part);
    p->workspace_bytes = workspace_bytes(part);
    (void)args;
  }

  __device__ TileScheduler(const Params& p_, int, int grid_n_, int, int, uint32_t)
      : p(p_), grid_n(grid_n_), unit{-1, 0, 0} {}
  __device__ void init_barriers() {}
  template <typename GroupSync>
  __device__ bool next_tile(bool, bool, uint32_t rank, GroupSync, int& m_block, int& n_block) {
    if (!p.part.next(int(cluster_index()), unit)) return false;
    coords(rank, m_block, n_block);
    return true;
  }
  // The current unit's tile. The consumers recompute it after the mainloop instead of holding it
  // through the mainloop (the register it frees is what keeps the profiled build from spilling).
  __device__ void coords(uint32_t rank, int& m_block, int& n_block) const {
    const int u = p.order != nullptr ? __ldg(p.order + unit.entry) : unit.entry;
    m_block = (u / grid_n) * kCluster + int(rank);
    n_block = u % grid_n;
  }
  __device__ bool claims() const { return false; }
  __device__ int index() const { return unit.entry; }
  __device__ void on_exit() {}
  __device__ void k_range(int& kb_begin, int& kb_end) const { kb_begin = unit.kb_begin, kb_end = unit.kb_end; }

  __device__ int slot_index(int w, uint32_t rank, int cw) const { return (w * kCluster + int(rank)) * kConsumers + cw; }

  // After the unit's last k-block has retired (wgmma.wait_group 0): a whole tile needs nothing; a
  // unit past the tile's k-block 0 publishes its partial; the unit with k-block 0 adds the others'.
  template <class Rec, class Sync>
  __device__ bool fixup(float (&acc)[BN / 2], uint32_t rank, int cw, uint32_t tile, Rec& rec, Sync wg_sync, uint32_t& t) {
    if (unit.kb_begin == 0 && unit.kb_end == p.part.num_kb) return true;
    const int tid = threadIdx.x % 128, worker = int(cluster_index());
    if (unit.kb_begin > 0) {
      // Thread-major slot layout: each store instruction of a warp writes 512 contiguous bytes,
      // and the finishing warpgroup's thread tid reads back exactly the elements it holds.
      float4* slot = p.slots + size_t(slot_index(worker, rank, cw)) * (kSlotFloats / 4) + tid;
#pragma unroll
      for (int i = 0; i < BN / 8; ++i)
        __stcg(slot + i * 128, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
      wg_sync();  // every thread's stores, before thread 0's release
      if (tid == 0) flag_release(p.flags + slot_index(worker, rank, cw), 1);
      t = rec.record(Tag::PARTIAL_STORE, t, tile, uint32_t(unit.kb_begin));
      return false;
    }
    // k-block 0 of a split tile: this unit ends this cluster's range, so every other segment
    // belongs to the clusters after it, in k order. Add their partials in that order.
    const int last = p.part.last_partner(unit.entry);
    const int tile_g0 = (unit.entry - p.part.dp_tiles) * p.part.num_kb;
    for (int w = worker + 1; w <= last; ++w) {
      const uint32_t seg_kb = uint32_t(p.part.sk_begin(w) - tile_g0);  // the partner's first k-block
      int32_t* flag = p.flags + slot_index(w, rank, cw);
      if (tid == 0) {
        flag_wait(flag, 1, WaitSite{uint32_t(Role::CONSUMER), persistent::kPartialFlag, tile, seg_kb});
        flag_store_relaxed(flag, 0);  // consumed: the next launch finds it clear
      }
      wg_sync();  // thread 0's acquire, before every thread's loads
      t = rec.record(Tag::WAIT_PARTIAL, t, tile, seg_kb);
      const float4* slot = p.slots + size_t(slot_index(w, rank, cw)) * (kSlotFloats / 4) + tid;
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) {
        const float4 v = __ldcg(slot + i * 128);
        acc[4 * i] += v.x, acc[4 * i + 1] += v.y, acc[4 * i + 2] += v.z, acc[4 * i + 3] += v.w;
      }
      t = rec.record(Tag::REDUCE, t, tile, seg_kb);
      rec.poll();
    }
    return true;
  }
};

}  // namespace

extern "C" int gt_plan(const GtArgs* args, GtPlan* p, char* err, int errlen) {
  return persistent::plan<TileScheduler>(args, p, err, errlen);
}

// Stream-K waits on other clusters, so the whole grid must be resident at once: ask the runtime how
// many clusters of this kernel fit (once per device and build) and refuse a larger grid.
static int check_resident(const GtArgs* args, const GtPlan& plan, char* err, int errlen) {
  static int cached_device = -1, cached[2] = {0, 0};
  int device = 0;
  if (host::check_cuda(cudaGetDevice(&device), "cudaGetDevice", err, errlen)) return 1;
  if (device != cached_device) cached[0] = cached[1] = 0, cached_device = device;
  int& fits = cached[args->profile ? 1 : 0];
  if (fits == 0) {
    auto kernel = args->profile ? persistent::gemm_persistent<true, TileScheduler>
                                : persistent::gemm_persistent<false, TileScheduler>;
    if (host::check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.smem_bytes),
                         "cudaFuncSetAttribute", err, errlen))
      return 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(plan.grid_ctas);
    cfg.blockDim = dim3(plan.block_threads);
    cfg.dynamicSmemBytes = plan.smem_bytes;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim = {kCluster, 1, 1};
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (host::check_cuda(cudaOccupancyMaxActiveClusters(&fits, kernel, &cfg), "cudaOccupancyMaxActiveClusters", err,
                         errlen))
      return 1;
  }
  if (plan.grid_ctas / kCluster > fits)
    return host::fail(err, errlen,
                      "stream-K needs all %d clusters resident at once and this device holds %d: set max_ctas to %d or fewer",
                      plan.grid_ctas / kCluster, fits, fits * kCluster);
  return 0;
}

extern "C" int gt_launch(const GtArgs* args, char* err, int errlen) {
  GtPlan plan;
  if (persistent::plan<TileScheduler>(args, &plan, err, errlen)) return 1;
  if (plan.workspace_bytes > 0 && check_resident(args, plan, err, errlen)) return 1;
  return persistent::launch<TileScheduler>(args, "launching gemm_v9", err, errlen);
}

// For tests (tests/test_stream_k.py): the units of cluster `worker` as (entry, kb_begin, kb_end)
// triples in `out` (room for `max_units`); returns how many there are, or -1 for a bad shape.
extern "C" int gt_stream_k_units(const GtArgs* args, int worker, int32_t* out, int max_units) {
  char err[8];
  GtPlan plan;
  if (persistent::plan<TileScheduler>(args, &plan, err, sizeof err)) return -1;
  const Partition part = partition_of(args);
  Unit u{-1, 0, 0};
  int n = 0;
  while (part.next(worker, u)) {
    if (n < max_units) out[3 * n] = u.entry, out[3 * n + 1] = u.kb_begin, out[3 * n + 2] = u.kb_end;
    ++n;
  }
  return n;
}
