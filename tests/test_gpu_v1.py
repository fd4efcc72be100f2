"""On an sm_90a GPU: v1 is correct and its trace is well formed (skipped without one)."""
import math

import numpy as np
import pytest

from gemmtrace.runner import RunOptions, run_kernel

pytestmark = pytest.mark.gpu

SHAPES = [(128, 128, 64), (4096, 4096, 4096), (8192, 8192, 8192), (1000, 1500, 520)]


@pytest.fixture(scope="module")
def v1_runs():
    # check=True compares the profiled and unprofiled builds to the fp32 reference (poisoned output).
    return {s: run_kernel(RunOptions("v1", s, time=False))[0] for s in SHAPES}


@pytest.mark.parametrize("shape", SHAPES)
def test_v1_correct_profiled_and_plain(v1_runs, shape):
    r = v1_runs[shape]
    assert r.rel_error_plain is not None and r.rel_error_plain < 1e-2
    assert r.rel_error_profiled is not None and r.rel_error_profiled < 1e-2


@pytest.mark.parametrize("shape", SHAPES)
def test_v1_trace_is_well_formed(v1_runs, shape):
    r = v1_runs[shape]
    s = r.run.spans
    m, n, k = shape
    tiles = math.ceil(m / 128) * math.ceil(n / 128)
    num_kb = math.ceil(k / 64)
    assert r.dropped == 0 and r.run.meta["profiler"]["incomplete_regions"] == 0
    assert (s["end_ns"] >= s["start_ns"]).all()
    assert s["start_ns"].min() == 0
    # Every span lies inside the launch: the trace is no longer than the launch timed by CUDA events
    # (plus the timer's 32 ns step and launch skew).
    window_ns = r.run.meta["profiler"]["traced_launch_ms"] * 1e6
    assert s["end_ns"].max() <= window_ns + 2000
    mma = s[s["tag"] == "mma"]
    assert len(mma) == tiles * num_kb
    per_tile = mma.groupby("tile")["kblock"].agg(["count", "nunique", "min", "max"])
    assert len(per_tile) == tiles
    assert (per_tile["count"] == num_kb).all() and (per_tile["nunique"] == num_kb).all()
    assert (per_tile["min"] == 0).all() and (per_tile["max"] == num_kb - 1).all()
    epi = s[s["tag"] == "epilogue"]
    assert sorted(epi["tile"]) == list(range(tiles))
    assert s["sm"].max() < r.run.sm_count


def test_overflow_is_counted():
    r = run_kernel(RunOptions("v1", (512, 512, 512), time=False, buffer_scale=0.5))[0]
    # 16 CTAs x (2*8+2 = 18 attempted, 9 kept)
    assert r.dropped == 16 * 9 and len(r.run.spans) == 16 * 9
