"""The stream-K partition of v9 (gemmtrace/stream_k.py, mirroring v9_stream_k.cu): on the CPU."""
import ctypes

import pytest

from gemmtrace.stream_k import Partition, for_shape, for_v10, partition, workspace_bytes

SHAPES = [
    (256, 256, 16384), (512, 1024, 8192), (64, 8192, 4096), (256, 14336, 4096), (8192, 128, 8192),
    (2048, 2048, 2048), (3072, 3072, 3072), (4160, 4160, 4160), (6144, 6144, 1096), (4096, 28672, 8192),
    (4096, 4096, 4096), (8192, 8192, 8192), (1000, 1000, 1000), (333, 1032, 712), (128, 128, 64), (256, 256, 64),
    (128, 256, 128),
]
# (units, k-blocks, clusters): edge cases of the rule itself
GRID = [(u, kb, w) for u in (1, 2, 5, 31, 65, 66, 67, 131, 132, 133, 200, 1000) for kb in (1, 2, 3, 7, 64, 65, 256)
        for w in (1, 3, 66)]


def all_partitions():
    return ([for_shape(*s) for s in SHAPES] + [partition(*g) for g in GRID]
            + [partition(*g, parallel_fixup=True) for g in GRID])


def check(p: Partition):
    units = {w: p.units_of(w) for w in range(p.workers)}
    # every k-block of every tile exactly once, no empty unit
    seen = {}
    for w, us in units.items():
        for e, lo, hi in us:
            assert 0 <= e < p.units and 0 <= lo < hi <= p.num_kb, (w, e, lo, hi)
            for kb in range(lo, hi):
                assert (e, kb) not in seen, f"tile {e} k-block {kb} twice"
                seen[e, kb] = w
    assert len(seen) == p.units * p.num_kb
    # equal work: whole tiles in whole waves, split k-blocks differing by at most one
    dp = [sum(1 for e, lo, hi in us if e < p.dp_tiles) for us in units.values()]
    sk = [sum(hi - lo for e, lo, hi in us if e >= p.dp_tiles) for us in units.values()]
    if p.split:
        assert p.dp_tiles % p.workers == 0 and max(dp) == min(dp)
        assert max(sk) - min(sk) <= 1 and min(sk) >= 1
    else:
        assert max(dp) - min(dp) <= 1 and sum(sk) == 0
    for w, us in units.items():
        split = [u for u in us if u[0] >= p.dp_tiles and (u[1], u[2]) != (0, p.num_kb)]
        partials = [u for u in split if u[1] > 0]
        finishing = [u for u in split if u[1] == 0]
        # at most one partial, and it is the cluster's first split unit: nothing before it waits
        assert len(partials) <= 1
        if partials:
            assert partials[0] == next(u for u in us if u[0] >= p.dp_tiles)
        # at most one waiting unit, the cluster's last; it waits only on later clusters
        assert len(finishing) <= 1
        if finishing:
            assert finishing[0] == us[-1]
            assert p.last_partner(finishing[0][0]) > w
    # the reduction order: the segments of a split tile in k order, on consecutive clusters
    for e in range(p.dp_tiles, p.units):
        segs = p.segments(e)
        assert [s[0] for s in segs] == list(range(segs[0][0], segs[0][0] + len(segs)))
        assert segs[0][1] == 0 and segs[-1][2] == p.num_kb
        assert all(a[2] == b[1] for a, b in zip(segs, segs[1:]))
        for w, lo, hi in segs:
            assert (e, lo, hi) in units[w]


@pytest.mark.parametrize("p", all_partitions(), ids=lambda p: f"u{p.units}-kb{p.num_kb}-w{p.workers}")
def test_partition_covers_balances_and_orders(p):
    check(p)


@pytest.mark.parametrize("units,num_kb,workers", [(2, 256, 66), (4, 128, 40), (3, 128, 66), (9, 128, 132),
                                                   (1, 1024, 132), (5, 7, 66), (65, 64, 66), (2, 3, 66)])
def test_parallel_partition_cuts_each_tile_on_its_own(units, num_kb, workers):
    """Under the parallel fix-up no cluster straddles two tiles (one that did published two partials
    and summed two slices in turn while the next tile waited): every tile has floor(W / U) segments
    (at most its k-blocks), one cluster each, of sizes differing by at most one."""
    p = partition(units, num_kb, workers, parallel_fixup=True)
    if not p.parallel:  # the serial partition won (few k-blocks a tile)
        return
    segments = min(workers // units, num_kb)
    assert p.parallel == segments and p.workers == units * segments <= workers
    for w in range(p.workers):
        (e, lo, hi), = p.units_of(w)  # one unit a cluster
        assert e == w // segments
    for e in range(units):
        sizes = [hi - lo for _w, lo, hi in p.segments(e)]
        assert len(sizes) == segments and max(sizes) - min(sizes) <= 1


def test_parallel_fixup_weighed_against_the_serial_split_spread_where_segments_keep_their_slices():
    """Where the parallel fix-up's segments keep their own slices (few segments a tile), the serial
    split's k-blocks count SERIAL_SPLIT_KBLOCK_COST times in the choice where a tile has at least
    SPREAD_MIN_KBLOCKS k-blocks, SHORT_SPREAD_KBLOCK_COST times from SHORT_SPREAD_MIN_KBLOCKS, and
    once below that or with the slices not kept."""
    from gemmtrace.stream_k import (SERIAL_SPLIT_KBLOCK_COST, SHORT_SPREAD_KBLOCK_COST, SHORT_SPREAD_MIN_KBLOCKS,
                                    SPREAD_MIN_KBLOCKS, keeps_own_slice, spread_kblock_cost)

    assert keeps_own_slice(6, 16) and not keeps_own_slice(7, 16) and keeps_own_slice(4, 8) and not keeps_own_slice(5, 8)
    assert spread_kblock_cost(SPREAD_MIN_KBLOCKS) == SERIAL_SPLIT_KBLOCK_COST
    assert spread_kblock_cost(SPREAD_MIN_KBLOCKS - 1) == spread_kblock_cost(SHORT_SPREAD_MIN_KBLOCKS) == SHORT_SPREAD_KBLOCK_COST
    assert spread_kblock_cost(SHORT_SPREAD_MIN_KBLOCKS - 1) == 1.0
    # 10 tiles of 128x128/c2 (16 float4s a thread) on 66 clusters: 6 segments a tile
    p = partition(10, SPREAD_MIN_KBLOCKS, 66, 10, parallel_fixup=True, slot_float4s=16)
    assert p.parallel == 6 and keeps_own_slice(p.parallel, 16)
    assert partition(10, SPREAD_MIN_KBLOCKS - 1, 66, 10, parallel_fixup=True, slot_float4s=16).parallel == 6
    assert not partition(10, SHORT_SPREAD_MIN_KBLOCKS - 1, 66, 10, parallel_fixup=True, slot_float4s=16).parallel
    # 16 such tiles on 66 clusters with 128 k-blocks (512x1024x8192): 4 segments of 32 k-blocks and
    # 12 for the fix-up (44) against a serial split of 31-32 k-blocks and 5 partials moved (42), which
    # counted 1.2 times (50.4) loses; with 127 k-blocks it counts once and the serial split stays.
    p = partition(16, SHORT_SPREAD_MIN_KBLOCKS, 66, 10, parallel_fixup=True, slot_float4s=16)
    assert p.parallel == 4 and p.busiest_kblocks() == 44
    assert not partition(16, SHORT_SPREAD_MIN_KBLOCKS - 1, 66, 10, parallel_fixup=True, slot_float4s=16).parallel
    # the same with 64x64 tiles' 8 float4s: 6 segments do not keep their slices, and the serial split stays
    assert not partition(10, SPREAD_MIN_KBLOCKS, 66, 10, parallel_fixup=True, slot_float4s=8).parallel
    # v10 at 512x640x16384 with 128x128/c2 (the rule's pick there)
    w = for_v10(512, 640, 16384, 128, 128, 2, order="snake")
    assert w.partition.parallel == 6 and w.slot_floats == 8192


def test_no_split_of_a_short_k_loop():
    """A tile whose whole k-loop is under 2.5 k-blocks of 128x256 work runs whole (the kernels'
    kMinSplitKLoop): 64x64 tiles split from 20 k-blocks (K = 1280), not at 19."""
    def v10_64x64(k):
        return for_shape(256, 256, k, tile=(64, 64, 64), cluster=2, min_gain_pct=10, parallel_fixup=True)

    assert not v10_64x64(1216).split and not v10_64x64(1024).split
    assert v10_64x64(1280).split and v10_64x64(2048).split
    assert workspace_bytes(v10_64x64(1024)) == 0
    # without the bound the rule would cut K = 1024 over the clusters
    assert partition(4, 16, 66, 10, parallel_fixup=True, hbm_segments=9, slot_float4s=8).split


def test_rule_on_the_shapes_it_is_for():
    # 2 tiles of 128x256 (one cluster tile): 11 segments of 23-24 k-blocks instead of 256 on one cluster
    p = for_shape(256, 256, 16384)
    assert (p.workers, p.dp_tiles, len(p.segments(0))) == (11, 0, 11)
    # whole waves stay whole: 4160^3 has 289 cluster tiles = 4 x 66 + 25; the last 25 + 66 are split
    p = for_shape(4160, 4160, 4160)
    assert (p.workers, p.dp_tiles) == (66, 198)
    assert max(sum(hi - lo for _, lo, hi in p.units_of(w)) for w in range(66)) == 285  # v8: 5 tiles = 325
    # tiles that fill whole waves, or splits that do not pay: every tile whole
    assert not for_shape(2048, 2048, 2048).split and not for_shape(128, 128, 64).split
    assert not partition(132, 64, 66).split


def test_deterministic():
    assert for_shape(4160, 4160, 4160) == for_shape(4160, 4160, 4160)


def test_workspace_size():
    assert workspace_bytes(for_shape(2048, 2048, 2048)) == 0
    p = for_shape(256, 256, 16384)
    assert workspace_bytes(p) == 1024 + 11 * 4 * 64 * 256 * 4


@pytest.fixture(scope="module")
def v9():
    from gemmtrace.build import build
    from gemmtrace.launch import KernelLibrary

    lib = KernelLibrary(build("v9").library, "v9")
    fn = lib._lib.gt_stream_k_units
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int32), ctypes.c_int]
    return lib, fn


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("sms", [132, 114])
def test_kernel_partition_matches_the_model(v9, shape, sms):
    lib, fn = v9
    args = lib.args(*shape, num_sms=sms)
    plan = lib.plan(args)
    p = for_shape(*shape, sms=sms)
    assert plan.grid_ctas == 2 * p.workers
    assert plan.workspace_bytes == workspace_bytes(p)
    buf = (ctypes.c_int32 * 3 * 64)()
    for w in range(p.workers):
        n = fn(ctypes.addressof(args), w, ctypes.cast(buf, ctypes.POINTER(ctypes.c_int32)), 64)
        want = p.units_of(w)
        assert n == len(want)
        got = [tuple(buf[i]) for i in range(min(n, 64))]
        assert got == want[:64], (w, got, want)


def test_other_kernels_need_no_workspace(v9):
    from gemmtrace.build import build
    from gemmtrace.launch import KernelLibrary

    lib = KernelLibrary(build("v8").library, "v8")
    assert lib.plan(lib.args(256, 256, 16384, num_sms=132)).workspace_bytes == 0
