"""The benchmark suite: named shape lists, skipping shapes a kernel refuses, progress lines, the CLI."""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gemmtrace import bench
from gemmtrace.paths import GemmtraceError

from cli_helpers import assert_one_sentence_error, gt


def test_suites():
    assert bench.SUITES["default"] == bench.DEFAULT_SHAPES
    shapes = bench.suite_shapes("shapes")
    assert shapes[:3] == [(256, 256, 16384), (512, 1024, 8192), (64, 8192, 4096)]
    assert (2048, 2048, 2048) in shapes and (4096, 28672, 8192) in shapes and (6144, 6144, 1096) in shapes
    assert shapes[-len(bench.DEFAULT_SHAPES):] == list(bench.DEFAULT_SHAPES)
    assert len(set(shapes)) == len(shapes) == 16
    with pytest.raises(GemmtraceError, match="unknown suite 'nope'; choose one of default, shapes"):
        bench.suite_shapes("nope")


def test_plan_refusal_names_the_reason():
    libs: dict = {}
    assert bench.plan_refusal("v8", (4096, 4096, 4096), ("static",), "row", libs) is None
    reason = bench.plan_refusal("v8", (4096, 4100, 4096), ("static",), "row", libs)
    assert reason and "N must be a multiple of 8" in reason and "4100" in reason
    assert "v8" in libs  # loaded once, reused for the next shape


def _fake_result(kernel, shape, sched):
    m, n, k = shape
    ms = 2 * m * n * k / 500e12 * 1e3  # 500 TFLOP/s
    t = {"kernel_ms": ms, "kernel_ms_p25": ms, "kernel_ms_p75": ms, "profiled_ms": ms * 1.01, "cublas_ms": ms * 0.98,
         "tflops": 500.0, "cublas_tflops": 510.2, "profiled_tflops": 495.0, "pct_of_cublas": 0.98, "profiler_overhead": 0.01,
         "method": "stream hold"}
    # the same under the names the runner is moving to (the reference need not be cuBLAS)
    t.update(reference_ms=t["cublas_ms"], reference_tflops=t["cublas_tflops"], pct_of_reference=t["pct_of_cublas"])
    run = types.SimpleNamespace(meta={"timings": t}, spans=[])
    return types.SimpleNamespace(run=run, scheduler=sched, rel_error_plain=1.7e-3, rel_error_profiled=1.7e-3, dropped=0)


def test_run_bench_skips_refused_shapes_and_reports_progress(monkeypatch, tmp_path):
    ran = []

    def fake_run_kernel(opts):
        ran.append((opts.kernel, opts.shape))
        return [_fake_result(opts.kernel, opts.shape, s) for s in opts.schedulers]

    monkeypatch.setattr(bench, "require_gpu", lambda spec: None)
    monkeypatch.setattr(bench, "run_kernel", fake_run_kernel)
    monkeypatch.setattr(bench, "device_meta", lambda torch: {"name": "Fake GPU"})
    monkeypatch.setattr(bench, "versions_meta", lambda torch: {})
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    lines, states = [], []
    shapes = [(4096, 4100, 4096), (2048, 2048, 2048)]
    rows, header = bench.run_bench(["v8"], shapes, ("static", "dynamic"), "hilbert", progress=lines.append,
                                   status=lambda msg, done, total: states.append((msg, done, total)), suite="custom")
    assert ran == [("v8", (2048, 2048, 2048))]  # the refused shape never reached the harness
    assert [r.shape for r in rows] == [(2048, 2048, 2048)] * 2 and {r.scheduler for r in rows} == {"static", "dynamic"}
    assert header["skipped"] == [{"kernel": "v8", "M": 4096, "N": 4100, "K": 4096,
                                  "reason": bench.plan_refusal("v8", (4096, 4100, 4096), ("static",), "hilbert", {})}]
    assert lines[0].startswith("[1/2] v8 4096x4100x4096: skipped (") and "N must be a multiple of 8" in lines[0]
    assert lines[1].startswith("[2/2] v8 2048x2048x2048 static: ") and "98.0% of cuBLAS" in lines[1]
    assert states == [("v8 4096x4100x4096", 0, 2), ("v8 2048x2048x2048", 1, 2), ("done", 2, 2)]
    monkeypatch.setattr(bench, "RESULTS_DIR", tmp_path)
    path = bench.save_bench(rows, header)
    saved = json.loads(path.read_text())
    assert path.name.endswith("-fake-gpu-v8-custom.json") and saved["suite"] == "custom"
    assert len(saved["rows"]) == 2 and saved["skipped"][0]["N"] == 4100


def test_cli_unknown_suite():
    assert_one_sentence_error(gt("bench", "--suite", "nope"), "unknown suite 'nope'")


def test_cli_bench_help_names_the_suite():
    out = gt("bench", "--help")
    assert out.returncode == 0 and "--suite" in out.stdout


def _bench_script(name: str):
    """bench/<name>.py loaded as a module (bench/ is not a package)."""
    path = Path(__file__).resolve().parent.parent / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bisect_profiler_substitutions_match_the_kernel():
    """bench/bisect_profiler.py makes its variants by replacing lines of persistent_gemm.cuh and
    stream_k.cuh as written. A kernel edit that reindents or rewords one of them would otherwise show
    only on a GPU, as the script's assertion; here it fails without one."""
    bp = _bench_script("bisect_profiler")
    texts = {"persistent": (bp.K / "persistent_gemm.cuh").read_text(), "stream_k": (bp.K / "stream_k.cuh").read_text()}
    for name, reps in bp.VARIANTS.items():
        edited = dict(texts)
        for where, old, new in reps:
            assert old in edited[where], f"variant {name}: not in {where}: {old!r}"
            edited[where] = edited[where].replace(old, new)
        assert (edited == texts) == (name == "full"), f"variant {name} changes nothing"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("name", ["first_loads", "tma_intake", "cluster_placement"])
def test_microbenchmark_builds_with_its_documented_command(tmp_path, name):
    """bench's CUDA microbenchmarks (first_loads.cu: the launch head; tma_intake.cu: a 64x64 tile's
    k-blocks by cluster layout; cluster_placement.cu: which SMs share a GPC) compile with the command
    their header gives, with no warnings and, for ptxas, no wgmma serialized."""
    from gemmtrace.build import nvcc_path

    src = Path(__file__).resolve().parents[1] / "bench" / f"{name}.cu"
    documented = re.search(rf"//   nvcc (.*) -o {name} bench/{name}\.cu", src.read_text())
    assert documented, "the header's build command"
    out = tmp_path / name
    r = subprocess.run([nvcc_path(), *documented.group(1).split(), "-Xptxas", "-v", "-o", str(out), str(src)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr
    assert "Performance Loss" not in r.stderr and "is injected" not in r.stderr, r.stderr
    assert out.stat().st_size > 0


def test_gpc_tile_orders_give_each_gpc_one_row_of_a():
    """bench/gpc_tile_orders.py: with clusters placed round-robin over four GPCs, gpc-a gives each
    GPC's 16 clusters one row of 16 tiles (they share A), gpc-b gives them four columns (they share
    B), and every order is a permutation of the tiles; a placement of the wrong size is refused."""
    mod = _bench_script("gpc_tile_orders")
    rows, cols = 4, 16
    groups = [c % 4 for c in range(64)]
    orders = mod.orders(groups, rows, cols)
    for name, o in orders.items():
        assert sorted(o.tolist()) == list(range(64)), name
    for g in range(4):
        mine = [int(orders["gpc-a"][c]) for c in range(64) if groups[c] == g]
        assert {t // cols for t in mine} == {g}
        assert len({t % cols for t in orders["gpc-b"][[c for c in range(64) if groups[c] == g]]}) == 4
    assert orders["row"].tolist() == list(range(64))
    with pytest.raises(SystemExit):
        mod.orders(groups[:60], rows, cols)


def test_gpc_tile_orders_on_a_measured_placement(tmp_path):
    """gpc-a on the placement measured on an H100 (uneven groups: four lone TPCs, one group of four
    clusters, seven of eight; bench/results/20261124-h100-l2-coalescing-gpc-kscan.json): each group's
    clusters take consecutive tiles in row order, so they span at most two rows of tiles; the
    placement's cluster_group line parses to 64 groups."""
    root = Path(__file__).resolve().parent.parent
    mod = _bench_script("gpc_tile_orders")
    results = json.loads((root / "bench" / "results" / "20261124-h100-l2-coalescing-gpc-kscan.json").read_text())
    placement = results["gpc_orders"]["placement_run_b"]
    tmp = tmp_path / "placement.txt"
    tmp.write_text("\n".join(placement) + "\n")
    groups = mod.cluster_groups(tmp)
    assert len(groups) == 64
    orders = mod.orders(groups, 4, 16)
    for g in set(groups):
        tiles = sorted(int(orders["gpc-a"][c]) for c in range(64) if groups[c] == g)
        assert tiles == list(range(tiles[0], tiles[0] + len(tiles)))  # consecutive
        assert len({t // 16 for t in tiles}) <= 2
