"""v10's tile family and rule, and `--kernel best`, on the CPU: the library is compiled with nvcc and
its host-side rule (gt_plan, gt_tile_family, gt_stream_k_units) is called without a GPU."""
from __future__ import annotations

import ctypes
import math
import shutil

import pytest

from gemmtrace import GemmtraceError, registry
from gemmtrace.registry import tile_name
from gemmtrace.stream_k import for_v10

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build v10")


@pytest.fixture(scope="module")
def v10():
    from gemmtrace.build import build
    from gemmtrace.launch import KernelLibrary

    return KernelLibrary(build("v10").library, "v10")


def test_registry_lists_the_library_family(v10):
    family = v10.tile_family()
    assert [tile_name(bm, bn, c, s) for (bm, bn, c, _stages, s), _ in family] == list(registry.get("v10").tiles)


@pytest.mark.parametrize("variant", range(1, len(registry.get("v10").tiles) + 1))
def test_a_forced_tile_is_the_one_planned(v10, variant):
    (bm, bn, cluster, stages, split_k), _ = v10.tile_family()[variant - 1]
    p = v10.plan(v10.args(1000, 1496, 520, num_sms=132, variant=variant))
    assert (p.tile_m, p.tile_n, p.cluster, p.stages, p.split_k, p.variant) == (bm, bn, cluster, stages, split_k, variant)
    assert p.smem_bytes <= 227 * 1024


def test_bad_variant_is_one_sentence(v10):
    with pytest.raises(GemmtraceError, match="v10 has tiles 1 to 12"):
        v10.plan(v10.args(256, 256, 256, variant=13))


def _choice(v10, m, n, k, sms=132):
    p = v10.plan(v10.args(m, n, k, num_sms=sms))
    return tile_name(p.tile_m, p.tile_n, p.cluster, p.split_k), p


def test_rule_follows_the_shape_not_a_list(v10):
    # M of 64: 64-row tiles, and no cluster of two along M of tiles with B halves wider than 64
    # columns (the second CTA would have no rows; with 64x64/c2 it still loads half of each B panel).
    for n in (4096, 8192, 12288, 2000):
        name, p = _choice(v10, 64, n, 4096)
        assert p.tile_m == 64 and (p.cluster == 1 or name == "64x64/c2"), name
    # Large squares and big model shapes fill many waves: the largest tile in clusters of two.
    for shape in [(8192, 8192, 8192), (16384, 16384, 16384), (12288, 12288, 4096), (4096, 28672, 8192)]:
        assert _choice(v10, *shape)[0] == "128x256/c2", shape
    # Few tiles: a smaller tile and stream-K, never the 128x256 tile alone on a few SMs.
    name, p = _choice(v10, 256, 256, 16384)
    assert name != "128x256/c2" and p.workspace_bytes > 0
    # The rule is the argmin of the costs it reports (within its 2 % preference for tiles earlier in its
    # order: 192x192/c2, then the family's list).
    tiles = registry.get("v10").tiles
    preference = [tiles.index("192x192/c2")] + [i for i in range(len(tiles)) if tiles[i] != "192x192/c2"]
    for shape in [(256, 256, 16384), (8192, 128, 8192), (3000, 5000, 704), (777, 9000, 12000), (3072, 3072, 3072),
                  (4160, 4160, 4160)]:
        costs = [c for _t, c in v10.tile_family(v10.args(*shape, num_sms=132))]
        chosen = v10.plan(v10.args(*shape, num_sms=132)).variant - 1
        assert costs[chosen] <= min(costs) / 0.98 + 1e-9, (shape, costs, chosen)
        earlier = preference[:preference.index(chosen)]
        assert all(costs[i] >= costs[chosen] * 0.98 - 1e-9 for i in earlier), (shape, costs, chosen)


def test_64x64_tiles_where_they_make_one_wave_of_whole_tiles(v10):
    """Tiles 9 and 10 are weighed on every shape (docs/kernels.md) and win where 128 of them fill one
    wave and larger tiles would split a long K; on large grids they are the slowest tiles per flop.
    Tiles taller than M (or wider than N) are not weighed."""
    small = [i for i, t in enumerate(registry.get("v10").tiles) if t.startswith("64x64/")]
    assert len(small) == 2
    for shape in [(512, 1024, 8192), (4096, 4096, 4096)]:
        assert all(math.isfinite(c) for _t, c in v10.tile_family(v10.args(*shape, num_sms=132)))
    for m, n in [(64, 12288), (8192, 64)]:  # only the 64-row (64-wide) tiles fit
        for (bm, bn, cl, _st, _k), c in v10.tile_family(v10.args(m, n, 4096, num_sms=132)):
            pair_with_no_rows = (bm, bn, cl) == (64, 128, 2) and m <= 64  # 64x128/c2 (test below)
            assert math.isfinite(c) == (bm <= m and bn <= max(n, 64) and not pair_with_no_rows), (m, n, bm, bn, c)
    # 128 whole tiles in one wave: clusters of two along M where there are several tile rows, clusters
    # of one where M is 64 (one row of tiles).
    assert _choice(v10, 512, 1024, 4096)[0] == "64x64/c2"
    assert _choice(v10, 8192, 64, 8192)[0] == "64x64/c2"
    # From K = 8192 the serial split counts 1.2 times against the parallel fix-up, and 512x1024x8192's
    # 128x128/c2 tiles cut in four (one round trip each) cost less than 64x64/c2 whole (23.1-23.5
    # against 25.7-26.2 us on the H100).
    assert _choice(v10, 512, 1024, 8192)[0] == "128x128/c2"
    assert _choice(v10, 64, 8192, 4096)[0] == "64x64/c1"
    # Fewer tiles than clusters, every tile cut for the parallel fix-up: a 64x64 tile's partials are a
    # quarter of a 128x128 tile's bytes to write and read back, and its segments are capped at what
    # HBM feeds either way.
    assert _choice(v10, 256, 256, 16384)[0] == "64x64/c2"
    for shape in [(4096, 4096, 4096), (2048, 2048, 2048), (8192, 8192, 4096)]:
        assert v10.plan(v10.args(*shape, num_sms=132)).variant - 1 not in small


def test_gpu_tests_reach_the_one_trip_reduce(v10):
    """tests/test_gpu_kernels.py's V10_RULE_SHAPES exist to run the parallel fix-up's one-round-trip
    sum (stream_k.cuh, in_one_trip: 64x64 tiles with 8 and 4 segments a tile, 128x128 tiles with 4):
    they still do."""
    from test_gpu_kernels import V10_RULE_SHAPES

    picks = []
    for shape in V10_RULE_SHAPES:
        p = v10.plan(v10.args(*shape, order="snake", num_sms=132))
        # the library's own units, checked against the mirror, so the segments counted are the kernel's
        picks.append((p.tile_m, p.tile_n, _check_partition_against_the_mirror(v10, shape, "snake").parallel))
    assert picks == [(64, 64, 8), (64, 64, 4), (128, 128, 4), (128, 128, 4)]


def test_192x192_where_it_makes_whole_waves(v10):
    """Tile 12 (192x192/c2) is weighed first: it runs where it fills whole waves that 128x256 and
    128x192 tiles leave partial (3072^3: 128 cluster tiles on 66 clusters against 192 of 128x192;
    4160^3), and not on squares whose 128x256 tiles already make whole waves, which it would pad
    (4096^3, 8192^3: 21.3 and 42.7 tiles a side)."""
    for shape in [(3072, 3072, 3072), (4160, 4160, 4160), (3000, 2904, 3000)]:
        assert _choice(v10, *shape)[0] == "192x192/c2", shape
    for shape in [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 2048), (6144, 6144, 1096), (16384, 16384, 16384)]:
        assert _choice(v10, *shape)[0] != "192x192/c2", shape
    # It is taller than 128 rows: not weighed where M (rounded up to 64) is below 192.
    assert not math.isfinite(v10.tile_family(v10.args(128, 8192, 4096, num_sms=132))[11][1])
    # Under the snake order (`best`) its grids of three or more whole waves split their last partial
    # wave where that pays, as 128x256/c2's do: 4160^3's 242 cluster tiles are 3 waves and 44.
    from gemmtrace.choose import choose

    c = choose((4160, 4160, 4160), lib=v10)
    assert c.tile == "192x192/c2" and c.split and c.kernel == "v10" and "last tiles" in c.reason
    assert not choose((3072, 3072, 3072), lib=v10).split  # 1.94 waves: fewer than three


def test_no_pairs_whose_second_cta_has_no_rows(v10):
    """A tile of 128 rows or more in a cluster of two is not weighed where M <= its rows: the second
    CTA would have none (docs/kernels.md). At 128x1536x16384 128x128/c1 ran 32.1 us against 39.7 for
    the pair on the H100. 64x64 pairs at M <= 64 are weighed only where their tiles run whole (the
    idle partner still loads half of B); where they split, 64x64/c1 runs instead (64x1024x2048 9.3
    against 10.1 us). 128-row pairs above M = 128 are weighed as before."""
    tiles = registry.get("v10").tiles
    pair, single = tiles.index("64x64/c2"), tiles.index("64x64/c1")
    for m, n, k in [(128, 1536, 16384), (80, 768, 24576), (128, 512, 32768), (100, 4096, 4096)]:
        for (bm, _bn, cl, _st, sk), c in v10.tile_family(v10.args(m, n, k, num_sms=132)):
            if cl == 2 and sk == 1 and bm >= 128:
                assert not math.isfinite(c), (m, n, k, bm, c)
        assert _choice(v10, m, n, k)[0] not in ("128x128/c2", "128x256/c2", "128x192/c2", "256x128/c2", "192x192/c2")
    assert _choice(v10, 128, 1536, 16384)[0] == "128x128/c1"
    assert math.isfinite(v10.tile_family(v10.args(136, 1536, 16384, num_sms=132))[tiles.index("128x128/c2")][1])
    assert math.isfinite(v10.tile_family(v10.args(200, 8192, 4096, num_sms=132))[tiles.index("192x192/c2")][1])
    # 64x64 pairs at M <= 64: whole tiles in one wave keep the pair; split tiles go to single CTAs.
    for m in (16, 64):
        name, p = _choice(v10, m, 4096, 1024)
        assert name == "64x64/c2" and p.workspace_bytes == 0, (m, name)
        costs = [c for _t, c in v10.tile_family(v10.args(m, 1024, 2048, num_sms=132))]
        assert not math.isfinite(costs[pair]) and math.isfinite(costs[single])
        assert _choice(v10, m, 1024, 2048)[0] == "64x64/c1"
    assert math.isfinite(v10.tile_family(v10.args(65, 1024, 2048, num_sms=132))[pair][1])  # two rows of tiles


def test_short_k_loops_run_whole(v10):
    """No split where a tile's whole k-loop is under 2.5 k-blocks of 128x256 work (docs/kernels.md):
    the library's partition (checked against the mirror) keeps 64x64 tiles whole at K = 1024 and
    splits them at K = 2048. At 160x1280x1088 whole tiles ran 29 % faster on an H200."""
    for shape in [(160, 1280, 1024), (256, 256, 1024), (64, 64, 1024), (896, 96, 768)]:
        p = _check_partition_against_the_mirror(v10, shape, "snake")
        assert not p.split, shape
        assert v10.plan(v10.args(*shape, order="snake", num_sms=132)).workspace_bytes == 0
    assert _check_partition_against_the_mirror(v10, (256, 256, 2048), "snake").split


def test_64x128_pairs_only_where_measured(v10):
    """Tile 11 (64x128/c2) is weighed only with M above 64 and K from 2048 to 8192 (docs/kernels.md);
    there it wins where 64-row tiles fill a wave with little or no split: at 512x2048x4096 (21.3
    against 24.2 us for 128x128/c1 on the H100)."""
    i = registry.get("v10").tiles.index("64x128/c2")
    for shape in [(64, 8192, 4096), (512, 2048, 1024), (512, 2048, 16384), (4096, 256, 1024)]:
        assert not math.isfinite(v10.tile_family(v10.args(*shape, num_sms=132))[i][1]), shape
    for shape in [(128, 8192, 2048), (512, 2048, 4096), (8192, 128, 8192)]:
        assert math.isfinite(v10.tile_family(v10.args(*shape, num_sms=132))[i][1]), shape
    assert _choice(v10, 512, 2048, 4096)[0] == "64x128/c2"
    assert _choice(v10, 512, 1024, 4096)[0] == "64x64/c2"  # 128 whole 64x64 tiles: one wave, no split


def test_fewer_sms_can_change_the_choice_but_never_break_it(v10):
    for sms in (132, 114, 78, 16, 2):
        for shape in [(256, 256, 16384), (64, 8192, 4096), (4096, 4096, 4096)]:
            p = v10.plan(v10.args(*shape, num_sms=sms))
            assert 1 <= p.grid_ctas <= sms and p.grid_ctas % p.cluster == 0


@pytest.mark.parametrize("shape", [(256, 256, 16384), (64, 8192, 4096), (8192, 128, 8192), (4160, 4160, 4160),
                                   (3072, 3072, 3072), (4096, 4096, 4096), (333, 1032, 712)],
                         ids=lambda s: "x".join(map(str, s)))
def test_kernel_partition_matches_the_model_at_ten_percent(v10, shape):
    """v10 splits only for a 10 % gain; the Python mirror with min_gain_pct=10 agrees unit for unit."""
    _check_partition_against_the_mirror(v10, shape, "row")


# (shape, whether v10's rule splits its last partial wave there under the snake order)
TAIL_SHAPES = [((8192, 8192, 8192), True), ((8192, 8192, 4096), True), ((4096, 11008, 8192), True),
               ((4096, 4096, 4096), False), ((4096, 4096, 14336), False), ((8192, 8192, 16384), False),
               ((12288, 12288, 4096), False), ((3072, 3072, 3072), False),
               ((4160, 4160, 4160), True), ((4160, 8192, 8192), True)]  # the last two: 192x192/c2


@pytest.mark.parametrize("shape,splits", TAIL_SHAPES, ids=lambda s: "x".join(map(str, s)) if isinstance(s, tuple) else str(s))
def test_tail_split_matches_the_model_under_the_snake_order(v10, shape, splits):
    """Under the snake order v10 splits only the last partial wave where the tail's operands fit in
    L2 (or nearly) and the estimate gains: 8192^3 yes, 4096^3 (8 idle clusters of 66) and the long-K
    shapes (A and B panels past L2) no. The mirror agrees unit for unit; row order never splits them."""
    p = _check_partition_against_the_mirror(v10, shape, "snake")
    assert p.split == splits and (not splits or (p.units - p.dp_tiles < p.workers and p.dp_tiles >= 3 * p.workers))
    assert not _check_partition_against_the_mirror(v10, shape, "row").split


def _check_partition_against_the_mirror(v10, shape, order):
    p_plan = v10.plan(v10.args(*shape, order=order, num_sms=132))
    ws = for_v10(*shape, p_plan.tile_m, p_plan.tile_n, p_plan.cluster, p_plan.split_k, sms=132, order=order)
    p = ws.partition
    assert p_plan.grid_ctas == ws.cluster_ctas * p.workers
    assert p_plan.workspace_bytes == ws.workspace_bytes()
    fn = v10._lib.gt_stream_k_units
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int32), ctypes.c_int]
    args = v10.args(*shape, order=order, num_sms=132)
    buf = (ctypes.c_int32 * 3 * 64)()
    for w in range(p.workers):
        n = fn(ctypes.addressof(args), w, ctypes.cast(buf, ctypes.POINTER(ctypes.c_int32)), 64)
        want = p.units_of(w)
        assert n == len(want)
        assert [tuple(buf[i]) for i in range(min(n, 64))] == want[:64]
    return p


def test_best_says_what_it_chose_and_why(v10):
    from gemmtrace.choose import choose

    c = choose((64, 8192, 4096), lib=v10)
    assert c.kernel == "v10" and c.tile == registry.get("v10").tiles[c.variant - 1] and "/c2" not in c.tile
    assert c.tile in c.reason and c.reason.endswith(".")
    big = choose((8192, 8192, 8192), lib=v10)
    assert big.tile == "128x256/c2" and big.split and "last tiles" in big.reason  # the tail split
    assert big.kernel == "v10" and big.scheduler == "static" and big.order == "snake" and big.label().startswith("v10")
    # 128x256/c2 whole: v8's tile and kernel body, run with its dynamic scheduler
    whole = choose((4096, 4096, 4096), lib=v10)
    assert not whole.split and whole.tile == "128x256/c2" and (whole.kernel, whole.scheduler, whole.variant) == ("v8", "dynamic", 0)
    assert "dynamic scheduling" in whole.label() and "dynamic scheduler" in whole.reason
    with pytest.raises(GemmtraceError, match="multiple of 8"):
        choose((256, 256, 100), lib=v10)


def test_the_docs_state_the_rule_the_kernel_runs():
    """docs/kernels.md quotes v10's constants: fail when the kernel's change and the docs do not."""
    import re

    from gemmtrace.paths import KERNELS_DIR

    src = (KERNELS_DIR / "sm90" / "v10_tile_family.cu").read_text()
    sk = (KERNELS_DIR / "sm90" / "stream_k.cuh").read_text()
    doc = (KERNELS_DIR.parent.parent / "docs" / "kernels.md").read_text()
    gain = re.search(r"kMinSplitGainPct = (\d+);", src).group(1)
    split_cost = re.search(r"kSplitKBlockCost = ([\d.]+);", src).group(1)
    thr = re.search(r"kThroughput\[kFamily\] = \{([^}]*)\}", src).group(1)
    par = re.search(r"kParallelFixupKBlocks = (\d+);", sk).group(1)
    assert f"**{gain} %**" in doc and f"**{float(split_cost):g} times**" in doc and f"as {par} k-blocks" in doc
    spread = re.search(r"kSpreadMinKBlocks = (\d+);", sk).group(1)
    serial_cost = re.search(r"kSerialSplitKBlockCost = ([\d.]+);", sk).group(1)
    assert f"**{spread} k-blocks**" in doc and f"**{float(serial_cost):g} times** in this comparison" in doc
    short_min = re.search(r"kShortSpreadMinKBlocks = (\d+);", sk).group(1)
    short_cost = re.search(r"kShortSpreadKBlockCost = ([\d.]+);", sk).group(1)
    assert f"**{short_min} to {int(spread) - 1} k-blocks**" in doc and f"**{float(short_cost):g} times**" in doc
    fixed = re.search(r"kParallelFixupFixedKBlocks = ([\d.]+);", src).group(1)
    per_mb = float(re.search(r"kPartialBytesPerKBlock = ([\d.e]+);", src).group(1)) / 1e6
    assert f"**{float(fixed):g} k-block times** fixed" in doc and f"**{per_mb:g} MB** of partials" in doc
    assert ", ".join(t.strip() for t in thr.split(",")) in doc.replace(" and ", ", ")
    store, read, tail_gain = re.search(
        r"kTailStoreKBlocks = (\d+), kTailReadKBlocks = (\d+), kTailMinGainPct = (\d+)", sk).groups()
    slow = re.search(r"bytes <= kL2Bytes \? ([\d.]+) :", sk).group(1)
    assert f"**{tail_gain} %**" in doc and f"**{store} k-blocks**" in doc and f"back at **{read}**" in doc
    assert f"**{float(slow):g} times**" in doc
    for tile in registry.get("v10").tiles:
        bm_bn = tile.split("/")[0]
        assert bm_bn in doc
