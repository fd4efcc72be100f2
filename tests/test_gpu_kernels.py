"""On an sm_90a GPU: every Hopper kernel is correct (profiled and plain) and its trace is well formed
(skipped without one)."""
import math
import subprocess
import sys

import pytest

from gemmtrace import GemmtraceError, registry
from gemmtrace.runner import RunOptions, run_kernel

pytestmark = pytest.mark.gpu

KERNELS = [k.name for k in registry.for_arch("sm90a")]


def shapes_for(spec):
    odd_n = 1500 if spec.n_multiple == 1 else 1496  # not a multiple of any tile
    return [(128, 128, 64), (4096, 4096, 4096), (8192, 8192, 8192), (2048, 6144, 1024), (1000, odd_n, 520)]


def cases():
    """Every kernel on every shape with its default schedule; kernels with several schedulers or
    tile orders also on every (scheduler, order) combination, on the shapes that are not 8192^3."""
    out = []
    for k in KERNELS:
        spec = registry.get(k)
        for shape in shapes_for(spec):
            combos = [(sch, o) for sch in spec.schedulers for o in spec.orders]
            if shape == (8192, 8192, 8192):
                combos = combos[:1]
            out += [(k, shape, sch, o) for sch, o in combos]
    return out


CASES = cases()
IDS = [f"{k}-{'x'.join(map(str, s))}-{sch}-{o}" for k, s, sch, o in CASES]


@pytest.fixture(scope="module")
def runs():
    cache = {}

    def get(kernel, shape, sched, order):
        key = (kernel, shape, sched, order)
        if key not in cache:
            # check=True compares the profiled and plain builds with the fp32 reference on poisoned output.
            cache[key] = run_kernel(RunOptions(kernel, shape, schedulers=(sched,), order=order, time=False))[0]
        return cache[key]

    return get


@pytest.mark.parametrize("kernel,shape,sched,order", CASES, ids=IDS)
def test_correct_profiled_and_plain(runs, kernel, shape, sched, order):
    r = runs(kernel, shape, sched, order)
    assert r.rel_error_plain is not None and r.rel_error_plain < 1e-2
    assert r.rel_error_profiled is not None and r.rel_error_profiled < 1e-2


@pytest.mark.parametrize("kernel,shape,sched,order", CASES, ids=IDS)
def test_trace_is_well_formed(runs, kernel, shape, sched, order):
    r = runs(kernel, shape, sched, order)
    spec = registry.get(kernel)
    s = r.run.spans
    m, n, k = shape
    launch = r.run.meta["launch"]
    bm, bn, bk = launch["tile"]  # the tile that ran (v10 picks one per shape)
    grid_m = math.ceil(m / bm)
    grid_m = math.ceil(grid_m / launch["cluster"]) * launch["cluster"]  # clusters pad the grid
    tiles = grid_m * math.ceil(n / bn)
    num_kb = math.ceil(k / bk)
    # warp-specialized kernels: two consumer warpgroups compute, except on v10's 64x64 tiles (one)
    consumers = 2 if "producer" in spec.roles and (bm, bn) != (64, 64) else 1
    assert r.dropped == 0 and r.run.meta["profiler"]["incomplete_regions"] == 0
    assert (s["end_ns"] >= s["start_ns"]).all() and s["start_ns"].min() == 0
    # Every span lies inside the launch timed by CUDA events (plus the timer's step and launch skew).
    assert s["end_ns"].max() <= r.run.meta["profiler"]["traced_launch_ms"] * 1e6 + 2000
    assert s["sm"].max() < r.run.sm_count
    mma = s[s["tag"] == "mma"]
    per_tile = mma.groupby("tile", observed=True)["kblock"].agg(["count", "nunique", "min", "max"])
    assert len(per_tile) == tiles
    if spec.kblock_spans:  # one MMA span per k-block per tile (per consumer)
        assert len(mma) == tiles * num_kb * consumers
        assert (per_tile["count"] == num_kb * consumers).all() and (per_tile["nunique"] == num_kb).all()
        assert (per_tile["min"] == 0).all() and (per_tile["max"] == num_kb - 1).all()
    else:  # one MMA span per unit (a whole tile, or a stream-K segment, named by its first k-block) per consumer
        assert (per_tile["count"] == per_tile["nunique"] * consumers).all()
        assert (per_tile["min"] == 0).all() and (per_tile["max"] < num_kb).all()
        if not r.run.meta["launch"].get("workspace_bytes"):
            assert len(mma) == tiles * consumers
    epi = s[s["tag"] == "epilogue"]
    # Every tile finished exactly once: one epilogue span per tile and consumer warpgroup, except the
    # tiles that v10's parallel fix-up stores as slices, one reduce span per segment (two at least).
    epi_count = epi.groupby("tile", observed=True).size()
    assert (epi_count == consumers).all()
    sliced = sorted(set(range(tiles)) - set(epi_count.index))
    if sliced:
        reduce = s[s["tag"] == "reduce"].groupby("tile", observed=True).size()
        assert all(reduce.get(t, 0) >= 2 * consumers for t in sliced)
    if sched == "dynamic":
        # Each CTA's producer records the claim of every tile it ran (rank 0 claims, rank 1 receives
        # it through the cluster) and the final empty claim that ended its loop.
        claims = s[s["tag"] == "sched_claim"]
        assert sorted(claims.loc[claims["tile"] >= 0, "tile"]) == list(range(tiles))
        assert (claims["tile"] < 0).sum() == r.run.meta["launch"]["grid_ctas"]
    # One warp's spans never overlap a later span of the same tag (MMA spans are clipped, see v3).
    for _, g in mma.groupby("region", observed=True):
        st, en = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
        assert (st[1:] >= en[:-1]).all()
    if "producer" in spec.roles:
        prod = s[(s["role"] == "producer") & (s["tag"] == "tma_issue")]
        if spec.kblock_spans:
            assert len(prod) == tiles * num_kb
        else:  # one issue span per unit, with the same units as the MMA spans
            units = lambda f: sorted(zip(f["tile"].astype(int), f["kblock"].astype(int)))
            assert units(prod) == sorted(set(units(mma)))


@pytest.mark.parametrize("sched", ["static", "dynamic"])
def test_no_records_dropped_at_16384(sched):
    r = run_kernel(RunOptions("v8", (16384, 16384, 16384), schedulers=(sched,), order="hilbert", time=False))[0]
    assert r.dropped == 0 and r.rel_error_plain < 1e-2


@pytest.mark.parametrize("shape,kernel", [((3485, 2160, 1248), "v8"), ((256, 256, 16384), "v10")], ids=["v8-dynamic", "v10-stream-k"])
def test_best_runs_what_it_chose_correctly(shape, kernel):
    from gemmtrace.choose import best_options

    opts, choice = best_options(shape, time=False)
    assert choice.kernel == kernel
    assert (opts.kernel, opts.schedulers, opts.variant) == (choice.kernel, (choice.scheduler,), choice.variant)
    r = run_kernel(opts)[0]
    assert r.scheduler == choice.scheduler
    assert r.rel_error_plain is not None and r.rel_error_plain < 1e-2
    assert r.rel_error_profiled is not None and r.rel_error_profiled < 1e-2


def test_dynamic_counter_resets_itself():
    """Back-to-back dynamic launches (timing runs many) stay correct: the counter resets in-kernel."""
    r = run_kernel(RunOptions("v8", (2048, 2048, 512), schedulers=("dynamic",), iters=20, warmup=2))[0]
    assert r.rel_error_plain < 1e-2 and r.kernel_ms > 0


# More cluster tiles than clusters (claims granted and refused), as many (every claim refused), one;
# tiles of fewer k-blocks than the claim's lead (asked for at their first k-block: 2 and 5 k-blocks).
@pytest.mark.parametrize("shape", [(4096, 4096, 512), (4160, 1496, 520), (2048, 2048, 512), (256, 256, 1024),
                                   (4096, 4096, 128), (4096, 2048, 320)])
def test_dynamic_counter_is_zero_after_each_launch(libs, shape):
    """The cluster that draws the last claim zeroes the counter: after every launch it reads 0, and
    a launch that found it dirty would compute nothing (its first claim refused) and leave C as NaN."""
    import torch

    lib = libs("v8")
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(2)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16)
    counter = torch.zeros(2, device="cuda", dtype=torch.int32)
    ref = a.float() @ b.float().T
    for _ in range(3):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        lib.launch(lib.args(m, n, k, a=a.data_ptr(), b=b.data_ptr(), c=c.data_ptr(), sched="dynamic",
                            tile_counter=counter.data_ptr(), stream=torch.cuda.current_stream().cuda_stream,
                            num_sms=torch.cuda.get_device_properties(0).multi_processor_count))
        torch.cuda.synchronize()
        assert counter.tolist() == [0, 0]
        rel = (torch.linalg.vector_norm(c.float() - ref) / torch.linalg.vector_norm(ref)).item()
        assert rel < 1e-2, rel


def test_traced_launch_reads_the_least_recently_used_inputs():
    """The traced launch stands for the timed ones: it reads the input set the timed launches used
    longest ago (operands in DRAM, as theirs were), not the one the last timed launch left in L2."""
    opts = RunOptions("v8", (2048, 2048, 512), iters=20, warmup=2)
    r = run_kernel(opts)[0]
    traced, sets = r.run.meta["profiler"]["traced_input_set"]
    redone = r.run.meta["timings"]["diagnostics"]["hold_timeouts"]  # a redone round takes fresh indices
    launches = (opts.warmup + opts.iters + redone) * 3  # cuBLAS, the plain and the profiled build, every round
    assert sets >= 2 and traced == launches % sets


def test_overflow_is_counted():
    r = run_kernel(RunOptions("v1", (512, 512, 512), time=False, buffer_scale=0.5))[0]
    # 16 CTAs x (2*8+2 = 18 attempted, 9 kept)
    assert r.dropped == 16 * 9 and len(r.run.spans) == 16 * 9


@pytest.mark.parametrize("kernel", [k for k in KERNELS if registry.get(k).n_multiple == 8])
def test_shapes_it_cannot_do_are_refused(kernel):
    with pytest.raises(GemmtraceError, match="multiple of 8"):
        run_kernel(RunOptions(kernel, (256, 1500, 256), time=False))


@pytest.mark.parametrize("kernel", KERNELS)
def test_debug_build_reports_a_hang_instead_of_hanging(kernel):
    """A deliberately broken launch (the producer drops its first load) stops with one sentence naming
    the waiting role, SM, barrier and tile. It runs in a subprocess: the trap ends the CUDA context."""
    out = subprocess.run([sys.executable, "-m", "gemmtrace", "run", "--kernel", kernel, "--shape", "256", "--debug",
                          "--inject-hang", "--no-export"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    err = out.stderr.strip()
    assert err.startswith("error:") and "hung" in err and "barrier 0" in err and "k-block 0" in err, err


# v9 (stream-K), launched directly through its library with its workspace, so these tests do not
# depend on the run harness: correct on few-tile, tail-wave and ragged shapes, bitwise identical
# from launch to launch, and the workspace's flags left clear for the next launch.
V9_SHAPES = [(256, 256, 16384), (512, 1024, 8192), (64, 8192, 4096), (4160, 4160, 4160), (8192, 128, 8192),
             (1000, 1000, 1000), (333, 1032, 712)]
# v10: every tile of its family forced, on shapes that split (few tiles, long K) and shapes that are
# not multiples of any tile; plus the rule's own choice on the v9 shapes.
# (64, 128, 16384) is one tile: with clusters of one, 132 segments reduce it, more than a warpgroup's threads.
# (512, 640, 16384): few segments a tile, which keep their own slices (the rule's 128x128/c2: six).
V10_SHAPES = [(256, 256, 16384), (64, 8192, 4096), (64, 128, 16384), (1000, 1496, 520), (333, 1032, 712), (4160, 4160, 4160),
              (512, 640, 16384)]
# The rule's choice where the parallel fix-up sums each thread's share in one round trip (64x64/c2
# with 8 and 4 segments a tile, 128x128/c2 with 4), on shapes that are not multiples of the tile or
# of 64 in K; the last with 128 k-blocks, where the serial split counts 1.2 times against it.
V10_RULE_SHAPES = [(250, 248, 16008), (100, 1000, 16392), (504, 1016, 16008), (1016, 504, 8184)]
STREAM_K_CASES = ([("v9", 0, s) for s in V9_SHAPES] + [("v10", 0, s) for s in V9_SHAPES + V10_RULE_SHAPES]
                  + [("v10", v, s) for v in range(1, len(registry.get("v10").tiles) + 1) for s in V10_SHAPES])


@pytest.fixture(scope="module")
def libs():
    from gemmtrace.build import build
    from gemmtrace.launch import KernelLibrary

    cache = {}

    def get(kernel):
        if kernel not in cache:
            cache[kernel] = KernelLibrary(build(kernel).library, kernel)
        return cache[kernel]

    return get


@pytest.fixture(scope="module")
def v9_lib(libs):
    return libs("v9")


def _repeat_launches(torch, lib, shape, variant, ws, launches, seed):
    """Launch `launches` times on one set of random inputs, each into a NaN-poisoned C. Returns whether
    the first C left elements unwritten, its relative error against the fp32 reference, and how many
    later launches gave a C that differs bitwise from the first's."""
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=gen).to(torch.bfloat16)
    first, c, differing = None, torch.empty(m, n, device="cuda", dtype=torch.bfloat16), 0
    for _ in range(launches):
        c.fill_(float("nan"))
        _sk_launch(torch, lib, a, b, c, ws, variant)
        torch.cuda.synchronize()
        if first is None:
            first = c.clone()
        else:
            differing += int(not torch.equal(c.view(torch.int16), first.view(torch.int16)))
    ref = a.float() @ b.float().T
    rel = (torch.linalg.vector_norm(first.float() - ref) / torch.linalg.vector_norm(ref)).item()
    return bool(torch.isnan(first).any()), rel, differing


def _sk_launch(torch, lib, a, b, c, ws, variant=0):
    m, k = a.shape
    n = b.shape[0]
    args = lib.args(m, n, k, a=a.data_ptr(), b=b.data_ptr(), c=c.data_ptr(),
                    workspace=(ws.data_ptr() if ws is not None else None),
                    stream=torch.cuda.current_stream().cuda_stream, variant=variant,
                    num_sms=torch.cuda.get_device_properties(0).multi_processor_count)
    lib.launch(args)



@pytest.mark.parametrize("kernel,variant,shape", STREAM_K_CASES,
                         ids=[f"{k}-t{v}-{'x'.join(map(str, s))}" for k, v, s in STREAM_K_CASES])
def test_stream_k_correct_and_bitwise_reproducible(libs, kernel, variant, shape):
    import torch

    lib = libs(kernel)
    m, n, k = shape
    plan = lib.plan(lib.args(m, n, k, variant=variant, num_sms=torch.cuda.get_device_properties(0).multi_processor_count))
    ws = torch.zeros(plan.workspace_bytes, device="cuda", dtype=torch.uint8) if plan.workspace_bytes else None
    # no re-zeroing of the workspace between launches
    unwritten, rel, differing = _repeat_launches(torch, lib, shape, variant, ws, launches=3, seed=1)
    assert not unwritten
    assert rel < 1e-2, rel
    assert differing == 0, "two launches differ"
    if ws is not None:  # every flag (or count) consumed and cleared by the kernel
        flags = ws[: _flag_ints(kernel, plan, shape, torch.cuda.get_device_properties(0).multi_processor_count) * 4]
        assert int(flags.view(torch.int32).abs().sum().item()) == 0


# Tiles with an odd number of C panels a consumer (128x192: 3, 192x192: 9, 64x128: 1) pass one tile's last
# panel and the next tile's first through the same shared-memory buffer. With one k-block a tile the TMA
# store of the first could still be reading it when the second was written: before persistent_gemm.cuh's
# store_panel waited for it, 37 of 200 launches of 128x192/c2 at 4096x4096x64 on an H200 differed from the
# first (10 of 200 of 192x192/c2 at 4224x4224x64, 1 of 200 of 64x128/c1), none since, in 200 each.
ODD_PANEL_CASES = [("128x192/c2", (4096, 4096, 64)), ("192x192/c2", (4224, 4224, 64)), ("64x128/c1", (4096, 4096, 64))]


@pytest.mark.parametrize("tile,shape", ODD_PANEL_CASES, ids=[f"{t}-{'x'.join(map(str, s))}" for t, s in ODD_PANEL_CASES])
def test_one_k_block_tiles_bitwise_identical_over_many_launches(libs, tile, shape):
    import torch

    lib = libs("v10")
    variant = registry.get("v10").tiles.index(tile) + 1
    plan = lib.plan(lib.args(*shape, variant=variant, num_sms=torch.cuda.get_device_properties(0).multi_processor_count))
    assert registry.tile_name(plan.tile_m, plan.tile_n, plan.cluster, plan.split_k) == tile and not plan.workspace_bytes
    unwritten, rel, differing = _repeat_launches(torch, lib, shape, variant, None, launches=150, seed=2)
    assert not unwritten and rel < 1e-2, rel
    assert differing == 0, f"{differing} of 149 launches differ from the first"


def _flag_ints(kernel, plan, shape, sms):
    """The flags at the start of a stream-K workspace, from the Python mirror of the partition (which
    tests/test_stream_k.py and tests/test_v10.py check against the kernel's own)."""
    from gemmtrace.stream_k import flag_ints, for_shape, for_v10

    if kernel == "v9":
        return flag_ints(for_shape(*shape, sms=sms))
    return for_v10(*shape, plan.tile_m, plan.tile_n, plan.cluster, plan.split_k, sms=sms).flag_ints()


def test_v9_refuses_to_launch_without_its_workspace(v9_lib):
    import torch

    a = torch.zeros(256, 16384, device="cuda", dtype=torch.bfloat16)
    b = torch.zeros(256, 16384, device="cuda", dtype=torch.bfloat16)
    c = torch.zeros(256, 256, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(GemmtraceError, match="workspace"):
        _sk_launch(torch, v9_lib, a, b, c, None)
