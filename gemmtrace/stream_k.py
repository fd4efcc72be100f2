"""The stream-K partition of kernels v9 and v10 (gemmtrace/kernels/sm90/stream_k.cuh), in Python.

The kernel's C++ is the authority; this mirror lets tests check the rule's properties on the CPU
(every k-block of every tile covered exactly once, equal work per cluster, a fixed reduction order,
waits that cannot form a cycle) and lets the analysis and what-if tools know which cluster did which
part of which tile. tests/test_stream_k.py also checks it against the built library's own partition.

Work is counted in cluster tiles (two vertically adjacent 128x256 tiles sharing B, the unit of the
tile order) and clusters ("workers"); a unit is (entry in the tile order, first k-block, end k-block).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .tile_order import SNAKE_BAND

# Time to move one warpgroup's fp32 partial through L2, in k-blocks of mainloop time.
FIXUP_KBLOCKS = 2
PARALLEL_FIXUP_KBLOCKS = 12  # v10's parallel fix-up: store, the wait, slices read back (measured ~5 us)
# Weighed against the parallel fix-up where its segments keep their own slices, a serial split
# k-block counts SERIAL_SPLIT_KBLOCK_COST times where a tile has at least SPREAD_MIN_KBLOCKS k-blocks,
# SHORT_SPREAD_KBLOCK_COST times from SHORT_SPREAD_MIN_KBLOCKS (the kernel's spread_kblock_cost).
SERIAL_SPLIT_KBLOCK_COST = 2.0
SPREAD_MIN_KBLOCKS = 256
SHORT_SPREAD_KBLOCK_COST = 1.2
SHORT_SPREAD_MIN_KBLOCKS = 128


def spread_kblock_cost(num_kb: int) -> float:
    """What a serial split k-block counts against the parallel fix-up (the kernel's spread_kblock_cost)."""
    if num_kb >= SPREAD_MIN_KBLOCKS:
        return SERIAL_SPLIT_KBLOCK_COST
    return SHORT_SPREAD_KBLOCK_COST if num_kb >= SHORT_SPREAD_MIN_KBLOCKS else 1.0


_MAX_SPLIT_ITERS = 1 << 30  # beyond this many split k-blocks the kernel keeps every tile whole


@dataclass(frozen=True)
class Partition:
    units: int  # cluster tiles
    num_kb: int  # k-blocks a tile
    workers: int  # clusters launched
    dp_tiles: int  # entries [0, dp_tiles) are whole tiles; the rest are split
    sk_base: int  # split k-blocks per cluster ...
    sk_extra: int  # ... plus one for clusters below this (parallel: per segment of a tile, and its first ones)
    parallel: int = 0  # fewer tiles than clusters (v10): the segments of every tile, each tile cut on its
    #                    own, its segments reducing it together; 0: the serial partition

    @property
    def split(self) -> bool:
        return self.dp_tiles < self.units

    def whole_kblocks(self) -> int:
        """The kernel's Partition::whole_kblocks: the k-blocks of the busiest cluster's whole tiles."""
        return -(-self.dp_tiles // self.workers) * self.num_kb

    def busiest_kblocks(self) -> int:
        """The kernel's Partition::busiest_kblocks: the busiest cluster's k-blocks, fix-ups counted."""
        whole = self.whole_kblocks()
        if not self.split:
            return whole
        if self.parallel:
            return self.sk_base + (self.sk_extra > 0) + PARALLEL_FIXUP_KBLOCKS
        split_tiles = self.units - self.dp_tiles
        return whole + self.sk_base + (self.sk_extra > 0) + FIXUP_KBLOCKS * -(-self.workers // split_tiles)

    def sk_begin(self, w: int) -> int:
        """The first split k-block of cluster w's range."""
        if self.parallel:
            t, q = divmod(w, self.parallel)
            return t * self.num_kb + q * self.sk_base + min(q, self.sk_extra)
        return w * self.sk_base + min(w, self.sk_extra)

    def owner(self, g: int) -> int:
        """The cluster whose range holds split k-block g."""
        t = 0
        if self.parallel:
            t, g = divmod(g, self.num_kb)
        big = self.sk_extra * (self.sk_base + 1)
        return t * self.parallel + (g // (self.sk_base + 1) if g < big else self.sk_extra + (g - big) // self.sk_base)

    def units_of(self, w: int) -> list[tuple[int, int, int]]:
        """Cluster w's units in the order it runs them: whole tiles, then its range of split k-blocks."""
        out = [(e, 0, self.num_kb) for e in range(w, self.dp_tiles, self.workers)]
        g, g_end = self.sk_begin(w), self.sk_begin(w + 1)
        while g < g_end:
            t, kb = divmod(g, self.num_kb)
            end = min(self.num_kb, kb + g_end - g)
            out.append((self.dp_tiles + t, kb, end))
            g += end - kb
        return out

    def last_partner(self, entry: int) -> int:
        """The last cluster holding a segment of split tile `entry`."""
        return self.owner((entry - self.dp_tiles + 1) * self.num_kb - 1)

    def segments(self, entry: int) -> list[tuple[int, int, int]]:
        """(cluster, first k-block, end k-block) of every segment of tile `entry`, in k order: the
        order in which the first segment's cluster adds the others' partials to its own."""
        if entry < self.dp_tiles:
            return [(entry % self.workers, 0, self.num_kb)]
        g0 = (entry - self.dp_tiles) * self.num_kb
        first = self.owner(g0)
        out = []
        for w in range(first, self.last_partner(entry) + 1):
            lo = max(g0, self.sk_begin(w)) - g0
            hi = min(g0 + self.num_kb, self.sk_begin(w + 1)) - g0
            out.append((w, lo, hi))
        return out


# v10's tail split (the kernel's make_tail_partition): on grids of at least TAIL_MIN_WAVES whole
# waves, split only the last partial wave's tiles, where the estimate below gains TAIL_MIN_GAIN_PCT.
TAIL_STORE_KBLOCKS, TAIL_READ_KBLOCKS, TAIL_MIN_GAIN_PCT, TAIL_MIN_WAVES = 4, 6, 1, 3
L2_BYTES = 50 * 1024 * 1024  # the H100's, as the kernel assumes


def tail_split_kblocks(p: Partition, slowdown: float) -> int:
    """The kernel's tail_split_kblocks: whole waves, the busiest split range slowed by `slowdown`,
    one partial stored and the other segments' partials of a tile read back."""
    rest = p.units - p.dp_tiles
    return (p.dp_tiles // p.workers * p.num_kb + math.ceil(slowdown * (p.sk_base + (p.sk_extra > 0)))
            + TAIL_STORE_KBLOCKS + TAIL_READ_KBLOCKS * (-(-p.workers // rest) - 1))


def _tail_partition(units: int, num_kb: int, workers: int, slowdown: float, otherwise: Partition) -> Partition:
    rest = units % workers
    iters = rest * num_kb
    if slowdown <= 0 or units < TAIL_MIN_WAVES * workers or rest == 0 or iters > _MAX_SPLIT_ITERS:
        return otherwise
    tail = Partition(units, num_kb, workers, units - rest, iters // workers, iters % workers)
    whole_kblocks = -(-units // workers) * num_kb
    return tail if tail_split_kblocks(tail, slowdown) * 100 < whole_kblocks * (100 - TAIL_MIN_GAIN_PCT) else otherwise


def tail_slowdown(m: int, n: int, k: int, tile: tuple[int, int], cluster: int, workers: int, order: str) -> float:
    """The kernel's tail_slowdown: 1.1 where the tail's A and B panels fit in L2, 1.2 up to a quarter
    over, else 0 (no tail split); only the snake order's tail is known, and only 128x256/c2 and
    192x192/c2 measured."""
    bm, bn = tile
    rows, cols = math.ceil(math.ceil(m / bm) / cluster), math.ceil(n / bn)
    rest = rows * cols % workers
    if (bm, bn, cluster) not in ((128, 256, 2), (192, 192, 2)) or order != "snake" or rest == 0:
        return 0.0
    band = rows - (rows - 1) // SNAKE_BAND * SNAKE_BAND
    if rest <= band * cols:
        r, c = min(band, rest), -(-rest // band)
    else:
        r, c = min(rows, band + SNAKE_BAND * -(-(rest - band * cols) // (SNAKE_BAND * cols))), cols
    nbytes = (r * bm * cluster + c * bn) * k * 2
    return 1.1 if nbytes <= L2_BYTES else 1.2 if nbytes <= 1.25 * L2_BYTES else 0.0


def keeps_own_slice(segments: int, slot_float4s: int) -> bool:
    """The kernel's keeps_own_slice: whether the parallel fix-up's segments sum their slices from their
    own registers (S - 1 round trips), which takes fewer round trips than slices cut in float2s."""
    return segments * (segments - 1) <= 2 * slot_float4s


def partition(units: int, num_kb: int, max_workers: int, min_gain_pct: int = 0,
              parallel_fixup: bool = False, hbm_segments: int = 0, tail_slowdown: float = 0.0,
              slot_float4s: int = 0) -> Partition:
    """The kernel's make_partition: the serial partition below (or, with `tail_slowdown` > 0, v10's
    tail split where it pays), or with `parallel_fixup` and fewer
    tiles than clusters every tile cut on its own into floor(clusters / tiles) segments, one cluster
    each, whichever leaves the busiest cluster fewer k-blocks (the parallel fix-up counted as
    PARALLEL_FIXUP_KBLOCKS; the serial split's k-blocks spread_kblock_cost(num_kb) times each where
    the segments keep their own slices, `slot_float4s` float4s a thread in a consumer's partial); at
    most `hbm_segments` segments a tile where that is given."""
    w_all = max(1, max_workers)
    serial = _tail_partition(units, num_kb, w_all, tail_slowdown,
                             _serial_partition(units, num_kb, max_workers, min_gain_pct))
    if not parallel_fixup or units >= w_all or units * num_kb > _MAX_SPLIT_ITERS:
        return serial
    segments = min(w_all // units, num_kb)
    if hbm_segments > 0:
        segments = min(segments, hbm_segments)
    p = Partition(units, num_kb, units * segments, 0, num_kb // segments, num_kb % segments, segments)
    busiest = p.busiest_kblocks()
    serial_whole = serial.whole_kblocks()
    split_cost = spread_kblock_cost(num_kb) if keeps_own_slice(segments, slot_float4s) else 1.0
    serial_cost = serial_whole + split_cost * (serial.busiest_kblocks() - serial_whole)
    if busiest < serial_cost and busiest * 100 < num_kb * (100 - min_gain_pct):
        return p
    return serial


def _serial_partition(units: int, num_kb: int, max_workers: int, min_gain_pct: int) -> Partition:
    """The serial rule (the kernel's make_serial_partition; v9's whole rule): whole tiles when the tiles fill whole waves; else the
    last (units mod W) + W tiles (all of them when units < W) split into equal ranges of k-blocks,
    one per cluster (at most sqrt(num_kb / 2) segments a tile when tiles are few), if that beats
    whole tiles on the busiest cluster counting FIXUP_KBLOCKS per partial moved, by at least
    `min_gain_pct` percent of the whole-tile k-blocks (v9: 0; v10: 10)."""
    w_all = max(1, max_workers)
    whole = Partition(units, num_kb, min(units, w_all), units, 0, 0)
    rest = units % w_all
    if rest == 0:
        return whole
    split_tiles = rest + w_all if units > w_all else units
    max_segments = max(1, math.isqrt(num_kb // FIXUP_KBLOCKS))
    workers = min(w_all, split_tiles * max_segments)
    iters = split_tiles * num_kb
    if iters > _MAX_SPLIT_ITERS:
        return whole
    busiest = -(-iters // workers) + FIXUP_KBLOCKS * -(-workers // split_tiles)
    dp_kblocks = (units - split_tiles) // w_all * num_kb
    whole_kblocks = -(-units // w_all) * num_kb
    if (dp_kblocks + busiest) * 100 >= whole_kblocks * (100 - min_gain_pct):
        return whole
    return Partition(units, num_kb, workers, units - split_tiles, iters // workers, iters % workers)


# The H100's HBM bandwidth over what one SM's k-loop draws in (the kernel's kHbmOverSmIntake).
HBM_OVER_SM_INTAKE = 35.0
# No tile is split whose whole k-loop is shorter than this much work, in k-blocks of a 128x256 tile
# (the kernel's kMinSplitKLoop): either fix-up's fixed latency is more than a short k-loop's split saves.
MIN_SPLIT_KLOOP = 2.5


def hbm_segments(m: int, n: int, bm: int, bn: int) -> int:
    """The kernel's hbm_segments: the parallel fix-up's most segments a tile, as many as it takes for
    their SMs to draw the operands in as fast as HBM delivers them."""
    return math.ceil((bm + bn) / (m + n) * HBM_OVER_SM_INTAKE)


def for_shape(m: int, n: int, k: int, sms: int = 132, tile: tuple[int, int, int] = (128, 256, 64),
              cluster: int = 2, min_gain_pct: int = 0, parallel_fixup: bool = False, split_k: int = 1,
              order: str | None = None, slot_float4s: int = 0) -> Partition:
    """The partition v9 (or v10, with its tile and min_gain_pct=10) uses for an (M, N, K) GEMM on
    `sms` SMs (or a max_ctas cap). split_k: CTAs a cluster splitting each unit's k-loop (v10's /kN
    tiles), so clusters of cluster * split_k CTAs. order: v10's tile order, for its tail split (None:
    v9, which has none)."""
    bm, bn, bk = tile
    units = math.ceil(math.ceil(m / bm) / cluster) * math.ceil(n / bn)
    workers = max(1, sms // (cluster * split_k))
    num_kb = math.ceil(k / bk)
    if num_kb * bm * bn < MIN_SPLIT_KLOOP * 128 * 256:  # whole tiles
        return Partition(units, num_kb, min(units, workers), units, 0, 0)
    # (the kernel's kMeasuredTail: clusters along M only, none splitting K)
    slowdown = tail_slowdown(m, n, k, (bm, bn), cluster, workers, order) if order and split_k == 1 else 0.0
    return partition(units, num_kb, workers, min_gain_pct, parallel_fixup, hbm_segments(m, n, bm, bn),
                     slowdown, slot_float4s)


@dataclass(frozen=True)
class V10Workspace:
    """v10's partition for the tile it runs, and the workspace's shape around it."""
    partition: Partition
    cluster_ctas: int  # CTAs a cluster (along M, or splitting K)
    consumers: int  # consumer warpgroups that compute (one on 64x64 tiles)
    slot_floats: int  # a consumer's part of the tile, or its CTA's piece of it on k-split tiles

    def flag_ints(self) -> int:
        return flag_ints(self.partition, self.cluster_ctas, self.consumers)

    def workspace_bytes(self) -> int:
        return workspace_bytes(self.partition, self.cluster_ctas, self.consumers, self.slot_floats)


def for_v10(m: int, n: int, k: int, tile_m: int, tile_n: int, cluster: int, split_k: int = 1,
            sms: int = 132, order: str = "row") -> V10Workspace:
    """v10 (v10_tile_family.cu) running a tile_m x tile_n tile at (M, N, K) in tile order `order`:
    its 10 % split gain, its tail split, and the parallel fix-up for the tiles with 64 accumulators a
    thread (kParallelFixup) unless their clusters split K."""
    parallel = tile_m * tile_n <= 128 * 128 and split_k == 1
    consumers = 1 if tile_m * tile_n == 64 * 64 else 2
    slot_floats = tile_m * tile_n // consumers // split_k
    p = for_shape(m, n, k, sms=sms, tile=(tile_m, tile_n, 64), cluster=cluster, min_gain_pct=10,
                  parallel_fixup=parallel, split_k=split_k, order=order, slot_float4s=slot_floats // 512)
    return V10Workspace(p, cluster * split_k, consumers, slot_floats)


def flag_ints(p: Partition, cluster: int = 2, consumers: int = 2) -> int:
    """The flags (or the parallel fix-up's counts) at the start of the workspace, in int32s."""
    return (2 * p.units if p.parallel else p.workers) * cluster * consumers


def workspace_bytes(p: Partition, cluster: int = 2, consumers: int = 2, slot_floats: int = 64 * 256) -> int:
    """Device memory v9 and v10 need for `p`: a flag per (cluster, rank, consumer warpgroup), or under
    the parallel fix-up two counts per (tile, rank, consumer warpgroup), padded to 1 KB; then an fp32
    slot per (cluster, rank, consumer warpgroup)."""
    if not p.split:
        return 0
    slots = p.workers * cluster * consumers
    ints = flag_ints(p, cluster, consumers)
    return -(-ints * 4 // 1024) * 1024 + slots * slot_floats * 4
