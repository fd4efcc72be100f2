"""gemmtrace.timing: the stream-hold library compiles, the measurement loop schedules and keeps the
right samples (on a simulated GPU), and on a GPU the method hides the host's launch path."""
from __future__ import annotations

import ctypes
import fnmatch
import json
import os
import statistics
import subprocess
import sys
import time
import tomllib

import pytest

from gemmtrace import timing
from gemmtrace.build import build_support
from gemmtrace.paths import PACKAGE_DIR, ROOT, GemmtraceError


# -- the support library --------------------------------------------------------------------------
def test_hold_library_compiles_and_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMTRACE_CACHE", str(tmp_path))
    lib_path = build_support("stream_hold", timing.HOLD_SOURCE)
    assert lib_path.is_file() and lib_path.is_relative_to(tmp_path)
    assert build_support("stream_hold", timing.HOLD_SOURCE) == lib_path  # cached, not rebuilt
    lib = ctypes.CDLL(str(lib_path))  # the CUDA runtime is linked statically: loads without a driver
    for name in ("gt_hold", "gt_stamp", "gt_device_pointer", "gt_max_sm_clock_khz", "gt_error_string"):
        assert hasattr(lib, name), name
    lib.gt_error_string.restype = ctypes.c_char_p
    assert lib.gt_error_string(0) == b"no error"
    # cubins for sm_80 and sm_90a (the compute_80 PTX beside them is stored compressed)
    blob = lib_path.read_bytes()
    assert b"-arch sm_80 " in blob and b"-arch sm_90a " in blob


def test_hold_source_ships_in_the_wheel():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["gemmtrace"]
    rel = timing.HOLD_SOURCE.relative_to(PACKAGE_DIR).as_posix()
    assert any(fnmatch.fnmatch(rel, p) for p in patterns), rel


def test_support_build_error_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMTRACE_CACHE", str(tmp_path))
    bad = tmp_path / "bad.cu"
    bad.write_text("this is not CUDA\n")
    with pytest.raises(GemmtraceError, match="nvcc failed to compile the bad support library"):
        build_support("bad", bad)
    with pytest.raises(GemmtraceError, match="is missing"):
        build_support("gone", tmp_path / "gone.cu")


# -- the measurement loop on a simulated GPU ------------------------------------------------------
class _Mark:
    t: float | None = None


class FakeGpu:
    """One in-order stream with a host clock and a GPU clock (seconds). Work enqueued at host time h
    starts at max(h, when the previous item finished); the hold ends when the host releases it or
    when its timeout expires, whichever is first."""

    def __init__(self, hold_timeout: float = 1.0):
        self.host = 0.0
        self.gpu = 0.0
        self.queue: list[tuple] = []
        self.hold_timeout = hold_timeout
        self.release_at = None
        self.expired = False
        self.log: list[str] = []
        self.holding = False
        self.syncs = 0

    # what the callables do
    def host_work(self, s: float) -> None:
        self.host += s

    def kernel(self, name: str, s: float) -> None:
        self.queue.append(("kernel", self.host, s))
        self.log.append(name)

    # Backend
    def new_mark(self):
        return _Mark()

    def mark(self, ev) -> None:
        self.queue.append(("mark", self.host, ev))

    def elapsed_ms(self, e0, e1) -> float:
        return (e1.t - e0.t) * 1e3

    def hold(self) -> None:
        assert not self.holding, "hold while holding"
        self.holding, self.release_at, self.expired = True, None, False
        self.queue.append(("hold", self.host, None))
        self.log.append("hold")

    def release(self) -> None:
        self.holding = False
        self.release_at = self.host
        self.log.append("release")

    def timed_out(self) -> bool:
        return self.expired

    def flush(self) -> None:
        self.queue.append(("kernel", self.host, 1e-6))
        self.log.append("flush")

    def stamp(self, slot: int) -> None:
        pass

    def clock_mhz(self):
        return 1500.0

    def sync(self) -> None:
        assert not self.holding, "synchronized while the stream is held (would deadlock)"
        self.syncs += 1
        t = self.gpu
        for kind, enq, arg in self.queue:
            t = max(t, enq)
            if kind == "hold":
                end = self.release_at if self.release_at is not None else float("inf")
                if end > t + self.hold_timeout:
                    self.expired, end = True, t + self.hold_timeout
                t = max(t, end)
            elif kind == "kernel":
                t += arg
            else:
                arg.t = t
        self.queue.clear()
        self.gpu = t
        self.host = max(self.host, t)


def _variants(gpu: FakeGpu, spec: dict[str, tuple[float, float]], calls: list | None = None):
    """name -> (host time before the launch, kernel time), both in seconds."""

    def make(name, host_s, dur):
        def fn(i):
            if calls is not None:
                calls.append((name, i))
            gpu.host_work(host_s)
            gpu.kernel(name, dur)

        return fn

    return [(name, make(name, h, d)) for name, (h, d) in spec.items()]


def _naive(gpu: FakeGpu, variants, iters: int) -> dict[str, list[float]]:
    """The old method: event, launch, event, one launch at a time, no hold."""
    out = {name: [] for name, _ in variants}
    for r in range(iters):
        for v in timing.round_order(len(variants), r):
            name, fn = variants[v]
            e0, e1 = gpu.new_mark(), gpu.new_mark()
            gpu.mark(e0)
            fn(0)
            gpu.mark(e1)
            gpu.sync()
            out[name].append(gpu.elapsed_ms(e0, e1))
    return out


def test_round_order_rotates():
    assert [timing.round_order(3, r) for r in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    # over n rounds every variant takes every position once
    for n in (1, 2, 5):
        for v in range(n):
            assert sorted(timing.round_order(n, r).index(v) for r in range(n)) == list(range(n))


def test_hold_hides_the_host_between_the_events():
    gpu = FakeGpu()
    # 20 us kernels; the "slow" variant's host path takes 2 ms between its start event and its launch
    spec = {"fast": (10e-6, 20e-6), "slow": (2e-3, 20e-6), "cublas": (16e-6, 30e-6)}
    res = timing.measure(_variants(gpu, spec), gpu, iters=9, warmup=2)
    assert res.medians() == pytest.approx({"fast": 0.020, "slow": 0.020, "cublas": 0.030}, rel=1e-9)
    assert all(len(s) == 9 for s in res.samples.values())
    assert res.hold_timeouts == 0 and len(res.host_enqueue_ms) == 9 and res.sm_clock_mhz == [1500.0] * 9
    # The same variants timed the old way measure the host: 2 ms + 20 us, and 16 us + 30 us for cuBLAS.
    gpu2 = FakeGpu()
    naive = {k: statistics.median(v) for k, v in _naive(gpu2, _variants(gpu2, spec), 3).items()}
    assert naive["slow"] == pytest.approx(2.020, rel=1e-9)
    assert naive["cublas"] == pytest.approx(0.046, rel=1e-9)


def test_launch_indices_warmup_and_rotation():
    gpu = FakeGpu()
    calls: list = []
    spec = {"a": (1e-6, 1e-5), "b": (1e-6, 2e-5), "c": (1e-6, 3e-5)}
    res = timing.measure(_variants(gpu, spec, calls), gpu, iters=4, warmup=2)
    # every launch gets the next global index, warm-up included (callers rotate input sets by it)
    assert [i for _, i in calls] == list(range(2 * 3 + 4 * 3))
    # warm-up in the given order, unheld; then one hold per round, in a rotating order
    assert [n for n, _ in calls[:6]] == ["a", "b", "c"] * 2
    timed = [n for n, _ in calls[6:]]
    assert timed == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert gpu.log[:6] == ["a", "b", "c"] * 2 and gpu.log.count("hold") == 4 == gpu.log.count("release")
    # samples are kept per variant whatever the slot they ran in
    assert res.samples == {k: [pytest.approx(d * 1e3)] * 4 for k, (_, d) in spec.items()}


def test_flush_l2_goes_before_each_launch_outside_the_events():
    gpu = FakeGpu()
    res = timing.measure(_variants(gpu, {"a": (0, 1e-5), "b": (0, 1e-5)}), gpu, iters=2, warmup=1, flush_l2=True)
    assert gpu.log == ["flush", "a", "flush", "b"] + ["hold", "flush", "a", "flush", "b", "release",
                                                       "hold", "flush", "b", "flush", "a", "release"]
    assert res.median("a") == pytest.approx(0.01) and "L2 flushed" in res.method


def test_an_expired_hold_redoes_the_round():
    gpu = FakeGpu(hold_timeout=0.5)
    slow_rounds = {1}  # the host stalls for a second in round 1's first launch
    state = {"round": -1}

    def first(i):
        if i >= 2:  # timed launches (2 variants, 1 warm-up round)
            state["round"] += 1
            if state["round"] in slow_rounds:
                gpu.host_work(1.0)
        gpu.kernel("a", 1e-5)

    def second(i):
        gpu.kernel("b", 2e-5)

    res = timing.measure([("a", first), ("b", second)], gpu, iters=3, warmup=1, hold_timeout_s=0.5)
    assert res.hold_timeouts == 1
    assert len(res.samples["a"]) == len(res.samples["b"]) == 3
    # the expired round's samples (a second of host time) were dropped, not kept
    assert max(res.samples["a"]) == pytest.approx(0.01) and max(res.samples["b"]) == pytest.approx(0.02)
    assert "1 rounds redone" in res.method and res.diagnostics()["hold_timeouts"] == 1


def test_a_host_that_always_stalls_is_one_sentence():
    gpu = FakeGpu(hold_timeout=0.1)

    def stalls(i):
        gpu.host_work(1.0)  # like a callable that synchronizes while the stream is held
        gpu.kernel("a", 1e-5)

    with pytest.raises(GemmtraceError, match=r"longer than the stream hold's 0.1 s timeout, 3 times in a row") as e:
        timing.measure([("a", stalls)], gpu, iters=2, warmup=0, hold_timeout_s=0.1, max_retries=2)
    assert "\n" not in str(e.value)


def test_a_failing_launch_releases_the_hold():
    gpu = FakeGpu()

    def boom(i):
        if i >= 1:
            raise GemmtraceError("kernel x: launch failed.")
        gpu.kernel("x", 1e-5)

    with pytest.raises(GemmtraceError, match="launch failed"):
        timing.measure([("x", boom)], gpu, iters=3, warmup=1)
    assert gpu.log[-1] == "release" and not gpu.holding and not gpu.queue  # released and drained


@pytest.mark.parametrize("variants, iters, warmup, msg", [
    ([], 3, 1, "nothing to time"),
    ([("a", print), ("a", print)], 3, 1, "given twice"),
    ([("a", print)], 0, 1, "at least one round"),
    ([("a", print)], 3, -1, "no negative warm-up"),
])
def test_bad_arguments(variants, iters, warmup, msg):
    with pytest.raises(GemmtraceError, match=msg):
        timing.measure(variants, FakeGpu(), iters=iters, warmup=warmup)


def test_diagnostics_are_json():
    gpu = FakeGpu()
    res = timing.measure(_variants(gpu, {"a": (0, 1e-5)}), gpu, iters=3, warmup=1)
    d = json.loads(json.dumps(res.diagnostics()))
    assert d["rounds"] == 3 and d["hold_timeouts"] == 0 and d["sm_clock_mhz_median"] == 1500.0
    assert "stream hold" in res.method and "median of 3 rounds" in res.method


# -- on the GPU -----------------------------------------------------------------------------------
SLEEP_CYCLES = 200_000  # about 0.1 ms at 2 GHz: far above the events' resolution
HOST_DELAY_S = 0.002


@pytest.mark.gpu
def test_gpu_known_duration_with_and_without_a_host_delay():
    import torch

    def plain(i):
        torch.cuda._sleep(SLEEP_CYCLES)

    def delayed(i):  # host work between the start event and the launch, as a slow launch path is
        time.sleep(HOST_DELAY_S)
        torch.cuda._sleep(SLEEP_CYCLES)

    variants = [("plain", plain), ("delayed", delayed)]
    res = timing.time_variants(variants, iters=20, warmup=3)
    held = res.medians()
    assert res.hold_timeouts == 0
    assert held["delayed"] == pytest.approx(held["plain"], rel=0.03), held

    # The old method on the same kernels: the 2 ms of host time lands inside the delayed pair.
    naive: dict[str, list[float]] = {"plain": [], "delayed": []}
    for r in range(10):
        for v in timing.round_order(2, r):
            name, fn = variants[v]
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            e0.record()
            fn(0)
            e1.record()
            torch.cuda.synchronize()
            naive[name].append(e0.elapsed_time(e1))
    assert statistics.median(naive["delayed"]) > held["plain"] + 0.75 * HOST_DELAY_S * 1e3, (naive, held)


@pytest.mark.gpu
def test_gpu_an_expired_hold_is_detected_and_never_hangs():
    import torch

    def slow_host(i):  # 20 ms of host time while the stream is held, against a 1 ms timeout
        time.sleep(0.02)
        torch.cuda._sleep(1000)

    t0 = time.perf_counter()
    with pytest.raises(GemmtraceError, match="longer than the stream hold's 0.001 s timeout, 2 times in a row"):
        timing.time_variants([("slow", slow_host)], iters=3, warmup=1, hold_timeout_s=0.001, max_retries=1,
                             nvidia_smi=False)
    assert time.perf_counter() - t0 < 5
    # the next measurement starts clean
    res = timing.time_variants([("quick", lambda i: torch.cuda._sleep(1000))], iters=5, warmup=1, nvidia_smi=False)
    assert res.hold_timeouts == 0 and len(res.samples["quick"]) == 5


_CUBLAS_SCRIPT = r"""
import json, torch
from gemmtrace.timing import time_variants
n = 2048
gen = torch.Generator(device="cuda").manual_seed(0)
# 8 input sets of 16 MB: launches taking them in turn stream more than twice a 50 MB L2 between reuses
sets = [(torch.randn(n, n, device="cuda", generator=gen).bfloat16(), torch.randn(n, n, device="cuda", generator=gen).bfloat16())
        for _ in range(8)]
c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
res = time_variants([("cublas", lambda i: torch.mm(sets[i % 8][0], sets[i % 8][1].t(), out=c))], iters=100, warmup=10)
print(json.dumps({"ms": res.median("cublas"), "timeouts": res.hold_timeouts, "clock": res.diagnostics().get("sm_clock_mhz_median")}))
"""


@pytest.mark.gpu
def test_gpu_cublas_2048_repeats_across_processes():
    timing.hold_library()  # build once here, so the three processes find it in the cache
    # this checkout's gemmtrace, whether or not it is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_DIR.parent), os.environ.get("PYTHONPATH")]))}
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", _CUBLAS_SCRIPT], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ms = [r["ms"] for r in runs]
    assert all(r["timeouts"] == 0 for r in runs), runs
    assert max(ms) / min(ms) - 1 < 0.03, runs
    # SM 0 is busy through a GEMM round, so its clock over the round is a plausible clock
    assert all(r["clock"] is not None and 500 < r["clock"] < 3000 for r in runs), runs
    tflops = 2 * 2048**3 / (statistics.median(ms) * 1e-3) / 1e12
    print(f"cuBLAS bf16 2048^3 over three processes: {ms} ms, {tflops:.0f} TFLOP/s at the median")


@pytest.mark.gpu
def test_benchmark_reports_overhead_and_reference_for_a_users_kernels():
    """gemmtrace.benchmark on kernels of known duration: a 'profiled' kernel 10 % longer than the
    'plain' one reads as +10 % overhead, and a reference twice as long as 200 % of it."""
    import torch

    import gemmtrace as gt

    cycles = 200_000
    t = gt.benchmark(plain=lambda i: torch.cuda._sleep(cycles), profiled=lambda i: torch.cuda._sleep(int(cycles * 1.1)),
                     reference=lambda i: torch.cuda._sleep(2 * cycles), flops=1e9, reference_name="sleep x2", iters=20)
    assert t["profiler_overhead"] == pytest.approx(0.10, abs=0.02)
    assert t["pct_of_reference"] == pytest.approx(2.0, rel=0.03)
    assert t["reference_name"] == "sleep x2" and t["kernel_samples"] == 20 and "stream" in t["method"]
