"""Timing GPU work with CUDA events without timing the host's launch path.

Why: events recorded one launch at a time (record, launch, record) bracket whatever the host does
between the two records. When a kernel runs for less time than the host needs to reach its launch
(about 9 us through gemmtrace's ctypes path, 16 us through ``torch.mm``, plus Python), the GPU sits
idle inside the event pair and the host's speed is measured, not the kernel's.

The method is NVBench's "cold" measurement, matched here rather than depended on (the ``cuda-bench``
package, NVBench's Python binding, runs benchmarks through its own state objects and CUDA bindings,
and a GPU box without a package index would have to carry it as a wheel). Per round:

1. a one-thread kernel (``gemmtrace/kernels/common/stream_hold.cu``) is launched on the stream and
   spins on a flag in pinned host memory, holding everything enqueued behind it;
2. for every variant, in an order that starts one variant later each round: event record, one
   launch, event record (optionally an L2 flush before each, outside the events, as NVBench does);
3. the host sets the flag; the GPU then runs the events and launches back to back, so each event
   pair brackets GPU work only;
4. after the round, the samples are kept unless the hold gave up waiting (its timeout expired before
   the host finished enqueueing: then the events bracketed host time again, and the round is redone).

One round per hold, not a batch of rounds: a round is a few launches per variant (the runner's
cuBLAS, plain and profiled builds: 3 to 5 launches, 3 commands each), well under the ~32 launches
NVBench advises queueing behind a blocking kernel, and its host time (a fraction of a millisecond) is
thousands of times shorter than the hold's timeout, so the hold never expires on a healthy host. A
batch would save one synchronization per round but queue hundreds of commands behind the hold, and a
full launch queue blocks the host inside a launch while the GPU waits for the host: a deadlock that
only the timeout ends.

Medians over rounds. Throttling is made visible, not hidden: two stamps per round (%globaltimer and
SM 0's clock64, before and after the round's launches) give the SM clock over each round, and
nvidia-smi reports the clock and the active clock-event reasons before and after. Rounds are not
discarded for a low clock: a large GEMM on a power-bound GPU runs below its maximum clock in steady
state, and dropping those rounds would report a speed the GPU does not sustain.
"""
from __future__ import annotations

import ctypes
import math
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from .paths import KERNELS_DIR, GemmtraceError

HOLD_SOURCE = KERNELS_DIR / "common" / "stream_hold.cu"
# Far longer than a round needs to enqueue (well under a millisecond); short enough that a callable
# which synchronizes while the stream is held (and so waits for the hold) costs seconds, not minutes.
DEFAULT_HOLD_TIMEOUT_S = 5.0
DEFAULT_MAX_RETRIES = 2  # a round whose hold expired is redone at most this many times in a row

Variant = tuple[str, Callable[[int], None]]


def round_order(n: int, r: int) -> list[int]:
    """Variant indices in the order round `r` runs them: each round starts one variant later, so no
    variant always follows the same one (which matters when clocks follow the previous launch)."""
    return [(r + v) % n for v in range(n)]


@dataclass
class TimingResult:
    """Per-variant samples (ms, one per kept round, in round order) and what the measurement saw."""

    samples: dict[str, list[float]]
    iters: int
    warmup: int
    flush_l2: bool
    hold_timeout_s: float
    hold_timeouts: int = 0  # rounds redone because the hold expired before the host had enqueued them
    host_enqueue_ms: list[float] = field(default_factory=list)  # host time to enqueue each kept round
    sm_clock_mhz: list[float] = field(default_factory=list)  # SM 0's clock over each kept round
    sm_clock_max_mhz: float | None = None  # the device's maximum SM clock
    smi_before: dict[str, Any] | None = None
    smi_after: dict[str, Any] | None = None

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def medians(self) -> dict[str, float]:
        return {name: statistics.median(s) for name, s in self.samples.items()}

    @property
    def method(self) -> str:
        return (
            f"CUDA events around single launches enqueued behind a stream hold (NVBench's cold method: the "
            f"events bracket GPU work only, not the host's launch path), {self.warmup} warm-up rounds, median "
            f"of {self.iters} rounds, variants interleaved in an order that rotates every round"
            + (", L2 flushed before each launch" if self.flush_l2 else "")
            + (f", {self.hold_timeouts} rounds redone after the hold expired" if self.hold_timeouts else "")
        )

    def diagnostics(self) -> dict[str, Any]:
        """A JSON-ready summary of how the measurement went (no samples)."""

        def stats(xs: list[float], unit: str) -> dict[str, float]:
            if not xs:
                return {}
            return {f"{unit}_median": statistics.median(xs), f"{unit}_min": min(xs), f"{unit}_max": max(xs)}

        return {
            "method": "stream hold",
            "rounds": self.iters,
            "warmup_rounds": self.warmup,
            "flush_l2": self.flush_l2,
            "hold_timeout_s": self.hold_timeout_s,
            "hold_timeouts": self.hold_timeouts,
            **{f"host_enqueue_{k}": v for k, v in stats(self.host_enqueue_ms, "ms").items()},
            **{f"sm_clock_{k}": v for k, v in stats(self.sm_clock_mhz, "mhz").items()},
            "sm_clock_max_mhz": self.sm_clock_max_mhz,
            "nvidia_smi_before": self.smi_before,
            "nvidia_smi_after": self.smi_after,
        }


class Backend(Protocol):
    """What the measurement loop needs from the GPU; tests drive the loop with a simulated one."""

    def new_mark(self) -> Any: ...
    def mark(self, ev: Any) -> None: ...
    def elapsed_ms(self, e0: Any, e1: Any) -> float: ...
    def hold(self) -> None: ...
    def release(self) -> None: ...
    def timed_out(self) -> bool: ...
    def flush(self) -> None: ...
    def stamp(self, slot: int) -> None: ...
    def clock_mhz(self) -> float | None: ...
    def sync(self) -> None: ...


def _check_variants(variants: Sequence[Variant], iters: int, warmup: int) -> list[Variant]:
    variants = list(variants)
    if not variants:
        raise GemmtraceError("nothing to time: give at least one (name, launch) variant.")
    names = [name for name, _ in variants]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise GemmtraceError(f"variant name {dup!r} is given twice; each variant needs its own name.")
    if iters < 1 or warmup < 0:
        raise GemmtraceError(f"timing needs at least one round and no negative warm-up; got iters={iters}, warmup={warmup}.")
    return variants


def measure(variants: Sequence[Variant], backend: Backend, *, iters: int, warmup: int, flush_l2: bool = False,
            hold_timeout_s: float = DEFAULT_HOLD_TIMEOUT_S, max_retries: int = DEFAULT_MAX_RETRIES) -> TimingResult:
    """The measurement loop, on any backend (see the module docstring for the method)."""
    variants = _check_variants(variants, iters, warmup)
    n = len(variants)
    result = TimingResult({name: [] for name, _ in variants}, iters, warmup, flush_l2, hold_timeout_s)
    launch = 0  # the global launch index each callable gets (callers rotate input sets by it)
    # Warm-up without a hold: clocks ramp, caches and lazily loaded modules settle (a module first
    # loaded while the stream is held could need a synchronization the hold would deadlock).
    for _ in range(warmup):
        for _, fn in variants:
            if flush_l2:
                backend.flush()
            fn(launch)
            launch += 1
    backend.sync()
    # Events made before the hold: creating one while the stream is held would add host time to a round.
    marks = [(backend.new_mark(), backend.new_mark()) for _ in range(n)]
    r, failed = 0, 0
    while r < iters:
        order = round_order(n, r)
        t0 = time.perf_counter()
        backend.hold()
        try:
            backend.stamp(0)
            for slot, v in enumerate(order):
                if flush_l2:
                    backend.flush()
                backend.mark(marks[slot][0])
                variants[v][1](launch)
                backend.mark(marks[slot][1])
                launch += 1
            backend.stamp(1)
        finally:  # whatever a callable raised, never leave the GPU spinning on the flag
            backend.release()
            host_s = time.perf_counter() - t0
            backend.sync()
        if backend.timed_out():
            result.hold_timeouts += 1
            failed += 1
            if failed > max_retries:
                raise GemmtraceError(
                    f"the host took {host_s:.1f} s to enqueue one round of {n} launches, longer than the stream "
                    f"hold's {hold_timeout_s:g} s timeout, {failed} times in a row: a timed launch must only enqueue "
                    f"GPU work (no .item(), .cpu(), synchronize or freeing of GPU memory), or the host is overloaded."
                )
            continue  # the round's events bracketed host time: redo it (same order, fresh launch indices)
        failed = 0
        for slot, v in enumerate(order):
            result.samples[variants[v][0]].append(backend.elapsed_ms(*marks[slot]))
        result.host_enqueue_ms.append(host_s * 1e3)
        clock = backend.clock_mhz()
        if clock is not None:
            result.sm_clock_mhz.append(clock)
        r += 1
    return result


@lru_cache(maxsize=1)
def hold_library() -> ctypes.CDLL:
    """The stream-hold support library, built with nvcc into gemmtrace's build cache on first use."""
    from .build import build_support

    path = build_support("stream_hold", HOLD_SOURCE)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise GemmtraceError(f"could not load the stream-hold library ({e}).") from None
    lib.gt_hold.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
    lib.gt_stamp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.gt_device_pointer.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.gt_max_sm_clock_khz.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.gt_error_string.argtypes = [ctypes.c_int]
    lib.gt_error_string.restype = ctypes.c_char_p
    for fn in (lib.gt_hold, lib.gt_stamp, lib.gt_device_pointer, lib.gt_max_sm_clock_khz):
        fn.restype = ctypes.c_int
    return lib


class CudaBackend:
    """The GPU side: torch's current stream, torch events, the stream hold and the clock stamps."""

    def __init__(self, torch, hold_timeout_s: float, flush_l2: bool):
        self.torch = torch
        self.lib = hold_library()
        self.stream = torch.cuda.current_stream()
        self._stream_ptr = ctypes.c_void_p(self.stream.cuda_stream)
        # Pinned host memory the GPU reads and writes through its device address (UVA).
        self._flags = torch.zeros(2, dtype=torch.int32).pin_memory()  # [0] release, [1] the hold timed out
        self._stamps = torch.zeros(4, dtype=torch.int64).pin_memory()  # (ns, cycles) before, after
        self._release = ctypes.c_int32.from_address(self._flags.data_ptr())
        self._expired = ctypes.c_int32.from_address(self._flags.data_ptr() + 4)
        self._flag_dev = self._device_pointer(self._flags.data_ptr())
        self._stamp_dev = self._device_pointer(self._stamps.data_ptr())
        self._timeout_ns = ctypes.c_uint64(int(hold_timeout_s * 1e9))
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self._stamp_blocks = 2 * props.multi_processor_count  # enough one-thread blocks that one lands on SM 0
        khz = ctypes.c_int(0)
        self.max_clock_mhz = khz.value / 1e3 if self.lib.gt_max_sm_clock_khz(ctypes.byref(khz)) == 0 and khz.value else None
        self._l2 = None
        if flush_l2:  # NVBench writes a buffer the size of the L2; twice that leaves nothing of the last launch
            l2 = getattr(props, "L2_cache_size", 0) or (50 << 20)
            self._l2 = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
        # Load the hold and stamp kernels now (a held stream must never wait on a module load).
        self._release.value = 1
        self._call(self.lib.gt_hold, self._stream_ptr, self._flag_dev, ctypes.c_void_p(self._flag_dev.value + 4), self._timeout_ns)
        self.stamp(0)
        self.sync()

    def _call(self, fn, *args) -> None:
        code = fn(*args)
        if code != 0:
            raise GemmtraceError(f"the timing harness's {fn.__name__} failed: {self.lib.gt_error_string(code).decode()}.")

    def _device_pointer(self, host: int) -> ctypes.c_void_p:
        dev = ctypes.c_void_p()
        self._call(self.lib.gt_device_pointer, ctypes.c_void_p(host), ctypes.byref(dev))
        return dev

    def new_mark(self):
        return self.torch.cuda.Event(enable_timing=True)

    def mark(self, ev) -> None:
        ev.record(self.stream)

    def elapsed_ms(self, e0, e1) -> float:
        return e0.elapsed_time(e1)

    def hold(self) -> None:
        self._release.value = 0
        self._expired.value = 0
        ctypes.memset(self._stamps.data_ptr(), 0, 32)
        self._call(self.lib.gt_hold, self._stream_ptr, self._flag_dev, ctypes.c_void_p(self._flag_dev.value + 4), self._timeout_ns)

    def release(self) -> None:
        self._release.value = 1

    def timed_out(self) -> bool:
        return bool(self._expired.value)

    def flush(self) -> None:
        if self._l2 is not None:
            self._l2.zero_()

    def stamp(self, slot: int) -> None:
        self._call(self.lib.gt_stamp, self._stream_ptr, ctypes.c_void_p(self._stamp_dev.value + 16 * slot), self._stamp_blocks)

    def clock_mhz(self) -> float | None:
        ns0, cyc0, ns1, cyc1 = (ctypes.c_uint64.from_address(self._stamps.data_ptr() + 8 * i).value for i in range(4))
        if not (ns0 and ns1 and ns1 > ns0 and cyc1 > cyc0):
            return None  # no block landed on SM 0, or the round was too short for the timer
        return (cyc1 - cyc0) / (ns1 - ns0) * 1e3

    def sync(self) -> None:
        self.stream.synchronize()


def _device_selector(torch) -> str:
    """nvidia-smi's name for torch's current device (its UUID; index 0 where torch has none)."""
    uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
    if uuid:
        text = str(uuid)
        return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"
    return "0"


def smi_clocks(device: str = "0") -> dict[str, Any] | None:
    """SM clock (MHz) and active clock-event reasons (a bit mask; 0 or 'idle' is unthrottled) from nvidia-smi."""
    # Newer drivers name the reasons clocks_event_reasons, older ones clocks_throttle_reasons.
    for query in ("clocks.sm,clocks_event_reasons.active", "clocks.sm,clocks_throttle_reasons.active", "clocks.sm"):
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", device],
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0:
            continue
        vals = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")] if out.stdout.strip() else []
        if len(vals) != len(query.split(",")) or any("N/A" in v or "Not Supported" in v for v in vals):
            continue
        info: dict[str, Any] = {"sm_clock_mhz": float(vals[0])}
        if len(vals) > 1:
            info["clock_event_reasons"] = vals[1]
        return info
    return None


def time_variants(variants: Sequence[Variant], *, iters: int = 30, warmup: int = 5, flush_l2: bool = False,
                  hold_timeout_s: float = DEFAULT_HOLD_TIMEOUT_S, max_retries: int = DEFAULT_MAX_RETRIES,
                  nvidia_smi: bool = True) -> TimingResult:
    """Time each variant's single launch behind a stream hold; `.samples[name]` holds one ms per round.

    Each variant is (name, launch) where launch(i) enqueues ONE launch on torch's current CUDA stream
    and nothing else (no synchronization); i is the global launch index, warm-up included, for
    rotating input sets. Variants are interleaved round by round in a rotating order.
    """
    try:
        import torch
    except ImportError:
        raise GemmtraceError("timing GPU work needs PyTorch with CUDA, and PyTorch is not installed.") from None
    if not torch.cuda.is_available():
        raise GemmtraceError("no CUDA GPU is visible, and timing GPU work needs one.")
    if not (hold_timeout_s > 0 and math.isfinite(hold_timeout_s)):
        raise GemmtraceError(f"the stream hold's timeout must be a positive number of seconds; got {hold_timeout_s}.")
    variants = _check_variants(variants, iters, warmup)
    backend = CudaBackend(torch, hold_timeout_s, flush_l2)
    device = _device_selector(torch) if nvidia_smi else ""
    # Read before the warm-up, so that nothing separates the warm-up from the timed rounds.
    before = smi_clocks(device) if nvidia_smi else None
    result = measure(variants, backend, iters=iters, warmup=warmup, flush_l2=flush_l2,
                     hold_timeout_s=hold_timeout_s, max_retries=max_retries)
    result.smi_before, result.smi_after = before, (smi_clocks(device) if nvidia_smi else None)
    result.sm_clock_max_mhz = backend.max_clock_mhz
    return result


@dataclass
class Timing:
    """One variant's samples (ms) and the statistics a run's timings keep."""

    samples_ms: list[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    def to_dict(self, prefix: str) -> dict:
        s = sorted(self.samples_ms)
        q = np.percentile(s, [25, 75])
        return {
            f"{prefix}_ms": self.median_ms,
            f"{prefix}_ms_min": s[0],
            f"{prefix}_ms_max": s[-1],
            f"{prefix}_ms_p25": float(q[0]),
            f"{prefix}_ms_p75": float(q[1]),
            f"{prefix}_samples": len(s),
        }


def timing_summary(plain: list[float], profiled: list[float] | None, reference: list[float] | None, flops: float | None,
                   reference_name: str | None = None, method: str = "") -> dict:
    """meta.json's "timings" from per-launch samples (ms): medians and quartiles of the plain build
    (kernel_*), the profiled build (profiled_*) and the reference (reference_*), TFLOP/s, profiler
    overhead and % of the reference. One form for gemmtrace run, bench and gemmtrace.benchmark."""
    out: dict = {}
    for prefix, samples in (("kernel", plain), ("profiled", profiled), ("reference", reference)):
        if samples:
            out.update(Timing(list(samples)).to_dict(prefix))
            if flops:
                out[("tflops" if prefix == "kernel" else f"{prefix}_tflops")] = flops / (out[f"{prefix}_ms"] * 1e-3) / 1e12
    if profiled:
        out["profiler_overhead"] = out["profiled_ms"] / out["kernel_ms"] - 1
    if reference:
        out["pct_of_reference"] = out["reference_ms"] / out["kernel_ms"]
        out["reference_name"] = reference_name or "reference"
    if method:
        out["method"] = method
    return out


def benchmark(plain: Callable[[int], None], profiled: Callable[[int], None] | None = None,
              reference: Callable[[int], None] | None = None, *, flops: float | None = None,
              reference_name: str | None = None, iters: int = 30, warmup: int = 5, flush_l2: bool = False) -> dict:
    """Time a user's kernel the way `gemmtrace run` times gemmtrace's: the plain build, the profiled
    build and a reference (e.g. torch.mm), one launch each per round in a rotating order, every launch
    enqueued behind a stream hold (module docstring); medians. Each callable enqueues one launch on
    torch's current stream and takes the launch index (rotate input sets with it). Returns a run's
    "timings" (pass it to Capture.run)."""
    variants: list[Variant] = [("plain", plain)]
    if profiled is not None:
        variants.append(("profiled", profiled))
    if reference is not None:
        variants.append(("reference", reference))
    result = time_variants(variants, iters=iters, warmup=warmup, flush_l2=flush_l2)
    out = timing_summary(result.samples["plain"], result.samples.get("profiled"), result.samples.get("reference"),
                         flops, reference_name=reference_name, method=f"{result.method} (plain, profiled, reference)")
    out["diagnostics"] = result.diagnostics()
    return out
